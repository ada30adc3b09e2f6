//! Tests of the draft-width policy: kinds, the table compiler, the
//! classifier, declarations and resolution.

use super::declared::{Declared, from_config, read_declared};
use super::kind::{DeclarationSource, DrafterKind};
use super::quant::{QuantClass, classify_gguf, classify_hf_config_file, classify_path};
use super::resolve::{Fallback, PolicyError, Provenance, Resolution, ResolveInput, Resolver, StepKind};
use super::table::{Problem, RecordCheck, Table, TableError, Width, compile, parse_width};
use super::{KERNEL_FINGERPRINT, compiled_table};
use crate::gguf::{GgufFile, Value, test_writer::Builder};
use kernels::quant::GgmlType;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// This test build's fingerprint stand-in, and another build's.
const FP: &str = "0123456789abcdef";
const OTHER_FP: &str = "fedcba9876543210";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/policy/quant").join(name)
}

fn known(class: &str) -> QuantClass {
    QuantClass { class: class.into(), from: format!("test: {class}"), file: None, field: None }
}

fn no_decl() -> Declared {
    Declared::Absent { why: "test: nothing declared".into() }
}

/// One `[[entry]]` with sensible values for the fields a test does not vary.
fn entry(drafter: &str, device: &str, quant: &str, width: &str, fp: &str) -> String {
    format!(
        "[[entry]]\ndrafter = \"{drafter}\"\ndevice_class = \"{device}\"\ntarget_quant = \"{quant}\"\n\
         block_size = {width}\nrecord = \"records/r1\"\ndate = 2026-01-15\nratio = 1.5\n\
         ratio_interval = [1.4, 1.6]\nhost = \"test host\"\nkernel_fingerprint = \"{fp}\"\n\n"
    )
}

fn table(entries: &[String]) -> Table {
    let text = format!("schema_version = 1\n\n{}", entries.concat());
    compile("test.toml", &text, RecordCheck::Skip).unwrap_or_else(|e| panic!("{e}"))
}

fn empty() -> Table {
    table(&[])
}

struct In<'a> {
    drafter: DrafterKind,
    declared: Declared,
    device: &'a str,
    quant: QuantClass,
    flag: Option<&'a str>,
    env: Option<&'a str>,
}

impl<'a> In<'a> {
    fn new(drafter: DrafterKind, quant: &str) -> Self {
        In { drafter, declared: no_decl(), device: "cpu:x86_64-avx2", quant: known(quant), flag: None, env: None }
    }

    fn resolve(&self, t: &Table) -> Result<Resolution, PolicyError> {
        let r = Resolver { table: t, kernel_fingerprint: FP };
        r.resolve(&ResolveInput {
            drafter: self.drafter,
            declared: &self.declared,
            device_class: self.device,
            target_quant: &self.quant,
            flag: self.flag,
            env: self.env,
        })
    }
}

