//! Policy tests: widths a checkpoint declares, by kind.
use super::*;

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
