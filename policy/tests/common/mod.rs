//! Test helpers: a table of entries built from strings, a resolver with a
//! stand-in fingerprint, and [`In`], one resolution's input with sensible
//! values for what a test does not vary.
//!
//! Shared by the policy crate's integration tests (`mod common;`) and the
//! runtime's tests of the classifier, the compiled table and `policy
//! explain` (`runtime/src/lib.rs` includes this file as `test_policy`), so
//! an entry reads the same wherever a test builds one.

#![allow(dead_code)]

use ::policy::resolve::{EnvWidth, PolicyError, Resolution, ResolveInput, Resolver, Run, StepKind};
use ::policy::table::{RecordCheck, Table, compile};
use ::policy::{Declared, DeviceClass, DrafterKind, DrafterSettings, HostClass, ModelClass, QuantClass, WIDTH_ENV};

/// This test build's fingerprint stand-in, and another build's.
pub const FP: &str = "0123456789abcdef";
pub const OTHER_FP: &str = "fedcba9876543210";

pub fn known(class: &str) -> QuantClass {
    QuantClass { class: class.into(), from: format!("test: {class}"), file: None, field: None, format: None }
}

/// The fingerprint stand-in: every key of this test build has [`FP`].
pub fn this_build(_: &DeviceClass, _: Option<&[String]>) -> String {
    FP.to_string()
}

/// Another build's fingerprints: [`OTHER_FP`] for every key.
pub fn other_build(_: &DeviceClass, _: Option<&[String]>) -> String {
    OTHER_FP.to_string()
}

pub fn resolver(t: &Table) -> Resolver<'_> {
    Resolver { table: t, fingerprint: &this_build }
}

/// The test target's weight formats.
pub fn formats() -> Vec<String> {
    vec!["q4_1".into(), "q8_0".into()]
}

pub fn no_decl() -> Declared {
    Declared::Absent { why: "test: nothing declared".into() }
}

/// The settings field an entry of `drafter` needs.
pub fn settings_toml(drafter: &str) -> &'static str {
    match drafter {
        "ngram" => "{ ngram_min = 3, ngram_max = 4 }",
        "layerskip" => "{ layers = [0, 1, 2] }",
        "suffix" => "{ suffix_min_match = 2, suffix_max_match = 32, suffix_min_prob = 0.5 }",
        _ => "{}",
    }
}

/// The test host's CPU class, and the test target's model.
pub const HOST: &str = "amd-zen4";
pub const PARAMS: u64 = 134_515_008;

/// The model and prompts fields of a test entry.
pub fn model_toml(arch: &str, params: u64) -> String {
    format!(
        "model = {{ architecture = \"{arch}\", parameters = {params}, file = \"m.gguf\", sha256 = \"{}\" }}\n\
         prompts = {{ name = \"prompts/sweep.jsonl\", sha256 = \"{}\" }}\n",
        "a".repeat(64),
        "b".repeat(64)
    )
}

/// One `[[entry]]` with sensible values for the fields a test does not vary
/// (CPU entries at 2 threads, on [`HOST`], for a llama of [`PARAMS`]).
pub fn entry(drafter: &str, device: &str, quant: &str, width: &str, fp: &str) -> String {
    entry_on(HOST, "llama", PARAMS, drafter, device, quant, width, fp)
}

/// [`entry`] measured on another host class or model.
#[allow(clippy::too_many_arguments)]
pub fn entry_on(
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

pub fn table(entries: &[String]) -> Table {
    let text = format!("schema_version = 3\n\n{}", entries.concat());
    compile("test.toml", &text, RecordCheck::Skip).unwrap_or_else(|e| panic!("{e}"))
}

pub fn empty() -> Table {
    table(&[])
}

/// One resolution's input: a CPU run on [`HOST`] of a llama of [`PARAMS`]
/// at 2 threads, no declaration, no override; a test sets what it varies.
pub struct In<'a> {
    pub drafter: DrafterKind,
    pub declared: Declared,
    pub device: &'a str,
    pub host: HostClass,
    pub model: ModelClass,
    pub quant: QuantClass,
    pub threads: usize,
    pub formats: Vec<String>,
    /// The run's activation precision (`None`: no K-quant matrix).
    pub precision: Option<::policy::Precision>,
    pub settings: DrafterSettings,
    pub flag: Option<&'a str>,
    pub env: Option<&'a str>,
}

impl<'a> In<'a> {
    pub fn new(drafter: DrafterKind, quant: &str) -> Self {
        In {
            drafter,
            declared: no_decl(),
            device: "cpu:x86_64-avx2",
            host: HostClass::parse(HOST).unwrap(),
            model: ModelClass { architecture: "llama".into(), parameters: PARAMS },
            quant: known(quant),
            threads: 2,
            formats: formats(),
            precision: None,
            settings: DrafterSettings::default(),
            flag: None,
            env: None,
        }
    }

    /// This run's key parts (the device class leaks: tests build a few).
    pub fn host(&self) -> Run<'_> {
        let device: &'static DeviceClass = Box::leak(Box::new(DeviceClass::parse(self.device).unwrap()));
        Run {
            device,
            host: &self.host,
            quant: &self.quant,
            model: &self.model,
            file: Some("m.gguf"),
            threads: self.threads,
            weight_formats: Some(&self.formats),
            precision: self.precision,
        }
    }

    pub fn resolve_with(&self, r: &Resolver<'_>) -> Result<Resolution, PolicyError> {
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

    pub fn resolve(&self, t: &Table) -> Result<Resolution, PolicyError> {
        self.resolve_with(&resolver(t))
    }

    /// What `generate` without `--drafter` does.
    pub fn auto(&self, t: &Table) -> Resolution {
        resolver(t).auto(&self.host())
    }
}

/// The one step that decided `r`.
pub fn decided(r: &Resolution) -> StepKind {
    let d: Vec<_> = r.steps.iter().filter(|s| s.decided).collect();
    assert_eq!(d.len(), 1, "exactly one step decides: {:?}", r.steps);
    d[0].step
}