fn decided(r: &Resolution) -> StepKind {
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
    assert!(e.contains("eagle") && e.contains("ngram, layerskip, draft-model, dflash, mtp"), "{e}");
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
    ];
    assert_eq!(matrix.len(), DrafterKind::ALL.len(), "every kind is in the matrix");
    for (kind, source, deciders) in matrix {
        assert_eq!(kind.declaration_source(), source, "{kind}");
        let with_entry = table(&[entry(kind.as_str(), "cpu:x86_64-avx2", "q4_1", "6", FP)]);
        let cases = [(false, false), (true, false), (false, true), (true, true)];
        for ((declares, measured), want) in cases.into_iter().zip(deciders) {
            let mut i = In::new(kind, "q4_1");
            if declares {
                i.declared = Declared::Width { block_size: 9, evidence: "test: declared 9".into() };
            }
            let t = if measured { with_entry.clone() } else { empty() };
            let r = i.resolve(&t).unwrap();
            assert_eq!(decided(&r), want, "{kind} declares={declares} measured={measured}: {r:?}");
            let want_width = match want {
                Decl => 9,
                Tab => 6,
                _ => kind.default_block_size(),
            };
            assert_eq!(r.block_size, Some(want_width), "{kind} declares={declares} measured={measured}");
            // The override beats every one of them.
            i.flag = Some("2");
            let r = i.resolve(&t).unwrap();
            assert_eq!((decided(&r), r.block_size), (StepKind::Flag, Some(2)));
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
    ];
    assert_eq!(constants.len(), DrafterKind::ALL.len());
    // Entries exist, but for other keys: another device, quant and kind.
    let t = table(&[
        entry("ngram", "cpu:x86_64-avx512vnni", "q4_1", "6", FP),
        entry("ngram", "cpu:x86_64-avx2", "q8_0", "6", FP),
        entry("layerskip", "cuda:sm_90", "q4_1", "6", FP),
    ]);
    for (kind, n) in constants {
        assert_eq!(kind.default_block_size(), n, "{kind}");
        let r = In::new(kind, "q4_1").resolve(&t).unwrap();
        assert_eq!(r.block_size, Some(n), "{kind}");
        assert_eq!(decided(&r), StepKind::Default);
        assert_eq!(
            r.block_size_from,
            format!("per-kind default {n}: no measurement for cpu:x86_64-avx2 with a q4_1 target (drafter {kind})")
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
    assert_eq!(r.block_size, Some(4));
    assert_eq!(
        r.block_size_from,
        format!("per-kind default 4: target quantization unknown (config.json not found in {})", dir.path().display())
    );
    assert!(matches!(r.provenance, Provenance::Default { fallback: Fallback::UnknownQuant { .. }, .. }));
}

#[test]
fn a_quantized_target_with_an_unquantized_drafter_resolves_on_the_targets_class() {
    let target = tempfile::tempdir().unwrap();
    std::fs::copy(fixture("modelopt-nvfp4.json"), target.path().join("config.json")).unwrap();
    let drafter = tempfile::tempdir().unwrap();
    std::fs::copy(fixture("unquantized-bf16.json"), drafter.path().join("config.json")).unwrap();
    let t = table(&[
        entry("draft-model", "cuda:sm_121", "bf16", "2", FP),
        entry("draft-model", "cuda:sm_121", "nvfp4", "6", FP),
    ]);
    let r = Resolver { table: &t, kernel_fingerprint: FP };
    let e = super::command::explain(
        &r,
        target.path(),
        Some(drafter.path()),
        &[DrafterKind::DraftModel],
        "cuda:sm_121",
        "--device",
        None,
        None,
    )
    .unwrap();
    assert_eq!(e.target_quant.class, "nvfp4");
    assert_eq!(e.drafter_quant.as_ref().unwrap().class, "bf16");
    let res = &e.resolutions[0];
    assert_eq!(res.block_size, Some(6), "{res:?}");
    match &res.provenance {
        Provenance::Measured { entry } => assert_eq!(entry.target_quant, "nvfp4"),
        p => panic!("{p:?}"),
    }
    assert!(res.block_size_from.contains("with an nvfp4 target"), "{}", res.block_size_from);
    // The human rendering names the class, its evidence and every step.
    let text = super::command::render(&e);
    for want in ["nvfp4", "quant_algo", "not part of the key", "-> 4. policy table"] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }
}

#[test]
fn the_flag_beats_the_environment_and_a_difference_is_said() {
    let t = table(&[entry("ngram", "cpu:x86_64-avx2", "q4_1", "6", FP)]);
    let mut i = In::new(DrafterKind::Ngram, "q4_1");
    i.declared = Declared::Width { block_size: 9, evidence: "test".into() };

    i.env = Some("3");
    let r = i.resolve(&t).unwrap();
    assert_eq!((decided(&r), r.block_size), (StepKind::Env, Some(3)));
    assert_eq!(r.block_size_from, "DRAFTWISE_DRAFT_BLOCK_SIZE=3");

    i.flag = Some("5");
    let r = i.resolve(&t).unwrap();
    assert_eq!((decided(&r), r.block_size), (StepKind::Flag, Some(5)));
    assert_eq!(r.block_size_from, "--draft-block-size 5, overriding DRAFTWISE_DRAFT_BLOCK_SIZE=3");
    assert!(r.steps[1].detail.contains("differs from --draft-block-size 5, which wins"), "{:?}", r.steps[1]);

    i.env = Some("5");
    let r = i.resolve(&t).unwrap();
    assert_eq!(r.block_size_from, "--draft-block-size 5 (DRAFTWISE_DRAFT_BLOCK_SIZE=5 agrees)");

    i.env = None;
    let r = i.resolve(&t).unwrap();
    assert_eq!(r.block_size_from, "--draft-block-size 5");

    // `off` is an override too; an empty variable is unset.
    i.flag = Some("off");
    i.env = Some("");
    let r = i.resolve(&t).unwrap();
    assert_eq!((decided(&r), r.block_size), (StepKind::Flag, None));
    assert_eq!(r.steps[1].detail, "set but empty: treated as unset");
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
        assert!(e.to_string().contains("--draft-block-size"), "{e}");
        // A bad environment value is an error even when a valid flag wins.
        i.flag = Some("4");
        i.env = Some(bad);
        let e = i.resolve(&t).unwrap_err();
        assert!(matches!(&e, PolicyError::BadEnv { value, .. } if value == bad), "{bad}: {e}");
        assert!(e.to_string().contains("unset DRAFTWISE_DRAFT_BLOCK_SIZE"), "{e}");
    }
    assert!(parse_width("0").unwrap_err().contains("use \"off\""));
    assert_eq!(parse_width(" 32 "), Ok(Width::Blocks(32)));
    assert_eq!(parse_width("OFF"), Ok(Width::Off));
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
    let mut strings = vec![Resolution::no_drafter().block_size_from];
    let mut add = |i: In<'_>| strings.push(i.resolve(&t).unwrap().block_size_from);
    add(In { flag: Some("5"), ..base() });
    add(In { flag: Some("5"), env: Some("3"), ..base() });
    add(In { flag: Some("5"), env: Some("5"), ..base() });
    add(In { env: Some("5"), ..base() });
    add(In {
        drafter: DrafterKind::Dflash,
        declared: Declared::Width { block_size: 5, evidence: "block_size = 6 in x".into() },
        ..base()
    });
    add(base());
    add(In { quant: known("q8_0"), ..base() });
    add(In { quant: known("f16"), ..base() });
    add(In { quant: known("bf16"), ..base() });
    add(In { quant: QuantClass::unknown(Some(dir), format!("config.json not found in {}", dir.display())), ..base() });
    let n = strings.len();
    let unique: HashSet<&String> = strings.iter().collect();
    assert_eq!(unique.len(), n, "{strings:#?}");
    // Each names its source at the start, so a reader tells them apart at a glance.
    let starts = [
        "speculation off: no drafter",
        "--draft-block-size 5",
        "--draft-block-size 5, overriding",
        "--draft-block-size 5 (",
        "DRAFTWISE_DRAFT_BLOCK_SIZE=5",
        "declared by the checkpoint:",
        "measured for ngram",
        "measured off for ngram",
        "per-kind default 4: the entry",
        "per-kind default 4: no measurement",
        "per-kind default 4: target quantization unknown",
    ];
    for (s, want) in strings.iter().zip(starts) {
        assert!(s.starts_with(want), "{s:?} should start with {want:?}");
    }
}

