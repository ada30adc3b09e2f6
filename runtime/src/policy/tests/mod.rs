//! Tests of the draft-width policy, a file per module under test (kinds,
//! resolution, the classifier, declarations, the table compiler, the
//! fingerprint, speculation by policy), with the helpers they share here.

use super::declared::{Declared, from_config, read_declared};
use super::kind::{DeclarationSource, DrafterKind};
use super::kind::{DrafterSettings, Probability};
use super::quant::{QuantClass, classify_gguf, classify_hf_config_file, classify_path};
use super::resolve::{EnvWidth, Fallback, PolicyError, Provenance, Resolution, ResolveInput, Resolver, Run, StepKind};
use super::table::{Problem, RecordCheck, Table, TableError, compile};
use super::width::{self, Width};
use super::{DeviceClass, HostClass, ModelClass, WIDTH_ENV};
use super::{KERNEL_FINGERPRINT, compiled_table};
use crate::gguf::{GgufFile, Value, test_writer::Builder};
use kernels::quant::GgmlType;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// This test build's fingerprint stand-in, and another build's.
pub(crate) const FP: &str = "0123456789abcdef";
pub(crate) const OTHER_FP: &str = "fedcba9876543210";

pub(crate) fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/policy/quant").join(name)
}

pub(crate) fn known(class: &str) -> QuantClass {
    QuantClass { class: class.into(), from: format!("test: {class}"), file: None, field: None, format: None }
}

/// The fingerprint stand-in: every key of this test build has [`FP`].
pub(crate) fn this_build(_: &DeviceClass, _: Option<&[String]>) -> String {
    FP.to_string()
}

/// Another build's fingerprints: [`OTHER_FP`] for every key.
pub(crate) fn other_build(_: &DeviceClass, _: Option<&[String]>) -> String {
    OTHER_FP.to_string()
}

pub(crate) fn resolver(t: &Table) -> Resolver<'_> {
    Resolver { table: t, fingerprint: &this_build }
}

/// The test target's weight formats.
pub(crate) fn formats() -> Vec<String> {
    vec!["q4_1".into(), "q8_0".into()]
}

pub(crate) fn no_decl() -> Declared {
    Declared::Absent { why: "test: nothing declared".into() }
}

/// The settings field an entry of `drafter` needs.
pub(crate) fn settings_toml(drafter: &str) -> &'static str {
    match drafter {
        "ngram" => "{ ngram_min = 3, ngram_max = 4 }",
        "layerskip" => "{ layers = [0, 1, 2] }",
        "suffix" => "{ suffix_min_match = 2, suffix_max_match = 32, suffix_min_prob = 0.5 }",
        _ => "{}",
    }
}

/// The test host's CPU class, and the test target's model.
pub(crate) const HOST: &str = "amd-zen4";
pub(crate) const PARAMS: u64 = 134_515_008;

/// The model and prompts fields of a test entry.
pub(crate) fn model_toml(arch: &str, params: u64) -> String {
    format!(
        "model = {{ architecture = \"{arch}\", parameters = {params}, file = \"m.gguf\", sha256 = \"{}\" }}\n\
         prompts = {{ name = \"prompts/sweep.jsonl\", sha256 = \"{}\" }}\n",
        "a".repeat(64),
        "b".repeat(64)
    )
}

/// One `[[entry]]` with sensible values for the fields a test does not vary
/// (CPU entries at 2 threads, on [`HOST`], for a llama of [`PARAMS`]).
pub(crate) fn entry(drafter: &str, device: &str, quant: &str, width: &str, fp: &str) -> String {
    entry_on(HOST, "llama", PARAMS, drafter, device, quant, width, fp)
}

/// [`entry`] measured on another host class or model.
#[allow(clippy::too_many_arguments)]
pub(crate) fn entry_on(
    host: &str,
    arch: &str,
    params: u64,
    drafter: &str,
    device: &str,
    quant: &str,
    width: &str,
    fp: &str,
) -> String {
    let threads = if device.starts_with("cpu:") { "threads = 2\n" } else { "" };
    format!(
        "[[entry]]\ndrafter = \"{drafter}\"\ndevice_class = \"{device}\"\nhost_class = \"{host}\"\n\
         target_quant = \"{quant}\"\n{threads}{}drafter_settings = {}\nweight_formats = [\"q4_1\", \"q8_0\"]\n\
         width = {width}\nrecord = \"records/r1\"\ndate = 2026-01-15\nratio = 1.5\n\
         ratio_interval = [1.4, 1.6]\nhost = \"test host\"\nverify_fingerprint = \"{fp}\"\n\n",
        model_toml(arch, params),
        settings_toml(drafter)
    )
}

pub(crate) fn table(entries: &[String]) -> Table {
    let text = format!("schema_version = 3\n\n{}", entries.concat());
    compile("test.toml", &text, RecordCheck::Skip).unwrap_or_else(|e| panic!("{e}"))
}

pub(crate) fn empty() -> Table {
    table(&[])
}

pub(crate) struct In<'a> {
    drafter: DrafterKind,
    declared: Declared,
    device: &'a str,
    host: HostClass,
    model: ModelClass,
    quant: QuantClass,
    threads: usize,
    formats: Vec<String>,
    settings: DrafterSettings,
    pub(crate) flag: Option<&'a str>,
    env: Option<&'a str>,
}

impl<'a> In<'a> {
    pub(crate) fn new(drafter: DrafterKind, quant: &str) -> Self {
        In {
            drafter,
            declared: no_decl(),
            device: "cpu:x86_64-avx2",
            host: HostClass::parse(HOST).unwrap(),
            model: ModelClass { architecture: "llama".into(), parameters: PARAMS },
            quant: known(quant),
            threads: 2,
            formats: formats(),
            settings: DrafterSettings::default(),
            flag: None,
            env: None,
        }
    }

    /// This run's key parts (the device class leaks: tests build a few).
    fn host(&self) -> Run<'_> {
        let device: &'static DeviceClass = Box::leak(Box::new(DeviceClass::parse(self.device).unwrap()));
        Run {
            device,
            host: &self.host,
            quant: &self.quant,
            model: &self.model,
            file: Some("m.gguf"),
            threads: self.threads,
            weight_formats: Some(&self.formats),
        }
    }

    fn resolve_with(&self, r: &Resolver<'_>) -> Result<Resolution, PolicyError> {
        let env = self.env.map(|v| EnvWidth { name: WIDTH_ENV, value: v.to_string() });
        r.resolve(&ResolveInput {
            drafter: self.drafter,
            declared: &self.declared,
            run: self.host(),
            settings: &self.settings,
            flag: self.flag,
            env: env.as_ref(),
        })
    }

    pub(crate) fn resolve(&self, t: &Table) -> Result<Resolution, PolicyError> {
        self.resolve_with(&resolver(t))
    }

    /// What `generate` without `--drafter` does.
    fn auto(&self, t: &Table) -> Resolution {
        resolver(t).auto(&self.host())
    }
}

pub(crate) fn decided(r: &Resolution) -> StepKind {
    let d: Vec<_> = r.steps.iter().filter(|s| s.decided).collect();
    assert_eq!(d.len(), 1, "exactly one step decides: {:?}", r.steps);
    d[0].step
}

mod by_policy;
mod classification;
mod declarations;
mod fingerprint;
mod kinds;
mod resolution;
mod table;

pub(crate) use classification::gguf_with;
