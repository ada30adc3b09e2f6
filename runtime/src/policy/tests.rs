//! Tests of the draft-width policy: kinds, the table compiler, the
//! classifier, declarations and resolution.

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
    flag: Option<&'a str>,
    env: Option<&'a str>,
}

impl<'a> In<'a> {
    fn new(drafter: DrafterKind, quant: &str) -> Self {
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

    fn resolve(&self, t: &Table) -> Result<Resolution, PolicyError> {
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

// ------------------------------------------------------------------ kinds

#[test]
fn every_kind_round_trips_through_its_name_and_unknown_names_list_the_kinds() {
    for k in DrafterKind::ALL {
        assert_eq!(k.as_str().parse::<DrafterKind>().unwrap(), k);
        assert_eq!(k.to_string(), k.as_str());
        assert_eq!(serde_json::to_string(&k).unwrap(), format!("\"{k}\""));
        assert_eq!(serde_json::from_str::<DrafterKind>(&format!("\"{k}\"")).unwrap(), k);
    }
    let e = "eagle".parse::<DrafterKind>().unwrap_err().to_string();
    assert!(e.contains("eagle") && e.contains("ngram, layerskip, draft-model, dflash, mtp, suffix"), "{e}");
}

/// Which step decides for each kind, given a declaration, a measured entry,
/// both, or neither: the kinds' dispatch matrix.
#[test]
fn the_kinds_dispatch_matrix() {
    use DeclarationSource as D;
    use StepKind::{Declared as Decl, Default as Def, Table as Tab};
    // kind, declaration source, decider with: (nothing, declaration, entry, declaration + entry)
    let matrix = [
        (DrafterKind::Ngram, D::None, [Def, Def, Tab, Tab]),
        (DrafterKind::Layerskip, D::None, [Def, Def, Tab, Tab]),
        (DrafterKind::DraftModel, D::DrafterModel, [Def, Decl, Tab, Decl]),
        (DrafterKind::Dflash, D::DrafterModel, [Def, Decl, Tab, Decl]),
        (DrafterKind::Mtp, D::Target, [Def, Decl, Tab, Decl]),
        (DrafterKind::Suffix, D::None, [Def, Def, Tab, Tab]),
    ];
    assert_eq!(matrix.len(), DrafterKind::ALL.len(), "every kind is in the matrix");
    for (kind, source, deciders) in matrix {
        assert_eq!(kind.declaration_source(), source, "{kind}");
        let with_entry = table(&[entry(kind.as_str(), "cpu:x86_64-avx2", "q4_1", "6", FP)]);
        let cases = [(false, false), (true, false), (false, true), (true, true)];
        for ((declares, measured), want) in cases.into_iter().zip(deciders) {
            let mut i = In::new(kind, "q4_1");
            if declares {
                i.declared = Declared::Width { width: Width::new(9).unwrap(), evidence: "test: declared 9".into() };
            }
            let t = if measured { with_entry.clone() } else { empty() };
            let r = i.resolve(&t).unwrap();
            assert_eq!(decided(&r), want, "{kind} declares={declares} measured={measured}: {r:?}");
            let want_width = match want {
                Decl => 9,
                Tab => 6,
                _ => kind.default_width().get(),
            };
            assert_eq!(r.width.map(Width::get), Some(want_width), "{kind} declares={declares} measured={measured}");
            // The override beats every one of them.
            i.flag = Some("2");
            let r = i.resolve(&t).unwrap();
            assert_eq!((decided(&r), r.width.map(Width::get)), (StepKind::Flag, Some(2)));
        }
    }
}

#[test]
fn per_kind_constants_apply_when_no_entry_matches() {
    // A copy of each constant: changing one must change this test too.
    let constants = [
        (DrafterKind::Ngram, 4),
        (DrafterKind::Layerskip, 4),
        (DrafterKind::DraftModel, 4),
        (DrafterKind::Dflash, 7),
        (DrafterKind::Mtp, 1),
        (DrafterKind::Suffix, 4),
    ];
    assert_eq!(constants.len(), DrafterKind::ALL.len());
    // Entries exist, but for other keys: another device, quant and kind.
    let t = table(&[
        entry("ngram", "cpu:x86_64-avx512vnni", "q4_1", "6", FP),
        entry("ngram", "cpu:x86_64-avx2", "q8_0", "6", FP),
        entry("layerskip", "cuda:sm_90", "q4_1", "6", FP),
    ]);
    for (kind, n) in constants {
        assert_eq!(kind.default_width().get(), n, "{kind}");
        let r = In::new(kind, "q4_1").resolve(&t).unwrap();
        assert_eq!(r.width.map(Width::get), Some(n), "{kind}");
        assert_eq!(decided(&r), StepKind::Default);
        assert_eq!(
            r.width_from,
            format!(
                "per-kind default {n}: no measurement for {kind} on cpu:x86_64-avx2 (amd-zen4) with a q4_1 llama 134.5M target at 2 threads"
            )
        );
    }
}

// ------------------------------------------------------------- resolution

#[test]
fn a_target_directory_with_no_config_json_classifies_unknown_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let q = classify_path(dir.path());
    assert!(q.is_unknown(), "{q:?}");
    assert_eq!(q.from, format!("config.json not found in {}", dir.path().display()));
    // Unknown never matches an entry, whatever the table holds.
    let t = table(&[entry("ngram", "cpu:x86_64-avx2", "q4_1", "6", FP)]);
    let mut i = In::new(DrafterKind::Ngram, "unused");
    i.quant = q;
    let r = i.resolve(&t).unwrap();
    assert_eq!(r.width.map(Width::get), Some(4));
    assert_eq!(
        r.width_from,
        format!(
            "per-kind default 4: no key for ngram on cpu:x86_64-avx2 (amd-zen4) at 2 threads: target quantization unknown \
             (config.json not found in {d}; read {d}/config.json)",
            d = dir.path().display()
        )
    );
    assert!(matches!(r.provenance, Provenance::Default { fallback: Fallback::UnknownQuant { .. }, .. }));
}

#[test]
fn the_flag_beats_the_environment_and_a_difference_is_said() {
    let t = table(&[entry("ngram", "cpu:x86_64-avx2", "q4_1", "6", FP)]);
    let mut i = In::new(DrafterKind::Ngram, "q4_1");
    i.declared = Declared::Width { width: Width::new(9).unwrap(), evidence: "test".into() };

    i.env = Some("3");
    let r = i.resolve(&t).unwrap();
    assert_eq!((decided(&r), r.width.map(Width::get)), (StepKind::Env, Some(3)));
    assert_eq!(r.width_from, "DRAFTWISE_DRAFT_WIDTH=3");

    i.flag = Some("5");
    let r = i.resolve(&t).unwrap();
    assert_eq!((decided(&r), r.width.map(Width::get)), (StepKind::Flag, Some(5)));
    assert_eq!(r.width_from, "--draft-width 5, overriding DRAFTWISE_DRAFT_WIDTH=3");
    assert!(r.steps[1].detail.contains("differs from --draft-width 5, which wins"), "{:?}", r.steps[1]);

    i.env = Some("5");
    let r = i.resolve(&t).unwrap();
    assert_eq!(r.width_from, "--draft-width 5 (DRAFTWISE_DRAFT_WIDTH=5 agrees)");

    i.env = None;
    let r = i.resolve(&t).unwrap();
    assert_eq!(r.width_from, "--draft-width 5");

    // `off` is an override too; an empty variable is unset.
    i.flag = Some("off");
    i.env = Some("");
    let r = i.resolve(&t).unwrap();
    assert_eq!((decided(&r), r.width.map(Width::get)), (StepKind::Flag, None));
    assert_eq!(r.steps[1].detail, "DRAFTWISE_DRAFT_WIDTH set but empty: treated as unset");
    assert!(r.summary().starts_with("draft width off for ngram"), "{}", r.summary());
}

#[test]
fn unparseable_overrides_are_errors_not_ignored() {
    let t = empty();
    let mut i = In::new(DrafterKind::Ngram, "q4_1");
    for bad in ["abc", "0", "33", "-1", "4.5", "four"] {
        i.flag = Some(bad);
        i.env = None;
        let e = i.resolve(&t).unwrap_err();
        assert!(matches!(&e, PolicyError::BadFlag { value, .. } if value == bad), "{bad}: {e}");
        assert!(e.to_string().contains("--draft-width"), "{e}");
        // A bad environment value is an error even when a valid flag wins.
        i.flag = Some("4");
        i.env = Some(bad);
        let e = i.resolve(&t).unwrap_err();
        assert!(matches!(&e, PolicyError::BadEnv { value, .. } if value == bad), "{bad}: {e}");
        assert!(e.to_string().contains("unset DRAFTWISE_DRAFT_WIDTH"), "{e}");
    }
    assert!(width::parse("0").unwrap_err().contains("use \"off\""));
    assert_eq!(width::parse(" 32 "), Ok(Some(Width::new(32).unwrap())));
    assert_eq!(width::parse("OFF"), Ok(None));
}

#[test]
fn every_provenance_string_is_distinct() {
    let dir = Path::new("/models/x");
    let t = table(&[
        entry("ngram", "cpu:x86_64-avx2", "q4_1", "6", FP),
        entry("ngram", "cpu:x86_64-avx2", "q8_0", "\"off\"", FP),
        entry("ngram", "cpu:x86_64-avx2", "f16", "6", OTHER_FP),
    ]);
    let base = || In::new(DrafterKind::Ngram, "q4_1");
    let mut strings = vec![Resolution::no_drafter().width_from];
    let mut add = |i: In<'_>| strings.push(i.resolve(&t).unwrap().width_from);
    add(In { flag: Some("5"), ..base() });
    add(In { flag: Some("5"), env: Some("3"), ..base() });
    add(In { flag: Some("5"), env: Some("5"), ..base() });
    add(In { env: Some("5"), ..base() });
    add(In {
        drafter: DrafterKind::Dflash,
        declared: Declared::Width { width: Width::new(5).unwrap(), evidence: "block_size = 6 in x".into() },
        ..base()
    });
    add(base());
    add(In { quant: known("q8_0"), ..base() });
    add(In { quant: known("f16"), ..base() });
    add(In { quant: known("bf16"), ..base() });
    add(In { quant: QuantClass::unknown(Some(dir), format!("config.json not found in {}", dir.display())), ..base() });
    add(In { settings: DrafterSettings::ngram(1, 4), ..base() });
    add(In { threads: 1, ..base() });
    // Without a drafter flag: each way the policy decides.
    let on = In::new(DrafterKind::Ngram, "q4_1");
    strings.push(on.auto(&t).width_from);
    strings.push(In { threads: 1, ..In::new(DrafterKind::Ngram, "q4_1") }.auto(&t).width_from);
    strings.push(In::new(DrafterKind::Ngram, "q8_0").auto(&t).width_from);
    strings.push(In::new(DrafterKind::Ngram, "f16").auto(&t).width_from);
    strings.push(In::new(DrafterKind::Ngram, "bf16").auto(&t).width_from);
    let reaching = table(&[entry("ngram", "cpu:x86_64-avx2", "q4_1", "6", FP)
        .replace("ratio_interval = [1.4, 1.6]", "ratio_interval = [0.9, 1.6]")]);
    strings.push(on.auto(&reaching).width_from);
    let unknown = QuantClass::unknown(Some(dir), format!("config.json not found in {}", dir.display()));
    strings.push(In { quant: unknown, ..In::new(DrafterKind::Ngram, "q4_1") }.auto(&t).width_from);
    let n = strings.len();
    let unique: HashSet<&String> = strings.iter().collect();
    assert_eq!(unique.len(), n, "{strings:#?}");
    // Each names its source at the start, so a reader tells them apart at a glance.
    let starts = [
        "speculation off: --drafter none",
        "--draft-width 5",
        "--draft-width 5, overriding",
        "--draft-width 5 (",
        "DRAFTWISE_DRAFT_WIDTH=5",
        "declared by the checkpoint:",
        "measured for ngram",
        "measured off for ngram",
        "per-kind default 4: the entry",
        "per-kind default 4: no measurement",
        "per-kind default 4: no key for ngram",
        "per-kind default 4: the entry for ngram on cpu:x86_64-avx2 (amd-zen4) with a q4_1 llama 134.5M target at 2 threads was measured with other drafter settings",
        "per-kind default 4: no measurement for ngram on cpu:x86_64-avx2 (amd-zen4) with a q4_1 llama 134.5M target at 1 thread: the table measured it at 2 threads",
        "speculation on by the policy (no --drafter): measured for ngram",
        "speculation off by the policy (no --drafter): no measurement for ngram on cpu:x86_64-avx2 (amd-zen4) with a q4_1 llama 134.5M target at 1 thread",
        "speculation off by the policy (no --drafter): measured off for ngram",
        "speculation off by the policy (no --drafter): the entry for ngram on cpu:x86_64-avx2 (amd-zen4) with an f16 llama 134.5M target at 2 threads is stale",
        "speculation off by the policy (no --drafter): no measurement for a weight-free drafter",
        "speculation off by the policy (no --drafter): the entry for ngram on cpu:x86_64-avx2 (amd-zen4) with a q4_1 llama 134.5M target at 2 threads gives width 6",
        "speculation off by the policy (no --drafter): no key for a weight-free drafter",
    ];
    assert_eq!(starts.len(), n);
    for (s, want) in strings.iter().zip(starts) {
        assert!(s.starts_with(want), "{s:?} should start with {want:?}");
    }
}

#[test]
fn a_stale_entry_is_not_used_and_names_both_fingerprints() {
    let t = table(&[entry("layerskip", "cuda:sm_121", "nvfp4", "7", OTHER_FP)]);
    let i = In { device: "cuda:sm_121", ..In::new(DrafterKind::Layerskip, "nvfp4") };
    let r = i.resolve(&t).unwrap();
    assert_eq!(r.width.map(Width::get), Some(4), "the per-kind constant applies");
    assert_eq!(decided(&r), StepKind::Default);
    assert_eq!(
        r.width_from,
        format!(
            "per-kind default 4: the entry for layerskip on cuda:sm_121 (amd-zen4) with an nvfp4 llama 134.5M target is stale: measured \
             with verify-path fingerprint {OTHER_FP}, this build has {FP} for the key (records/r1); re-measure \
             with `tuner sweep`"
        )
    );
    let table_step = &r.steps[3];
    assert_eq!(table_step.step, StepKind::Table);
    assert!(!table_step.decided && table_step.detail.contains("is stale"), "{table_step:?}");
    // Under its own fingerprint the same entry decides (a CUDA key has no
    // thread count: any --threads matches).
    let other = Resolver { table: &t, fingerprint: &other_build };
    let r = In { threads: 7, ..i }.resolve_with(&other).unwrap();
    assert_eq!(r.width.map(Width::get), Some(7));
}

#[test]
fn an_off_entry_disables_speculation_by_default_but_an_override_still_wins() {
    let t = table(&[entry("draft-model", "cpu:x86_64-avx2", "q4_1", "\"off\"", FP)]);
    let mut i = In::new(DrafterKind::DraftModel, "q4_1");
    let r = i.resolve(&t).unwrap();
    assert_eq!((decided(&r), r.width.map(Width::get)), (StepKind::Table, None));
    assert!(
        r.width_from
            .starts_with("measured off for draft-model on cpu:x86_64-avx2 (amd-zen4) with a q4_1 llama 134.5M target")
    );
    assert!(r.summary().starts_with("draft width off for draft-model:"), "{}", r.summary());
    assert_eq!(t.entries[0].width, None);
    i.flag = Some("3");
    assert_eq!(i.resolve(&t).unwrap().width.map(Width::get), Some(3));
}

#[test]
fn no_drafter_means_no_width() {
    let r = Resolution::no_drafter();
    assert_eq!((r.drafter, r.width.map(Width::get)), (None, None));
    assert_eq!(r.width_from, "speculation off: --drafter none");
    assert_eq!(r.summary(), "classic decoding: speculation off: --drafter none");
}

// ------------------------------------------------------- classification

#[test]
fn each_quantization_class_from_a_config_fixture() {
    // fixture, class (numerics), field that decided, format that declared it
    let cases = [
        ("mlx-affine.json", "int4", "quantization.bits", "mlx"),
        ("mlx-affine-8bit.json", "int8", "quantization.bits", "mlx"),
        ("mlx-nvfp4.json", "nvfp4", "quantization.mode", "mlx"),
        ("mlx-mxfp4.json", "mxfp4", "quantization.mode", "mlx"),
        ("modelopt-nvfp4.json", "nvfp4", "quantization_config.quant_algo", "modelopt"),
        ("modelopt-fp8.json", "fp8", "quantization_config.quantization.quant_algo", "modelopt"),
        ("modelopt-int4-awq.json", "int4", "quantization_config.quant_algo", "modelopt"),
        ("compressed-tensors-nvfp4.json", "nvfp4", "quantization_config.config_groups.group_0", "compressed-tensors"),
        ("compressed-tensors-w4a16.json", "int4", "quantization_config.config_groups.group_0", "compressed-tensors"),
        ("compressed-tensors-w8a8.json", "int8", "quantization_config.config_groups.group_0", "compressed-tensors"),
        ("compressed-tensors-fp8.json", "fp8", "quantization_config.config_groups.group_0", "compressed-tensors"),
        ("gptq.json", "int4", "quantization_config.bits", "gptq"),
        ("gptq-8bit.json", "int8", "quantization_config.bits", "gptq"),
        ("awq.json", "int4", "quantization_config.bits", "awq"),
        ("awq-w-bit.json", "int4", "quantization_config.w_bit", "awq"),
        ("fp8.json", "fp8", "quantization_config.quant_method", "fp8"),
        ("bitsandbytes-4bit.json", "nf4", "quantization_config.bnb_4bit_quant_type", "bitsandbytes"),
        ("bitsandbytes-4bit-fp4.json", "fp4", "quantization_config.bnb_4bit_quant_type", "bitsandbytes"),
        ("bitsandbytes-8bit.json", "int8", "quantization_config.load_in_8bit", "bitsandbytes"),
        ("unquantized-bf16.json", "bf16", "torch_dtype", "torch_dtype"),
        ("unquantized-f16-dtype.json", "f16", "dtype", "torch_dtype"),
        ("unquantized-f32.json", "f32", "torch_dtype", "torch_dtype"),
        (
            "text-config-nvfp4.json",
            "nvfp4",
            "text_config.quantization_config.config_groups.group_0",
            "compressed-tensors",
        ),
    ];
    for (file, class, field, format) in cases {
        let p = fixture(file);
        let q = classify_hf_config_file(&p);
        assert_eq!(q.class, class, "{file}: {q:?}");
        assert_eq!(q.field.as_deref(), Some(field), "{file}: {q:?}");
        assert_eq!(q.format.as_deref(), Some(format), "{file}: {q:?}");
        assert_eq!(q.file.as_deref(), Some(p.as_path()), "{file}");
        assert!(!q.from.is_empty());
    }
    // One numerics, one class, whichever format declared it.
    let class = |f: &str| classify_hf_config_file(&fixture(f)).class;
    assert_eq!(class("mlx-nvfp4.json"), class("modelopt-nvfp4.json"));
    assert_eq!(class("modelopt-nvfp4.json"), class("compressed-tensors-nvfp4.json"));
    assert_eq!(class("fp8.json"), class("compressed-tensors-fp8.json"));
    assert_eq!(class("gptq.json"), class("awq.json"));
    // Widths kept apart.
    assert_ne!(class("mlx-affine.json"), class("mlx-affine-8bit.json"));
    assert_ne!(class("gptq.json"), class("gptq-8bit.json"));
    assert_ne!(class("bitsandbytes-4bit.json"), class("bitsandbytes-8bit.json"));
}

#[test]
fn a_config_whose_quantization_cannot_be_read_is_unknown_with_the_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("config.json");
    let cases = [
        (r#"{"quantization": {"group_size": 64}}"#, "quantization.bits", "without a usable bits"),
        (r#"{"quantization_config": {"quant_method": "gptq", "bits": 99}}"#, "quantization_config.bits", "not 1..=16"),
        (
            r#"{"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": true, "load_in_8bit": true}}"#,
            "quantization_config.load_in_4bit",
            "neither or both",
        ),
        (
            r#"{"quantization_config": {"quant_method": "compressed-tensors", "config_groups": {"g": {"format": "pack-quantized"}}}}"#,
            "quantization_config.config_groups.g.weights",
            "without a numerics-naming format",
        ),
        (
            r#"{"quantization_config": {"quant_method": "modelopt"}}"#,
            "quantization_config.quant_algo",
            "without quant_algo",
        ),
    ];
    for (text, field, why) in cases {
        std::fs::write(&p, text).unwrap();
        let q = classify_hf_config_file(&p);
        assert!(q.is_unknown(), "{text}: {q:?}");
        assert_eq!(q.field.as_deref(), Some(field), "{text}: {q:?}");
        assert_eq!(q.file.as_deref(), Some(p.as_path()), "{text}");
        assert!(q.from.contains(why), "{text}: {}", q.from);
    }
}

#[test]
fn an_unreadable_config_is_unknown_with_the_reason() {
    let q = classify_hf_config_file(&fixture("malformed.json"));
    assert!(q.is_unknown());
    assert!(q.from.contains("does not parse") && q.from.contains("at line 5 column 5"), "{}", q.from);
    let q = classify_hf_config_file(&fixture("not-an-object.json"));
    assert!(q.is_unknown());
    assert!(q.from.contains("is not a JSON object (it is an array)"), "{}", q.from);
    let q = classify_path(Path::new("/nonexistent/draftwise/model.gguf"));
    assert!(q.is_unknown() && q.from.contains("does not exist"), "{}", q.from);
    // A file that is not GGUF.
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("model.bin");
    std::fs::write(&p, b"not a model").unwrap();
    let q = classify_path(&p);
    assert!(q.is_unknown() && q.from.contains("unreadable"), "{}", q.from);
}

#[test]
fn a_config_without_dtype_falls_back_to_the_safetensors_header() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), r#"{"model_type": "llama"}"#).unwrap();
    let q = classify_path(dir.path());
    assert!(q.is_unknown() && q.from.contains("no *.safetensors"), "{q:?}");
    let header = serde_json::json!({
        "model.layers.0.mlp.up_proj.weight": {"dtype": "BF16", "shape": [8, 4], "data_offsets": [0, 64]},
        "model.layers.0.input_layernorm.weight": {"dtype": "F32", "shape": [4], "data_offsets": [64, 80]},
        "model.embed_tokens.weight": {"dtype": "F32", "shape": [16, 4], "data_offsets": [80, 336]},
    })
    .to_string();
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.resize(bytes.len() + 336, 0);
    std::fs::write(dir.path().join("model.safetensors"), bytes).unwrap();
    let q = classify_path(dir.path());
    assert_eq!(q.class, "bf16", "{q:?}");
    assert!(q.from.contains("safetensors header"), "{}", q.from);
}

/// A GGUF with one layer matrix per type in `types` (64 x 256 each) and an
/// optional `general.file_type`.
pub(crate) fn gguf_with(types: &[GgmlType], file_type: Option<u32>) -> GgufFile {
    let mut b = Builder::new();
    b.kv("general.architecture", &Value::String("llama".into()));
    if let Some(ft) = file_type {
        b.kv("general.file_type", &Value::U32(ft));
    }
    let (cols, rows) = (256u64, 4u64);
    // The embedding is f32 and not a layer matrix: it must not count.
    b.tensor("token_embd.weight", &[cols, 64], GgmlType::F32, &vec![0u8; (cols * 64 * 4) as usize]);
    b.tensor("blk.0.attn_norm.weight", &[cols], GgmlType::F32, &vec![0u8; (cols * 4) as usize]);
    for (i, ty) in types.iter().enumerate() {
        let n = ty.row_bytes(cols as usize).unwrap() * rows as usize;
        b.tensor(&format!("blk.{i}.ffn_up.weight"), &[cols, rows], *ty, &vec![0u8; n]);
    }
    GgufFile::from_bytes(b.build()).unwrap()
}

#[test]
fn each_gguf_class_from_its_layer_matrices() {
    let cases = [
        (GgmlType::Q4_0, 2, "q4_0"),
        (GgmlType::Q4_1, 3, "q4_1"),
        (GgmlType::Q5_0, 8, "q5_0"),
        (GgmlType::Q5_1, 9, "q5_1"),
        (GgmlType::Q8_0, 7, "q8_0"),
        (GgmlType::Q4K, 15, "q4_k"),
        (GgmlType::Q5K, 17, "q5_k"),
        (GgmlType::Q6K, 18, "q6_k"),
        (GgmlType::Q2K, 10, "q2_k"),
        (GgmlType::Q3K, 12, "q3_k"),
        (GgmlType::F16, 1, "f16"),
        (GgmlType::BF16, 32, "bf16"),
        (GgmlType::F32, 0, "f32"),
    ];
    let p = Path::new("model.gguf");
    for (ty, ft, class) in cases {
        let q = classify_gguf(p, &gguf_with(&[ty, ty], Some(ft)));
        assert_eq!(q.class, class, "{q:?}");
        assert!(q.from.contains("agrees"), "{class}: {}", q.from);
        assert_eq!(q.field.as_deref(), Some("tensor types of blk.*.weight (general.file_type)"));
    }
    // Q4_K_M files mix Q4_K and Q6_K: the dominant type decides.
    let q = classify_gguf(p, &gguf_with(&[GgmlType::Q4K, GgmlType::Q4K, GgmlType::Q6K], Some(15)));
    assert_eq!(q.class, "q4_k");
    assert!(q.from.contains("mixed: Q4_K 66.7%, Q6_K 33.3%"), "{}", q.from);
    // The tensors decide when the file type disagrees, and it is said.
    let q = classify_gguf(p, &gguf_with(&[GgmlType::Q8_0], Some(3)));
    assert_eq!(q.class, "q8_0");
    assert!(q.from.contains("names q4_1; the tensors decide"), "{}", q.from);
    // No layer matrices: the file type; neither: unknown, with why.
    let q = classify_gguf(p, &gguf_with(&[], Some(18)));
    assert_eq!((q.class.as_str(), q.field.as_deref()), ("q6_k", Some("general.file_type")));
    let q = classify_gguf(p, &gguf_with(&[], None));
    assert!(q.is_unknown() && q.from.contains("no blk.* layer matrices and no general.file_type"), "{}", q.from);
}

#[test]
fn the_default_model_classifies_q4_1() {
    let Some(path) = std::env::var_os("DRAFTWISE_TEST_MODEL") else {
        eprintln!("skipped: set DRAFTWISE_TEST_MODEL to a SmolLM2-135M-Instruct Q4_1 GGUF");
        return;
    };
    let q = classify_path(Path::new(&path));
    assert_eq!(q.class, "q4_1", "{q:?}");
    assert!(q.from.contains("general.file_type = 3 (MOSTLY_Q4_1) agrees"), "{}", q.from);
}

// ----------------------------------------------------------- declarations

#[test]
fn checkpoints_declare_widths_by_kind() {
    let json = |s: &str| serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(s).unwrap();
    let p = Path::new("config.json");
    let d = from_config(DrafterKind::Dflash, p, &json(r#"{"model_type": "dflash", "block_size": 16}"#));
    assert!(
        matches!(&d, Declared::Width { width, evidence } if width.get() == 15 && evidence.contains("plus 15 drafts")),
        "{d:?}"
    );
    let d = from_config(DrafterKind::Dflash, p, &json(r#"{"dflash_config": {"block_size": 8}}"#));
    assert!(matches!(d, Declared::Width { width, .. } if width.get() == 7), "{d:?}");
    let d = from_config(DrafterKind::Mtp, p, &json(r#"{"text_config": {"num_nextn_predict_layers": 1}}"#));
    assert!(matches!(d, Declared::Width { width, .. } if width.get() == 1), "{d:?}");
    let d = from_config(DrafterKind::DraftModel, p, &json(r#"{"speculative_config": {"num_speculative_tokens": 5}}"#));
    assert!(matches!(d, Declared::Width { width, .. } if width.get() == 5), "{d:?}");
    let d = from_config(DrafterKind::DraftModel, p, &json(r#"{"num_speculative_tokens": 500}"#));
    assert!(matches!(&d, Declared::Absent { why } if why.contains("outside 1..=32")), "{d:?}");
    let d = from_config(DrafterKind::DraftModel, p, &json(r#"{"torch_dtype": "bfloat16"}"#));
    assert!(matches!(&d, Declared::Absent { why } if why.contains("declares no num_speculative_tokens")), "{d:?}");
    // ngram and layerskip never read a checkpoint; draft-model needs one.
    let d = read_declared(DrafterKind::Ngram, Some(Path::new("/x")), Path::new("/y"));
    assert_eq!(d, Declared::Absent { why: "ngram has no checkpoint to declare a width".into() });
    let d = read_declared(DrafterKind::DraftModel, None, Path::new("/y"));
    assert!(matches!(&d, Declared::Absent { why } if why.contains("no --drafter-model")), "{d:?}");
    let dir = tempfile::tempdir().unwrap();
    let d = read_declared(DrafterKind::Dflash, Some(dir.path()), Path::new("/y"));
    assert!(matches!(&d, Declared::Absent { why } if why.starts_with("config.json not found in")), "{d:?}");
}

// ------------------------------------------------------- table compiler

pub(crate) fn compile_err(text: &str) -> TableError {
    compile("policy/t.toml", text, RecordCheck::Skip).expect_err("must not compile")
}

pub(crate) const HEAD: &str = "schema_version = 3\n\n";

#[test]
fn malformed_toml_fails_with_the_file_and_position() {
    let e = compile_err("schema_version = 2\n[[entry]\ndrafter = \"ngram\"\n");
    assert!(matches!(e.problem, Problem::Malformed(_)), "{e}");
    let s = e.to_string();
    assert!(s.starts_with("policy/t.toml: malformed TOML") && s.contains("line 2"), "{s}");
    // A key written twice inside one entry is TOML's own duplicate.
    let e = compile_err(&format!(
        "{HEAD}{}",
        entry("ngram", "cpu:x86_64-avx2", "q4_1", "4", FP).replace("host =", "ratio = 1.5\nhost =")
    ));
    assert!(matches!(e.problem, Problem::Malformed(_)) && e.to_string().contains("duplicate"), "{e}");
}

#[test]
fn an_unknown_or_missing_schema_version_fails() {
    let e = compile_err("schema_version = 4\n");
    assert_eq!(e.problem, Problem::UnknownSchemaVersion("4".into()));
    assert!(e.to_string().contains("this runtime compiles schema 3"), "{e}");
    let e = compile_err("schema_version = \"3\"\n");
    assert!(matches!(e.problem, Problem::UnknownSchemaVersion(_)), "{e}");
    let e = compile_err(&entry("ngram", "cpu:x86_64-avx2", "q4_1", "4", FP));
    assert_eq!(e.problem, Problem::MissingSchemaVersion);
    let e = compile_err("schema_version = 3\nwidth = 4\n");
    assert_eq!(e.problem, Problem::UnknownTopLevelKey("width".into()));
}

#[test]
fn duplicate_keys_fail_naming_both_entries() {
    let a = entry("ngram", "cpu:x86_64-avx2", "q4_1", "4", FP);
    let b = entry("ngram", "cpu:x86_64-avx512vnni", "q4_1", "5", FP);
    let e = compile_err(&format!("{HEAD}{a}{b}{a}"));
    assert_eq!(e.problem, Problem::DuplicateKey { first: "entry 1 (line 3)".into() });
    assert_eq!(e.entry.as_deref(), Some("entry 3 (line 39) (ngram, cpu:x86_64-avx2, amd-zen4, q4_1, 2 threads)"));
    assert!(
        e.to_string().starts_with(
            "policy/t.toml: entry 3 (line 39) (ngram, cpu:x86_64-avx2, amd-zen4, q4_1, 2 threads): duplicate key"
        ),
        "{e}"
    );
    // The same (drafter, device, quantization) at another thread count is another key.
    let c = a.replace("threads = 2", "threads = 1");
    let t = compile("t", &format!("{HEAD}{a}{c}"), RecordCheck::Skip).unwrap();
    assert_eq!(t.entries.iter().map(|e| e.key.threads).collect::<Vec<_>>(), [Some(2), Some(1)]);
    // So is the same measurement on another CPU, or of another model.
    let zen5 = entry_on("amd-zen5", "llama", PARAMS, "ngram", "cpu:x86_64-avx2", "q4_1", "4", FP);
    let gemma = entry_on(HOST, "gemma3", 268_098_176, "ngram", "cpu:x86_64-avx2", "q4_1", "4", FP);
    let t = compile("t", &format!("{HEAD}{a}{zen5}{gemma}"), RecordCheck::Skip).unwrap();
    assert_eq!(t.entries.len(), 3);
    // A raw spelling of a named class is that class: a duplicate.
    let raw = entry_on("amd-family25-model17", "llama", PARAMS, "ngram", "cpu:x86_64-avx2", "q4_1", "4", FP);
    let e = compile_err(&format!("{HEAD}{a}{raw}"));
    assert!(matches!(e.problem, Problem::DuplicateKey { .. }), "{e}");
}

#[test]
fn the_schema_3_fields_are_checked_with_the_field_named() {
    let ok = format!("{HEAD}{}", entry("ngram", "cpu:x86_64-avx2", "q4_1", "4", FP));
    compile("t", &ok, RecordCheck::Skip).unwrap();
    let sha = "a".repeat(64);
    let cases = [
        ("host_class = \"amd-zen4\"", "host_class = \"AMD Zen 4\"", "host_class"),
        ("architecture = \"llama\"", "architecture = \"Llama 3\"", "model.architecture"),
        ("parameters = 134515008", "parameters = 0", "model.parameters"),
        ("parameters = 134515008", "parameters = \"135M\"", "model.parameters"),
        ("file = \"m.gguf\"", "file = \"/root/.cache/m.gguf\"", "model.file"),
        ("file = \"m.gguf\"", "file = \"models/m.gguf\"", "model.file"),
        (&format!("sha256 = \"{sha}\""), "sha256 = \"abc\"", "model.sha256"),
        ("name = \"prompts/sweep.jsonl\"", "name = \"/work/main/prompts/sweep.jsonl\"", "prompts.name"),
        ("name = \"prompts/sweep.jsonl\"", "name = \"../prompts.jsonl\"", "prompts.name"),
    ];
    for (from, to, field) in cases {
        assert!(ok.contains(from), "{from}");
        let e = compile_err(&ok.replacen(from, to, 1));
        assert!(matches!(&e.problem, Problem::BadValue { field: f, .. } if *f == field), "{to}: {e}");
    }
    // Every schema-3 field is required.
    for field in ["host_class = ", "model = ", "prompts = "] {
        let line = ok.lines().find(|l| l.starts_with(field)).unwrap();
        let e = compile_err(&ok.replace(&format!("{line}\n"), ""));
        assert!(matches!(&e.problem, Problem::Field(m) if m.contains(field.trim_end_matches(" = "))), "{e}");
    }
    // The schema-2 name of the width is named, with the new one.
    let e = compile_err(&ok.replace("width = 4", "block_size = 4"));
    assert!(
        matches!(&e.problem, Problem::BadValue { field: "block_size", problem } if problem.contains("`width`")),
        "{e}"
    );
}

#[test]
fn a_schema_2_table_is_refused_with_how_to_migrate() {
    let old = "schema_version = 2\n\n[[entry]]\ndrafter = \"ngram\"\ndevice_class = \"cpu:x86_64-avx2\"\n\
               target_quant = \"q4_1\"\nthreads = 2\ndrafter_settings = { ngram_min = 3, ngram_max = 4 }\n\
               weight_formats = [\"q4_1\"]\nblock_size = 3\nrecord = \"records/r1\"\ndate = 2026-01-15\n\
               ratio = 1.5\nratio_interval = [1.4, 1.6]\nhost = \"h\"\nverify_fingerprint = \"0123456789abcdef\"\n";
    let e = compile_err(old);
    assert_eq!(e.problem, Problem::Schema2);
    let m = e.to_string();
    for want in
        ["schema_version = 3", "block_size", "`width`", "host_class", "model", "prompts", "Migrating from schema 2"]
    {
        assert!(m.contains(want), "{want:?} missing from {m}");
    }
}

#[test]
fn widths_out_of_range_fail() {
    for (w, problem) in [("0", "0 is out of range"), ("33", "33 is out of range"), ("-2", "-2 is out of range")] {
        let e = compile_err(&format!("{HEAD}{}", entry("ngram", "cpu:x86_64-avx2", "q4_1", w, FP)));
        assert!(matches!(e.problem, Problem::WidthOutOfRange(_)), "{w}: {e}");
        assert!(e.to_string().contains(problem) && e.to_string().contains("entry 1 (line 3) (ngram"), "{e}");
    }
    let e = compile_err(&format!("{HEAD}{}", entry("ngram", "cpu:x86_64-avx2", "q4_1", "\"of\"", FP)));
    assert!(matches!(e.problem, Problem::BadValue { field: "width", .. }), "{e}");
    let e = compile_err(&format!("{HEAD}{}", entry("ngram", "cpu:x86_64-avx2", "q4_1", "4.5", FP)));
    assert!(matches!(e.problem, Problem::BadValue { field: "width", .. }), "{e}");
    // The range ends are fine.
    for w in ["1", "32", "\"off\""] {
        compile("t", &format!("{HEAD}{}", entry("ngram", "cpu:x86_64-avx2", "q4_1", w, FP)), RecordCheck::Skip)
            .unwrap();
    }
}

#[test]
fn an_unknown_drafter_kind_fails() {
    let e = compile_err(&format!("{HEAD}{}", entry("eagle3", "cpu:x86_64-avx2", "q4_1", "4", FP)));
    assert_eq!(e.problem, Problem::UnknownDrafter("eagle3".into()));
    assert!(
        e.to_string()
            .contains("entry 1 (line 3) (eagle3, cpu:x86_64-avx2, amd-zen4, q4_1, 2 threads): drafter \"eagle3\""),
        "{e}"
    );
}

#[test]
fn a_record_path_that_does_not_exist_fails() {
    let root = tempfile::tempdir().unwrap();
    let text = format!("{HEAD}{}", entry("ngram", "cpu:x86_64-avx2", "q4_1", "4", FP));
    let e = compile("policy/t.toml", &text, RecordCheck::Under(root.path())).unwrap_err();
    assert!(matches!(&e.problem, Problem::MissingRecord { record, .. } if record == "records/r1"), "{e}");
    assert!(e.to_string().contains("commit the record with its entry"), "{e}");
    std::fs::create_dir_all(root.path().join("records/r1")).unwrap();
    compile("policy/t.toml", &text, RecordCheck::Under(root.path())).unwrap();
    // Paths must stay under records/.
    for bad in ["/etc/passwd", "records/../Cargo.toml", "policy/x", "records/"] {
        let e = compile_err(&text.replace("records/r1", bad));
        assert!(matches!(e.problem, Problem::BadValue { field: "record", .. }), "{bad}: {e}");
    }
}

#[test]
fn other_bad_fields_fail_with_the_field_named() {
    let ok = format!("{HEAD}{}", entry("ngram", "cpu:x86_64-avx2", "q4_1", "4", FP));
    let cases: [(&str, &str, &str); 16] = [
        ("device_class = \"cpu:x86_64-avx2\"", "device_class = \"gpu0\"", "device_class"),
        ("target_quant = \"q4_1\"", "target_quant = \"unknown\"", "target_quant"),
        ("target_quant = \"q4_1\"", "target_quant = \"Q4_1\"", "target_quant"),
        ("date = 2026-01-15", "date = \"15/01/2026\"", "date"),
        ("ratio = 1.5", "ratio = -1.0", "ratio"),
        ("ratio_interval = [1.4, 1.6]", "ratio_interval = [1.6, 1.7]", "ratio_interval"),
        ("ratio_interval = [1.4, 1.6]", "ratio_interval = [1.4]", "ratio_interval"),
        ("host = \"test host\"", "host = \" \"", "host"),
        (FP, "0123", "verify_fingerprint"),
        ("threads = 2\n", "", "threads"),
        ("threads = 2", "threads = 0", "threads"),
        ("threads = 2", "threads = 100000", "threads"),
        ("ngram_min = 3", "ngram_min = 5", "drafter_settings"),
        ("{ ngram_min = 3, ngram_max = 4 }", "{ layers = [1] }", "drafter_settings"),
        ("weight_formats = [\"q4_1\", \"q8_0\"]", "weight_formats = []", "weight_formats"),
        ("weight_formats = [\"q4_1\", \"q8_0\"]", "weight_formats = [\"Q4_1\"]", "weight_formats"),
    ];
    for (from, to, field) in cases {
        let e = compile_err(&ok.replace(from, to));
        assert!(matches!(&e.problem, Problem::BadValue { field: f, .. } if *f == field), "{to}: {e}");
        assert!(e.to_string().contains(field), "{e}");
    }
    let e = compile_err(&ok.replace("host = ", "colour = \"red\"\nhost = "));
    assert!(matches!(&e.problem, Problem::Field(m) if m.contains("colour")), "{e}");
    let e = compile_err(&ok.replace("host = \"test host\"\n", ""));
    assert!(matches!(&e.problem, Problem::Field(m) if m.contains("host")), "{e}");
    // Device classes the dispatcher and CUDA produce are accepted (CUDA
    // entries without a thread count: it is not part of their key).
    for d in ["cpu:x86_64-avx512vnni", "cpu:aarch64-neon", "cuda:sm_90", "cuda:sm_90a", "cuda:sm_121"] {
        let text = ok.replace("cpu:x86_64-avx2", d);
        let text = if d.starts_with("cuda:") { text.replace("threads = 2\n", "") } else { text };
        compile("t", &text, RecordCheck::Skip).unwrap_or_else(|e| panic!("{d}: {e}"));
    }
    let e = compile_err(&ok.replace("cpu:x86_64-avx2", "cuda:sm_90"));
    assert!(matches!(&e.problem, Problem::BadValue { field: "threads", .. }), "{e}");
    // An unknown settings field is named.
    let e = compile_err(&ok.replace("ngram_min = 3", "ngram_min = 3, colour = 1"));
    assert!(
        matches!(&e.problem, Problem::BadValue { field: "drafter_settings", problem } if problem.contains("colour")),
        "{e}"
    );
}

#[test]
fn the_shipped_table_compiles_against_the_repository_and_is_the_one_compiled_in() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let text = std::fs::read_to_string(root.join(super::TABLE_FILE)).unwrap();
    let t = compile(super::TABLE_FILE, &text, RecordCheck::Under(root)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(&t, compiled_table());
    assert_eq!(t.schema_version, 3);
}

#[test]
fn a_schema_1_table_is_refused_with_how_to_migrate() {
    let old = "schema_version = 1\n\n[[entry]]\ndrafter = \"ngram\"\ndevice_class = \"cpu:x86_64-avx2\"\n\
               target_quant = \"q4_1\"\nblock_size = 3\nrecord = \"records/r1\"\ndate = 2026-01-15\nratio = 1.5\n\
               ratio_interval = [1.4, 1.6]\nhost = \"h\"\nkernel_fingerprint = \"0123456789abcdef\"\n";
    let e = compile_err(old);
    assert_eq!(e.problem, Problem::OldSchema(1));
    let m = e.to_string();
    for want in
        ["schema_version = 2", "verify_fingerprint", "threads", "drafter_settings", "weight_formats", "tuner sweep"]
    {
        assert!(m.contains(want), "{want:?} missing from {m}");
    }
}

// ------------------------------------------------------------ fingerprint

pub(crate) fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The test that keeps the verify path honest: every source file of the
/// kernels and the runtime is placed on it or off it, once, with a reason;
/// a new file fails here until it is placed.
#[test]
fn every_source_file_is_on_the_verify_path_or_off_it_and_none_is_both() {
    use super::fingerprint::{OFF_PATH, VERIFY_PATH, covers, source_files};
    let root = workspace();
    let files = source_files(&root).unwrap();
    assert!(files.len() > 40, "{files:?}");
    let mut unplaced = Vec::new();
    for f in &files {
        let on: Vec<&str> = VERIFY_PATH.iter().map(|p| p.path).filter(|p| covers(p, f)).collect();
        let off: Vec<&str> = OFF_PATH.iter().map(|(p, _)| *p).filter(|p| covers(p, f)).collect();
        match (on.len(), off.len()) {
            (1, 0) | (0, 1) => {}
            (0, 0) => unplaced.push(f.clone()),
            _ => panic!("{f} is placed more than once: on {on:?}, off {off:?}"),
        }
    }
    assert!(
        unplaced.is_empty(),
        "not placed on the verify path or off it (runtime/src/policy/fingerprint.rs): {unplaced:?}"
    );
    // Every listed path exists and says why it is there.
    for p in VERIFY_PATH {
        assert!(files.iter().any(|f| covers(p.path, f)), "{} is listed but has no files", p.path);
        assert!(!p.why.is_empty(), "{}", p.path);
    }
    for (p, why) in OFF_PATH {
        assert!(files.iter().any(|f| covers(p, f)), "{p} is listed but has no files");
        assert!(!why.is_empty(), "{p}");
    }
    // The forward pass, the pool and the speculative loop are on the path.
    for f in ["runtime/src/model/llama.rs", "runtime/src/pool.rs", "runtime/src/spec/decode.rs", "kernels/src/ops.rs"] {
        assert!(VERIFY_PATH.iter().any(|p| covers(p.path, f)), "{f}");
    }
}

#[test]
fn the_build_fingerprints_are_the_parts_hashed_now() {
    use super::fingerprint::{VERIFY_PATH, combine, part_hash};
    let root = workspace();
    let hashes: Vec<String> = VERIFY_PATH.iter().map(|p| part_hash(&root, p.path).unwrap()).collect();
    assert_eq!(hashes, super::PART_HASHES, "build.rs hashed other bytes than the tree has");
    let refs: Vec<&str> = hashes.iter().map(String::as_str).collect();
    assert_eq!(combine(&refs, |_| true), KERNEL_FINGERPRINT);
    assert_eq!(KERNEL_FINGERPRINT.len(), 16);
    assert!(KERNEL_FINGERPRINT.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    let fp = super::verify_fingerprint(&DeviceClass::parse("cpu:x86_64-avx512vnni").unwrap(), Some(&formats()));
    assert_eq!(fp.len(), 16);
    assert_ne!(fp, KERNEL_FINGERPRINT, "a CPU key leaves the CUDA parts out");
}

/// A part's hash moves with any byte of its files, ignores CRLF, and a
/// folder part counts added files.
#[test]
fn a_part_hash_moves_with_its_bytes() {
    use super::fingerprint::part_hash;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("k/src")).unwrap();
    std::fs::write(dir.path().join("k/src/a.rs"), "const ROWS: usize = 4;\n").unwrap();
    let a = part_hash(dir.path(), "k/src/").unwrap();
    std::fs::write(dir.path().join("k/src/a.rs"), "const ROWS: usize = 8;\n").unwrap();
    let b = part_hash(dir.path(), "k/src/").unwrap();
    std::fs::write(dir.path().join("k/src/a.rs"), "const ROWS: usize = 8;\r\n").unwrap();
    let c = part_hash(dir.path(), "k/src/").unwrap();
    assert_ne!(a, b);
    assert_eq!(b, c);
    std::fs::write(dir.path().join("k/src/b.cu"), "__global__ void k() {}\n").unwrap();
    assert_ne!(part_hash(dir.path(), "k/src/").unwrap(), b);
    assert_eq!(part_hash(dir.path(), "k/src/a.rs").unwrap(), part_hash(dir.path(), "k/src/a.rs").unwrap());
    assert_ne!(part_hash(dir.path(), "missing.rs").unwrap(), part_hash(dir.path(), "k/src/a.rs").unwrap());
}

/// Per key: a change to a part moves exactly the keys it applies to.
#[test]
fn a_changed_part_stales_only_the_keys_it_applies_to() {
    use super::fingerprint::{VERIFY_PATH, combine};
    let index = |path: &str| VERIFY_PATH.iter().position(|p| p.path == path).unwrap();
    let base: Vec<String> = (0..VERIFY_PATH.len()).map(|i| format!("{i:016x}")).collect();
    let key = |hashes: &[String], device: &str, f: &[&str]| {
        let refs: Vec<&str> = hashes.iter().map(String::as_str).collect();
        let f: Vec<String> = f.iter().map(|s| s.to_string()).collect();
        combine(&refs, |p| super::fingerprint::applies(p, device, Some(&f)))
    };
    let changed = |path: &str| {
        let mut h = base.clone();
        h[index(path)] = "ffffffffffffffff".into();
        h
    };
    let cpu = "cpu:x86_64-avx512vnni";
    let q4_1 = ["q4_1", "q8_0"];
    let k_quants = ["q4_k", "q6_k"];
    // The K-quant kernels: a Q4_1 target stays fresh, a Q4_K one goes stale.
    let h = changed("kernels/src/matvec/x86_r16/k.rs");
    assert_eq!(key(&h, cpu, &q4_1), key(&base, cpu, &q4_1));
    assert_ne!(key(&h, cpu, &k_quants), key(&base, cpu, &k_quants));
    // The Q5 kernels: Q4_1 and K-quant targets stay fresh, a Q5_0 one goes
    // stale.
    let q5_0 = ["q5_0", "q8_0"];
    let h = changed("kernels/src/matvec/x86_r16_q5.rs");
    assert_eq!(key(&h, cpu, &q4_1), key(&base, cpu, &q4_1));
    assert_eq!(key(&h, cpu, &k_quants), key(&base, cpu, &k_quants));
    assert_ne!(key(&h, cpu, &q5_0), key(&base, cpu, &q5_0));
    // The Q2_K / Q3_K kernels and the 16-bit float ones: only targets with
    // those formats go stale.
    let (q3_k, f16) = (["q3_k", "q6_k"], ["f16"]);
    let h = changed("kernels/src/matvec/x86_k23.rs");
    assert_eq!(key(&h, cpu, &q4_1), key(&base, cpu, &q4_1));
    assert_eq!(key(&h, cpu, &f16), key(&base, cpu, &f16));
    assert_ne!(key(&h, cpu, &q3_k), key(&base, cpu, &q3_k));
    let h = changed("kernels/src/matvec/x86_f16.rs");
    assert_eq!(key(&h, cpu, &q4_1), key(&base, cpu, &q4_1));
    assert_eq!(key(&h, cpu, &q3_k), key(&base, cpu, &q3_k));
    assert_ne!(key(&h, cpu, &f16), key(&base, cpu, &f16));
    // The CUDA launcher: CPU keys stay fresh, CUDA keys go stale.
    let h = changed("kernels/src/cuda/");
    assert_eq!(key(&h, cpu, &q4_1), key(&base, cpu, &q4_1));
    assert_ne!(key(&h, "cuda:sm_90", &q4_1), key(&base, "cuda:sm_90", &q4_1));
    // The forward pass and the speculative loop: every key.
    for shared in ["runtime/src/model/llama.rs", "runtime/src/spec/decode.rs", "runtime/src/pool.rs"] {
        let h = changed(shared);
        for (d, f) in [(cpu, &q4_1[..]), (cpu, &k_quants[..]), ("cuda:sm_90", &q4_1[..])] {
            assert_ne!(key(&h, d, f), key(&base, d, f), "{shared} on {d} {f:?}");
        }
    }
    // Unknown formats: every format's parts count.
    let refs: Vec<&str> = base.iter().map(String::as_str).collect();
    let all = combine(&refs, |p| super::fingerprint::applies(p, cpu, None));
    assert_ne!(all, key(&base, cpu, &q4_1));
}

// ------------------------------------------------- speculation by policy

#[test]
fn no_drafter_flag_speculates_with_a_fresh_entry_above_classic() {
    let t = table(&[entry("ngram", "cpu:x86_64-avx2", "q4_1", "3", FP)]);
    let r = In::new(DrafterKind::Ngram, "q4_1").auto(&t);
    assert_eq!((r.drafter, r.width.map(Width::get)), (Some(DrafterKind::Ngram), Some(3)));
    assert_eq!(r.drafter_settings, Some(DrafterSettings::ngram(3, 4)));
    assert!(matches!(r.provenance, Provenance::PolicyOn { .. }));
    assert_eq!(
        r.width_from,
        "speculation on by the policy (no --drafter): measured for ngram on cpu:x86_64-avx2 (amd-zen4) with a q4_1 llama 134.5M target at \
         2 threads (ngram_min 3, ngram_max 4): 1.50x classic [1.40, 1.60] (records/r1, 2026-01-15)"
    );
    assert!(r.by_policy());
    assert_eq!(r.steps.iter().filter(|s| s.decided).count(), 1, "{:?}", r.steps);
}

#[test]
fn an_entry_of_another_cpu_class_applies_only_wholly_above_classic_and_says_so() {
    let i = In::new(DrafterKind::Ngram, "q4_1");
    let zen5 = entry_on("amd-zen5", "llama", PARAMS, "ngram", "cpu:x86_64-avx2", "q4_1", "3", FP);
    // Wholly above 1.0 ([1.4, 1.6]) where it was measured: it stands in, and says so.
    let t = table(std::slice::from_ref(&zen5));
    for r in [i.auto(&t), i.resolve(&t).unwrap()] {
        assert_eq!((r.drafter, r.width.map(Width::get)), (Some(DrafterKind::Ngram), Some(3)));
        assert!(
            r.width_from.contains("(amd-zen5)")
                && r.width_from.contains("measured on amd-zen5, this host is amd-zen4")
                && r.width_from.contains("only because its whole interval is above 1.0"),
            "{}",
            r.width_from
        );
    }
    // Not wholly above 1.0: it does not apply, and the fallback says why.
    let t = table(&[zen5.replace("ratio_interval = [1.4, 1.6]", "ratio_interval = [0.9, 1.6]")]);
    let r = i.auto(&t);
    assert_eq!(r.drafter, None);
    assert!(
        r.width_from.contains("on amd-zen5 with a llama 134.5M target")
            && r.width_from.contains("is not wholly above 1.0"),
        "{}",
        r.width_from
    );
    let r = i.resolve(&t).unwrap();
    assert_eq!((decided(&r), r.width.map(Width::get)), (StepKind::Default, Some(4)));
    // Stale, or measured with other settings, where it was measured: neither applies.
    let r = In::new(DrafterKind::Ngram, "q4_1").auto(&table(&[zen5.replace(FP, OTHER_FP)]));
    assert!(r.drafter.is_none() && r.width_from.contains("stale"), "{}", r.width_from);
    let mut other = In::new(DrafterKind::Ngram, "q4_1");
    other.settings = DrafterSettings { ngram_min: Some(1), ..Default::default() };
    let r = other.resolve(&table(std::slice::from_ref(&zen5))).unwrap();
    assert_eq!(decided(&r), StepKind::Default, "{}", r.width_from);
    // This host's own entry decides, even an `off` one beside a faster CPU's.
    let own_off = entry("ngram", "cpu:x86_64-avx2", "q4_1", "\"off\"", FP)
        .replace("ratio = 1.5", "ratio = 0.9")
        .replace("ratio_interval = [1.4, 1.6]", "ratio_interval = [0.8, 0.95]");
    let r = i.auto(&table(&[own_off, zen5.clone()]));
    assert!(matches!(r.provenance, Provenance::PolicyClassic { fallback: Fallback::Off { .. }, .. }), "{r:?}");
    // Among several CPUs' entries, the one with the higher lower bound.
    let spr = entry_on("intel-sapphire-rapids", "llama", PARAMS, "ngram", "cpu:x86_64-avx2", "q4_1", "5", FP)
        .replace("ratio_interval = [1.4, 1.6]", "ratio_interval = [1.45, 1.6]");
    let r = i.auto(&table(&[zen5, spr]));
    assert_eq!(r.width.map(Width::get), Some(5), "{}", r.width_from);
}

#[test]
fn an_entry_of_another_model_applies_only_wholly_above_classic_and_names_both_models() {
    let i = In::new(DrafterKind::Ngram, "q4_1");
    let gemma = entry_on(HOST, "gemma3", 268_098_176, "ngram", "cpu:x86_64-avx2", "q4_1", "3", FP);
    let r = i.auto(&table(std::slice::from_ref(&gemma)));
    assert_eq!(r.width.map(Width::get), Some(3));
    assert!(
        r.width_from.contains("measured on a gemma3 268.1M target (m.gguf), this one is llama 134.5M (m.gguf)"),
        "{}",
        r.width_from
    );
    let r = i.auto(&table(&[gemma.replace("ratio_interval = [1.4, 1.6]", "ratio_interval = [0.99, 1.6]")]));
    assert_eq!(r.drafter, None, "{}", r.width_from);
    // The model's own entry wins over another model's.
    let own = entry("ngram", "cpu:x86_64-avx2", "q4_1", "2", FP);
    let r = i.auto(&table(&[gemma, own]));
    assert_eq!(r.width.map(Width::get), Some(2));
    assert!(!r.width_from.contains("this one is"), "{}", r.width_from);
    // Another file of the same model class is the same key, and the file is named.
    let renamed =
        entry("ngram", "cpu:x86_64-avx2", "q4_1", "2", FP).replace("file = \"m.gguf\"", "file = \"base.gguf\"");
    let r = i.auto(&table(&[renamed]));
    assert_eq!(r.width.map(Width::get), Some(2));
    assert!(
        r.width_from.contains(
            "measured on base.gguf (sha256 aaaaaaaaaaaa), this target is m.gguf with the same \
                              architecture and parameter count"
        ) && !r.width_from.contains("only because"),
        "{}",
        r.width_from
    );
}

#[test]
fn at_another_thread_count_the_policy_keeps_classic_and_names_both_counts() {
    let t = table(&[entry("ngram", "cpu:x86_64-avx2", "q4_1", "3", FP)]);
    let r = In { threads: 1, ..In::new(DrafterKind::Ngram, "q4_1") }.auto(&t);
    assert_eq!((r.drafter, r.width.map(Width::get)), (None, None));
    assert_eq!(
        r.width_from,
        "speculation off by the policy (no --drafter): no measurement for ngram on cpu:x86_64-avx2 (amd-zen4) with a q4_1 llama 134.5M \
         target at 1 thread: the table measured it at 2 threads (records/r1) only"
    );
    assert!(r.summary().starts_with("classic decoding: "), "{}", r.summary());
    // A named drafter falls back to its constant, with the same reason.
    let r = In { threads: 1, ..In::new(DrafterKind::Ngram, "q4_1") }.resolve(&t).unwrap();
    assert_eq!((decided(&r), r.width.map(Width::get)), (StepKind::Default, Some(4)));
    assert!(r.width_from.contains("at 1 thread: the table measured it at 2 threads"), "{}", r.width_from);
}

#[test]
fn an_off_entry_keeps_classic_without_a_drafter_flag() {
    let off = entry("ngram", "cpu:x86_64-avx2", "q4_1", "\"off\"", FP)
        .replace("ratio = 1.5", "ratio = 0.9")
        .replace("ratio_interval = [1.4, 1.6]", "ratio_interval = [0.85, 0.95]");
    let t = table(&[off]);
    let r = In::new(DrafterKind::Ngram, "q4_1").auto(&t);
    assert_eq!((r.drafter, r.width.map(Width::get)), (None, None));
    assert!(matches!(r.provenance, Provenance::PolicyClassic { fallback: Fallback::Off { .. }, .. }));
    assert_eq!(
        r.width_from,
        "speculation off by the policy (no --drafter): measured off for ngram on cpu:x86_64-avx2 (amd-zen4) with a q4_1 llama 134.5M target \
         at 2 threads: speculation ran 0.90x classic [0.85, 0.95] (records/r1, 2026-01-15)"
    );
}

#[test]
fn a_width_whose_interval_reaches_classic_does_not_turn_speculation_on() {
    let e = entry("ngram", "cpu:x86_64-avx2", "q4_1", "2", FP)
        .replace("ratio_interval = [1.4, 1.6]", "ratio_interval = [0.99, 1.6]");
    let r = In::new(DrafterKind::Ngram, "q4_1").auto(&table(&[e]));
    assert_eq!(r.drafter, None);
    assert!(r.width_from.contains("but its interval [0.99, 1.60] reaches 1.0 (records/r1)"), "{}", r.width_from);
}

#[test]
fn a_stale_entry_keeps_classic_without_a_drafter_flag_and_names_the_fingerprints() {
    let t = table(&[entry("ngram", "cpu:x86_64-avx2", "q4_1", "3", OTHER_FP)]);
    let r = In::new(DrafterKind::Ngram, "q4_1").auto(&t);
    assert_eq!(r.drafter, None);
    assert_eq!(
        r.width_from,
        format!(
            "speculation off by the policy (no --drafter): the entry for ngram on cpu:x86_64-avx2 (amd-zen4) with a q4_1 llama 134.5M target \
             at 2 threads is stale: measured with verify-path fingerprint {OTHER_FP}, this build has {FP} for the \
             key (records/r1); re-measure with `tuner sweep`"
        )
    );
}

#[test]
fn a_target_with_other_weight_formats_does_not_use_the_entry() {
    // This build's fingerprint depends on the formats, as the real one does.
    fn by_formats(_: &DeviceClass, f: Option<&[String]>) -> String {
        if f.is_some_and(|f| f.iter().any(|x| x == "q6_k")) { OTHER_FP.into() } else { FP.into() }
    }
    let t = table(&[entry("ngram", "cpu:x86_64-avx2", "q4_1", "3", FP)]);
    let r = Resolver { table: &t, fingerprint: &by_formats };
    let i = In { formats: vec!["q4_1".into(), "q6_k".into()], ..In::new(DrafterKind::Ngram, "q4_1") };
    let res = r.auto(&i.host());
    assert_eq!(res.drafter, None);
    assert!(
        res.width_from.contains("it measured a target with weight formats [q4_1, q8_0], this one has [q4_1, q6_k]"),
        "{}",
        res.width_from
    );
    assert_eq!(r.auto(&In::new(DrafterKind::Ngram, "q4_1").host()).width.map(Width::get), Some(3));
}

#[test]
fn with_no_entry_or_no_key_the_policy_keeps_classic_and_says_which_key() {
    let r = In::new(DrafterKind::Ngram, "q4_1").auto(&empty());
    assert_eq!(
        r.width_from,
        "speculation off by the policy (no --drafter): no measurement for a weight-free drafter (ngram, layerskip, suffix) \
         on cpu:x86_64-avx2 (amd-zen4) with a q4_1 llama 134.5M target at 2 threads"
    );
    assert!(r.steps.iter().all(|s| !s.decided) && r.steps.len() == 3, "{:?}", r.steps);
    let q = QuantClass {
        class: "unknown".into(),
        from: "config.json does not parse: expected value at line 1 column 1".into(),
        file: Some("/m/config.json".into()),
        field: Some("quantization_config".into()),
        format: None,
    };
    let r = In { quant: q, ..In::new(DrafterKind::Ngram, "q4_1") }.auto(&empty());
    assert_eq!(
        r.width_from,
        "speculation off by the policy (no --drafter): no key for a weight-free drafter (ngram, layerskip, suffix) on \
         cpu:x86_64-avx2 (amd-zen4) at 2 threads: target quantization unknown (config.json does not parse: expected value at \
         line 1 column 1; read /m/config.json, field quantization_config)"
    );
}

#[test]
fn the_fastest_weight_free_entry_wins_and_checkpoint_drafters_never_turn_on() {
    let slow = entry("ngram", "cpu:x86_64-avx2", "q4_1", "3", FP);
    let fast = entry("layerskip", "cpu:x86_64-avx2", "q4_1", "2", FP).replace("ratio = 1.5", "ratio = 1.55");
    let model = entry("draft-model", "cpu:x86_64-avx2", "q4_1", "5", FP).replace("ratio = 1.5", "ratio = 1.59");
    let r = In::new(DrafterKind::Ngram, "q4_1").auto(&table(&[slow.clone(), fast, model.clone()]));
    assert_eq!((r.drafter, r.width.map(Width::get)), (Some(DrafterKind::Layerskip), Some(2)));
    assert_eq!(r.drafter_settings, Some(DrafterSettings::layerskip(vec![0, 1, 2])));
    let r = In::new(DrafterKind::Ngram, "q4_1").auto(&table(&[model]));
    assert_eq!(r.drafter, None, "a draft model needs its checkpoint named");
    // CUDA keys carry no thread count.
    let cuda = entry("ngram", "cuda:sm_90", "q4_1", "4", FP);
    let r = In { device: "cuda:sm_90", threads: 16, ..In::new(DrafterKind::Ngram, "q4_1") }.auto(&table(&[cuda]));
    assert_eq!(r.width.map(Width::get), Some(4));
    assert!(
        r.width_from.contains("on cuda:sm_90 (amd-zen4) with a q4_1 llama 134.5M target (ngram_min"),
        "{}",
        r.width_from
    );
}

#[test]
fn a_named_drafter_with_other_settings_does_not_use_the_entry() {
    let t = table(&[entry("ngram", "cpu:x86_64-avx2", "q4_1", "3", FP)]);
    let mut i = In::new(DrafterKind::Ngram, "q4_1");
    // No settings given: the entry decides and its settings are the ones to run.
    let r = i.resolve(&t).unwrap();
    assert_eq!((decided(&r), r.width.map(Width::get)), (StepKind::Table, Some(3)));
    assert_eq!(r.drafter_settings, Some(DrafterSettings::ngram(3, 4)));
    // The same settings given explicitly: still the entry.
    i.settings = DrafterSettings::ngram(3, 4);
    assert_eq!(i.resolve(&t).unwrap().width.map(Width::get), Some(3));
    // Other settings: the per-kind constant, naming the difference.
    i.settings = DrafterSettings { ngram_min: Some(1), ..Default::default() };
    let r = i.resolve(&t).unwrap();
    assert_eq!((decided(&r), r.width.map(Width::get), r.drafter_settings.clone()), (StepKind::Default, Some(4), None));
    assert_eq!(
        r.width_from,
        "per-kind default 4: the entry for ngram on cpu:x86_64-avx2 (amd-zen4) with a q4_1 llama 134.5M target at 2 threads was measured \
         with other drafter settings: ngram_min 1 (measured 3) (records/r1)"
    );
}

#[test]
fn drafter_settings_are_checked_per_kind() {
    assert!(DrafterSettings::ngram(3, 4).check(DrafterKind::Ngram).is_ok());
    for bad in [DrafterSettings::ngram(0, 4), DrafterSettings::ngram(5, 4), DrafterSettings::ngram(1, 1000)] {
        assert!(bad.check(DrafterKind::Ngram).is_err(), "{bad:?}");
    }
    assert!(DrafterSettings::default().check(DrafterKind::Ngram).unwrap_err().contains("needs ngram_min"));
    assert!(DrafterSettings::ngram(3, 4).check(DrafterKind::Layerskip).is_err());
    assert!(DrafterSettings::layerskip(vec![2, 1]).check(DrafterKind::Layerskip).unwrap_err().contains("increasing"));
    assert!(DrafterSettings::layerskip(vec![]).check(DrafterKind::Layerskip).is_err());
    assert!(DrafterSettings::default().check(DrafterKind::DraftModel).is_ok());
    assert!(DrafterSettings::ngram(3, 4).check(DrafterKind::DraftModel).is_err());
    assert_eq!(DrafterSettings::layerskip(vec![0, 1, 2]).describe(), "layers 0-2");
    assert_eq!(DrafterSettings::layerskip(vec![1, 5]).describe(), "layers 1,5");
    assert_eq!(DrafterSettings::ngram(3, 4).describe(), "ngram_min 3, ngram_max 4");
}

#[test]
fn suffix_settings_are_complete_bounded_and_their_own() {
    let ok = DrafterSettings::suffix(2, 32, 0.5);
    assert!(ok.check(DrafterKind::Suffix).is_ok());
    assert!(DrafterSettings::suffix(1, 1, 1.0).check(DrafterKind::Suffix).is_ok());
    assert!(DrafterSettings::suffix(64, 64, 1e-9).check(DrafterKind::Suffix).is_ok());
    assert_eq!(ok.describe(), "suffix_min_match 2, suffix_max_match 32, suffix_min_prob 0.5");
    // Out of range: each message names the field and the value.
    for (bad, says) in [
        (DrafterSettings::suffix(0, 32, 0.5), "suffix_min_match 0"),
        (DrafterSettings::suffix(5, 4, 0.5), "suffix_min_match 5 / suffix_max_match 4"),
        (DrafterSettings::suffix(2, 65, 0.5), "suffix_max_match 65"),
        (DrafterSettings::suffix(2, 32, 0.0), "suffix_min_prob 0"),
        (DrafterSettings::suffix(2, 32, -0.5), "suffix_min_prob -0.5"),
        (DrafterSettings::suffix(2, 32, 1.5), "suffix_min_prob 1.5"),
        (DrafterSettings::suffix(2, 32, f64::NAN), "suffix_min_prob NaN"),
    ] {
        let e = bad.check(DrafterKind::Suffix).unwrap_err();
        assert!(e.contains(says), "{bad:?}: {e}");
    }
    // Incomplete.
    let partial = DrafterSettings { suffix_min_match: Some(2), suffix_max_match: Some(4), ..Default::default() };
    assert!(partial.check(DrafterKind::Suffix).unwrap_err().contains("needs suffix_min_match"));
    assert!(DrafterSettings::default().check(DrafterKind::Suffix).unwrap_err().contains("needs suffix_min_match"));
    // Other kinds' fields on suffix.
    let with_ngram = DrafterSettings { ngram_min: Some(3), ..ok.clone() };
    assert!(
        with_ngram
            .check(DrafterKind::Suffix)
            .unwrap_err()
            .contains("ngram_min/ngram_max is not a setting of the suffix")
    );
    let with_layers = DrafterSettings { layers: Some(vec![0]), ..ok.clone() };
    assert!(with_layers.check(DrafterKind::Suffix).unwrap_err().contains("layers is not a setting of the suffix"));
    // Suffix fields on other kinds.
    for kind in [DrafterKind::Ngram, DrafterKind::Layerskip, DrafterKind::DraftModel] {
        let base = match kind {
            DrafterKind::Ngram => DrafterSettings::ngram(3, 4),
            DrafterKind::Layerskip => DrafterSettings::layerskip(vec![0, 1]),
            _ => DrafterSettings::default(),
        };
        assert!(base.check(kind).is_ok(), "{kind}");
        for extra in [
            DrafterSettings { suffix_min_match: Some(2), ..base.clone() },
            DrafterSettings { suffix_max_match: Some(8), ..base.clone() },
            DrafterSettings { suffix_min_prob: Some(Probability(0.5)), ..base.clone() },
        ] {
            let e = extra.check(kind).unwrap_err();
            assert!(e.contains(&format!("is not a setting of the {kind} drafter")) && e.contains("suffix_"), "{e}");
        }
    }
}

#[test]
fn suffix_settings_serialize_only_when_set_and_round_trip() {
    // Settings without the suffix fields serialize as they always did.
    assert_eq!(serde_json::to_string(&DrafterSettings::ngram(3, 4)).unwrap(), r#"{"ngram_min":3,"ngram_max":4}"#);
    assert_eq!(serde_json::to_string(&DrafterSettings::layerskip(vec![0, 1])).unwrap(), r#"{"layers":[0,1]}"#);
    assert_eq!(serde_json::to_string(&DrafterSettings::default()).unwrap(), "{}");
    let s = DrafterSettings::suffix(2, 32, 0.5);
    let j = serde_json::to_string(&s).unwrap();
    assert_eq!(j, r#"{"suffix_min_match":2,"suffix_max_match":32,"suffix_min_prob":0.5}"#);
    assert_eq!(serde_json::from_str::<DrafterSettings>(&j).unwrap(), s);
    let t: DrafterSettings =
        toml::from_str("suffix_min_match = 3\nsuffix_max_match = 8\nsuffix_min_prob = 0.25\n").unwrap();
    assert_eq!(t, DrafterSettings::suffix(3, 8, 0.25));
    // Overlaying and differences cover the suffix fields.
    let req = DrafterSettings { suffix_min_prob: Some(Probability(0.75)), ..Default::default() };
    assert_eq!(s.overlaid_with(&req), DrafterSettings::suffix(2, 32, 0.75));
    assert_eq!(s.differences(&req), vec!["suffix_min_prob 0.75 (measured 0.5)".to_string()]);
    assert!(s.differences(&DrafterSettings::suffix(2, 32, 0.5)).is_empty());
}