#[test]
fn a_stale_entry_is_not_used_and_names_both_fingerprints() {
    let t = table(&[entry("layerskip", "cuda:sm_121", "nvfp4", "7", OTHER_FP)]);
    let i = In { device: "cuda:sm_121", ..In::new(DrafterKind::Layerskip, "nvfp4") };
    let r = i.resolve(&t).unwrap();
    assert_eq!(r.block_size, Some(4), "the per-kind constant applies");
    assert_eq!(decided(&r), StepKind::Default);
    assert_eq!(
        r.block_size_from,
        format!(
            "per-kind default 4: the entry for cuda:sm_121 with an nvfp4 target (drafter layerskip) is stale: \
             measured with kernel fingerprint {OTHER_FP}, this build has {FP} (records/r1)"
        )
    );
    let table_step = &r.steps[3];
    assert_eq!(table_step.step, StepKind::Table);
    assert!(!table_step.decided && table_step.detail.contains("is stale"), "{table_step:?}");
    // Under its own fingerprint the same entry decides.
    let r = Resolver { table: &t, kernel_fingerprint: OTHER_FP }
        .resolve(&ResolveInput {
            drafter: DrafterKind::Layerskip,
            declared: &no_decl(),
            device_class: "cuda:sm_121",
            target_quant: &known("nvfp4"),
            flag: None,
            env: None,
        })
        .unwrap();
    assert_eq!(r.block_size, Some(7));
}

