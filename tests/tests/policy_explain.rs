//! `runtime policy explain` as README shows it: bare (the default model),
//! with `-t`, and against a proposed table file (`--policy FILE`) without
//! a rebuild.

use draftwise_tests::{bin, model_path, output_text};
use std::process::Command;

fn explain(args: &[&str]) -> std::process::Output {
    // The default model is looked up in the cache the tests fetch it into.
    let cache = model_path().parent().unwrap().to_path_buf();
    // From the repository root: a table file outside a `policy/` folder has
    // its record folders looked up under the current directory.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    Command::new(bin("runtime"))
        .current_dir(root)
        .args(["policy", "explain", "--json"])
        .args(args)
        .env("DRAFTWISE_CACHE_DIR", cache)
        .env_remove("DRAFTWISE_DRAFT_WIDTH")
        .output()
        .unwrap()
}

#[test]
fn policy_explain_defaults_to_the_default_model_and_takes_t_and_a_policy_file() {
    if std::env::var_os("DRAFTWISE_TEST_MODEL").is_some() {
        eprintln!("skipped: DRAFTWISE_TEST_MODEL replaces the default model, which this test explains");
        return;
    }
    let out = explain(&["-t", "3"]);
    assert!(out.status.success(), "{}", output_text(&out));
    let e: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["target"].as_str(), model_path().to_str());
    assert_eq!(e["threads"], 3);
    let compiled = e["table_entries"].clone();
    // A proposed table: the committed one with its first entry removed,
    // read from a file; the explanation names the file and counts its entries.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let text = std::fs::read_to_string(root.join("policy/draft-block-width.toml")).unwrap();
    let first = text.find("\n[[entry]]").unwrap();
    let second = first + 1 + text[first + 1..].find("\n[[entry]]").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("draft-block-width.toml");
    std::fs::write(&file, format!("{}{}", &text[..first], &text[second..])).unwrap();
    let out = explain(&["-t", "3", "--policy", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", output_text(&out));
    let p: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(p["table_file"].as_str().unwrap().contains("(--policy, not the compiled table)"), "{p}");
    assert_eq!(p["table_entries"].as_u64().unwrap() + 1, compiled.as_u64().unwrap());
    // A table that does not compile is refused, naming the file.
    std::fs::write(&file, "schema_version = 999\n").unwrap();
    let out = explain(&["--policy", file.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(output_text(&out).contains("--policy"), "{}", output_text(&out));
}
