//! Tests of the checkpoint readers: the quantization classifier on
//! Hugging Face configs, safetensors headers and generated GGUF files (and
//! what resolution makes of a target it cannot classify), and the widths a
//! checkpoint declares, by kind.

use super::declared::{from_config, read_declared};
use super::quant::{classify_gguf, classify_hf_config_file, classify_path};
use crate::gguf::{GgufFile, Value, test_writer::Builder};
use crate::test_policy::{FP, In, entry, table};
use kernels::quant::GgmlType;
use policy::resolve::{Fallback, Provenance};
use policy::{Declared, DrafterKind, Width};
use std::path::{Path, PathBuf};

/// A classifier fixture: a trimmed `config.json` in the shape its tool
/// writes (`runtime/tests/fixtures/checkpoint/quant/README.md`).
pub(crate) fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/checkpoint/quant").join(name)
}

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