#[test]
fn an_off_entry_disables_speculation_by_default_but_an_override_still_wins() {
    let t = table(&[entry("draft-model", "cpu:x86_64-avx2", "q4_1", "\"off\"", FP)]);
    let mut i = In::new(DrafterKind::DraftModel, "q4_1");
    let r = i.resolve(&t).unwrap();
    assert_eq!((decided(&r), r.block_size), (StepKind::Table, None));
    assert!(r.block_size_from.starts_with("measured off for draft-model on cpu:x86_64-avx2 with a q4_1 target"));
    assert!(r.summary().starts_with("draft width off for draft-model:"), "{}", r.summary());
    assert_eq!(t.entries[0].block_size, Width::Off);
    i.flag = Some("3");
    assert_eq!(i.resolve(&t).unwrap().block_size, Some(3));
}

#[test]
fn no_drafter_means_no_width() {
    let r = Resolution::no_drafter();
    assert_eq!((r.drafter, r.block_size), (None, None));
    assert_eq!(r.block_size_from, "speculation off: no drafter");
    assert_eq!(r.summary(), "draft width: off (speculation off: no drafter)");
}

// ------------------------------------------------------- classification

#[test]
fn each_quantization_class_from_a_config_fixture() {
    // fixture, class, field that decided
    let cases = [
        ("mlx-affine.json", "affine", "quantization"),
        ("mlx-nvfp4.json", "nvfp4", "quantization.mode"),
        ("mlx-mxfp4.json", "mxfp4", "quantization.mode"),
        ("modelopt-nvfp4.json", "nvfp4", "quantization_config.quant_algo"),
        ("modelopt-fp8.json", "fp8", "quantization_config.quantization.quant_algo"),
        ("compressed-tensors-nvfp4.json", "nvfp4-pack-quantized", "quantization_config.config_groups.group_0.format"),
        ("compressed-tensors-w4a16.json", "pack-quantized", "quantization_config.config_groups.group_0.format"),
        ("compressed-tensors-fp8.json", "float-quantized", "quantization_config.config_groups.group_0.format"),
        ("gptq.json", "gptq", "quantization_config.quant_method"),
        ("awq.json", "awq", "quantization_config.quant_method"),
        ("fp8.json", "fp8", "quantization_config.quant_method"),
        ("bitsandbytes-4bit.json", "bitsandbytes", "quantization_config.quant_method"),
        ("unquantized-bf16.json", "bf16", "torch_dtype"),
        ("unquantized-f16-dtype.json", "f16", "dtype"),
        ("unquantized-f32.json", "f32", "torch_dtype"),
        (
            "text-config-nvfp4.json",
            "nvfp4-pack-quantized",
            "text_config.quantization_config.config_groups.group_0.format",
        ),
    ];
    for (file, class, field) in cases {
        let p = fixture(file);
        let q = classify_hf_config_file(&p);
        assert_eq!(q.class, class, "{file}: {q:?}");
        assert_eq!(q.field.as_deref(), Some(field), "{file}: {q:?}");
        assert_eq!(q.file.as_deref(), Some(p.as_path()), "{file}");
        assert!(!q.from.is_empty());
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
fn gguf_with(types: &[GgmlType], file_type: Option<u32>) -> GgufFile {
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
        (GgmlType::Q8_0, 7, "q8_0"),
        (GgmlType::Q4K, 15, "q4_k"),
        (GgmlType::Q5K, 17, "q5_k"),
        (GgmlType::Q6K, 18, "q6_k"),
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
fn explain_reads_a_gguf_target_without_loading_weights() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.gguf");
    let f = gguf_with(&[GgmlType::Q4_1; 3], Some(3));
    std::fs::write(&p, f.bytes()).unwrap();
    let t = table(&[entry("ngram", "cpu:x86_64-avx2", "q4_1", "5", FP)]);
    let r = Resolver { table: &t, kernel_fingerprint: FP };
    let e =
        super::command::explain(&r, &p, None, &DrafterKind::ALL, "cpu:x86_64-avx2", "--device", None, None).unwrap();
    assert_eq!(e.target_quant.class, "q4_1");
    let widths: Vec<_> = e.resolutions.iter().map(|r| r.block_size).collect();
    assert_eq!(widths, [Some(5), Some(4), Some(4), Some(7), Some(1)]);
    let json = serde_json::to_value(&e).unwrap();
    assert_eq!(json["resolutions"][0]["block_size_from"].as_str().unwrap(), e.resolutions[0].block_size_from);
    assert_eq!(json["resolutions"][0]["steps"][3]["decided"], true);
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
    assert!(matches!(&d, Declared::Width { block_size: 15, evidence } if evidence.contains("plus 15 drafts")), "{d:?}");
    let d = from_config(DrafterKind::Dflash, p, &json(r#"{"dflash_config": {"block_size": 8}}"#));
    assert!(matches!(d, Declared::Width { block_size: 7, .. }), "{d:?}");
    let d = from_config(DrafterKind::Mtp, p, &json(r#"{"text_config": {"num_nextn_predict_layers": 1}}"#));
    assert!(matches!(d, Declared::Width { block_size: 1, .. }), "{d:?}");
    let d = from_config(DrafterKind::DraftModel, p, &json(r#"{"speculative_config": {"num_speculative_tokens": 5}}"#));
    assert!(matches!(d, Declared::Width { block_size: 5, .. }), "{d:?}");
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

fn compile_err(text: &str) -> TableError {
    compile("policy/t.toml", text, RecordCheck::Skip).expect_err("must not compile")
}

const HEAD: &str = "schema_version = 1\n\n";

#[test]
fn malformed_toml_fails_with_the_file_and_position() {
    let e = compile_err("schema_version = 1\n[[entry]\ndrafter = \"ngram\"\n");
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
    let e = compile_err("schema_version = 2\n");
    assert_eq!(e.problem, Problem::UnknownSchemaVersion("2".into()));
    assert!(e.to_string().contains("this runtime compiles schema 1"), "{e}");
    let e = compile_err("schema_version = \"1\"\n");
    assert!(matches!(e.problem, Problem::UnknownSchemaVersion(_)), "{e}");
    let e = compile_err(&entry("ngram", "cpu:x86_64-avx2", "q4_1", "4", FP));
    assert_eq!(e.problem, Problem::MissingSchemaVersion);
    let e = compile_err("schema_version = 1\nwidth = 4\n");
    assert_eq!(e.problem, Problem::UnknownTopLevelKey("width".into()));
}

#[test]
fn duplicate_keys_fail_naming_both_entries() {
    let a = entry("ngram", "cpu:x86_64-avx2", "q4_1", "4", FP);
    let b = entry("ngram", "cpu:x86_64-avx512vnni", "q4_1", "5", FP);
    let e = compile_err(&format!("{HEAD}{a}{b}{a}"));
    assert_eq!(e.problem, Problem::DuplicateKey { first: "entry 1 (line 3)".into() });
    assert_eq!(e.entry.as_deref(), Some("entry 3 (line 27) (ngram, cpu:x86_64-avx2, q4_1)"));
    assert!(
        e.to_string().starts_with("policy/t.toml: entry 3 (line 27) (ngram, cpu:x86_64-avx2, q4_1): duplicate key"),
        "{e}"
    );
}

#[test]
fn widths_out_of_range_fail() {
    for (w, problem) in [("0", "0 is out of range"), ("33", "33 is out of range"), ("-2", "-2 is out of range")] {
        let e = compile_err(&format!("{HEAD}{}", entry("ngram", "cpu:x86_64-avx2", "q4_1", w, FP)));
        assert!(matches!(e.problem, Problem::WidthOutOfRange(_)), "{w}: {e}");
        assert!(e.to_string().contains(problem) && e.to_string().contains("entry 1 (line 3) (ngram"), "{e}");
    }
    let e = compile_err(&format!("{HEAD}{}", entry("ngram", "cpu:x86_64-avx2", "q4_1", "\"of\"", FP)));
    assert!(matches!(e.problem, Problem::BadValue { field: "block_size", .. }), "{e}");
    let e = compile_err(&format!("{HEAD}{}", entry("ngram", "cpu:x86_64-avx2", "q4_1", "4.5", FP)));
    assert!(matches!(e.problem, Problem::BadValue { field: "block_size", .. }), "{e}");
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
    assert!(e.to_string().contains("entry 1 (line 3) (eagle3, cpu:x86_64-avx2, q4_1): drafter \"eagle3\""), "{e}");
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
    let cases: [(&str, &str, &str); 9] = [
        ("device_class = \"cpu:x86_64-avx2\"", "device_class = \"gpu0\"", "device_class"),
        ("target_quant = \"q4_1\"", "target_quant = \"unknown\"", "target_quant"),
        ("target_quant = \"q4_1\"", "target_quant = \"Q4_1\"", "target_quant"),
        ("date = 2026-01-15", "date = \"15/01/2026\"", "date"),
        ("ratio = 1.5", "ratio = -1.0", "ratio"),
        ("ratio_interval = [1.4, 1.6]", "ratio_interval = [1.6, 1.7]", "ratio_interval"),
        ("ratio_interval = [1.4, 1.6]", "ratio_interval = [1.4]", "ratio_interval"),
        ("host = \"test host\"", "host = \" \"", "host"),
        (FP, "0123", "kernel_fingerprint"),
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
    // Device classes the dispatcher and CUDA produce are accepted.
    for d in ["cpu:x86_64-avx512vnni", "cpu:aarch64-neon", "cuda:sm_90", "cuda:sm_90a", "cuda:sm_121"] {
        compile("t", &ok.replace("cpu:x86_64-avx2", d), RecordCheck::Skip).unwrap_or_else(|e| panic!("{d}: {e}"));
    }
}

#[test]
fn the_shipped_table_compiles_against_the_repository_and_is_the_one_compiled_in() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let text = std::fs::read_to_string(root.join(super::TABLE_FILE)).unwrap();
    let t = compile(super::TABLE_FILE, &text, RecordCheck::Under(root)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(&t, compiled_table());
    assert_eq!(t.schema_version, 1);
}

#[test]
fn the_kernel_fingerprint_is_sixteen_hex_digits_over_the_kernel_sources() {
    assert_eq!(KERNEL_FINGERPRINT.len(), 16);
    assert!(KERNEL_FINGERPRINT.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    let kernels = Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels");
    assert_eq!(super::fingerprint::kernel_fingerprint(&kernels).unwrap(), KERNEL_FINGERPRINT);
    // It moves with any byte of any kernel source, and ignores CRLF.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("src/matvec")).unwrap();
    std::fs::write(dir.path().join("src/lib.rs"), "pub mod matvec;\n").unwrap();
    std::fs::write(dir.path().join("src/matvec/mod.rs"), "const ROWS: usize = 4;\n").unwrap();
    let a = super::fingerprint::kernel_fingerprint(dir.path()).unwrap();
    std::fs::write(dir.path().join("src/matvec/mod.rs"), "const ROWS: usize = 8;\n").unwrap();
    let b = super::fingerprint::kernel_fingerprint(dir.path()).unwrap();
    std::fs::write(dir.path().join("src/matvec/mod.rs"), "const ROWS: usize = 8;\r\n").unwrap();
    let c = super::fingerprint::kernel_fingerprint(dir.path()).unwrap();
    assert_ne!(a, b);
    assert_eq!(b, c);
    std::fs::create_dir_all(dir.path().join("cuda")).unwrap();
    std::fs::write(dir.path().join("cuda/verify.cu"), "__global__ void k() {}\n").unwrap();
    assert_ne!(super::fingerprint::kernel_fingerprint(dir.path()).unwrap(), b);
}
