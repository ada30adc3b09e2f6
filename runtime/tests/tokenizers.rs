//! The GGUF tokenizers against llama.cpp, on small generated vocabularies
//! (runtime/tests/fixtures/tokenizers, written by
//! reference/tokenizer_vocab_gguf.py): one byte-level BPE vocabulary whose
//! merges cross every place a pre-tokenizer cuts, written once per
//! pre-tokenizer name, and one SentencePiece vocabulary written as Llama 2
//! and Mistral files are. reference/data/tokenizers.llamacpp.json holds
//! llama.cpp's ids for each file and hard string, with BOS and special
//! tokens parsed and with neither.

use runtime::gguf::GgufFile;
use runtime::tokenizer::Tokenizer;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Hard strings per file in the reference.
const CASES: usize = 36;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizers")
}

fn reference() -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../reference/data/tokenizers.llamacpp.json");
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

fn load(name: &str) -> Tokenizer {
    let f = GgufFile::open(&fixtures().join(name)).unwrap();
    Tokenizer::from_gguf(&f).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// Checks every case of `file` against llama.cpp; returns how many.
fn check_file(file: &str) -> usize {
    check(file, &load(file))
}

/// Checks `tok` against llama.cpp's ids for `file`; returns how many cases.
fn check(file: &str, tok: &Tokenizer) -> usize {
    let r = reference();
    let cases = r["files"][file]["cases"].as_array().unwrap_or_else(|| panic!("{file} has no reference cases"));
    let mut bad = Vec::new();
    for c in cases {
        let text = c["text"].as_str().unwrap();
        let with = tok.encode_prompt(text).unwrap();
        if with != ids(&c["with_specials"]) {
            bad.push(format!("{text:?} with specials: ours {with:?}, llama.cpp {:?}", ids(&c["with_specials"])));
        }
        let plain = tok.encode_as_text(text).unwrap();
        if plain != ids(&c["as_text"]) {
            bad.push(format!("{text:?} as text: ours {plain:?}, llama.cpp {:?}", ids(&c["as_text"])));
        }
    }
    assert!(
        bad.is_empty(),
        "{file}: {} of {} cases differ from llama.cpp:\n{}",
        bad.len(),
        2 * cases.len(),
        bad.join("\n")
    );
    cases.len()
}

#[test]
fn every_fixture_has_reference_cases() {
    let r = reference();
    let mut files: Vec<String> = std::fs::read_dir(fixtures())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".gguf"))
        .collect();
    files.sort();
    let listed: Vec<&String> = r["files"].as_object().unwrap().keys().collect();
    assert_eq!(files.iter().collect::<Vec<_>>(), listed);
    assert!(files.len() >= 8, "{files:?}");
}

#[test]
fn gpt2_pre_tokenizer_matches_llama_cpp() {
    assert_eq!(check_file("bpe-gpt-2.gguf"), CASES);
}

#[test]
fn smollm_pre_tokenizer_matches_llama_cpp() {
    assert_eq!(check_file("bpe-smollm.gguf"), CASES);
}

#[test]
fn llama3_pre_tokenizer_matches_llama_cpp() {
    assert_eq!(check_file("bpe-llama-bpe.gguf"), CASES);
}

#[test]
fn qwen2_pre_tokenizer_matches_llama_cpp() {
    assert_eq!(check_file("bpe-qwen2.gguf"), CASES);
}

#[test]
fn tekken_pre_tokenizer_matches_llama_cpp() {
    assert_eq!(check_file("bpe-tekken.gguf"), CASES);
}

#[test]
fn default_pre_tokenizer_matches_llama_cpp() {
    assert_eq!(check_file("bpe-default.gguf"), CASES);
}

/// llama.cpp reads a BPE file without `tokenizer.ggml.pre` as `default`.
#[test]
fn a_file_without_a_pre_tokenizer_key_splits_as_default() {
    let mut bytes = std::fs::read(fixtures().join("bpe-default.gguf")).unwrap();
    let key = b"tokenizer.ggml.pre";
    let at = bytes.windows(key.len()).position(|w| w == key).unwrap();
    bytes[at + key.len() - 1] = b'X';
    let f = GgufFile::from_bytes(bytes).unwrap();
    assert!(f.get_str("tokenizer.ggml.pre").is_err());
    let tok = Tokenizer::from_gguf(&f).unwrap();
    assert_eq!(check("bpe-default.gguf", &tok), CASES);
}

#[test]
fn llama2_sentencepiece_matches_llama_cpp() {
    assert_eq!(check_file("spm-llama2.gguf"), CASES);
}

#[test]
fn mistral_sentencepiece_matches_llama_cpp() {
    assert_eq!(check_file("spm-mistral.gguf"), CASES);
}

/// The BOS settings the files leave to the defaults: on for Llama 3 and
/// Tekken and SentencePiece, off for GPT-2's; Qwen's file says on.
#[test]
fn bos_defaults_follow_the_pre_tokenizer() {
    for (file, add_bos) in [
        ("bpe-llama-bpe.gguf", true),
        ("bpe-tekken.gguf", true),
        ("bpe-gpt-2.gguf", false),
        ("bpe-qwen2.gguf", true),
        ("spm-llama2.gguf", true),
    ] {
        assert_eq!(load(file).add_bos, add_bos, "{file}");
    }
}

/// A text encoded piece by piece (cut only at single spaces between
/// non-spaces) has the ids of the whole, under every pre-tokenizer, and
/// byte-level ids decode to the text.
#[test]
fn bpe_pieces_encode_as_the_whole_and_decode_to_the_text() {
    let r = reference();
    let texts: Vec<String> = r["files"]["bpe-gpt-2.gguf"]["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["text"].as_str().unwrap().into())
        .collect();
    let all = texts.join(" ");
    for file in [
        "bpe-default.gguf",
        "bpe-gpt-2.gguf",
        "bpe-smollm.gguf",
        "bpe-llama-bpe.gguf",
        "bpe-qwen2.gguf",
        "bpe-tekken.gguf",
    ] {
        let tok = load(file);
        for t in texts.iter().chain([&all]) {
            let whole = tok.encode(t).unwrap();
            for piece in [1, 5, 17] {
                assert_eq!(tok.encode_in_pieces(t, piece).unwrap(), whole, "{file}: {t:?} in pieces of {piece}");
            }
            assert_eq!(tok.decode(&whole).unwrap(), *t, "{file}");
        }
    }
}

/// The bytes of fixture `file` with its `tokenizer.ggml.pre` value `from`
/// replaced by `to` (same length, so the file's layout stays valid).
fn with_pre(file: &str, from: &str, to: &str) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let mut bytes = std::fs::read(fixtures().join(file)).unwrap();
    let mut needle = (from.len() as u64).to_le_bytes().to_vec();
    needle.extend_from_slice(from.as_bytes());
    let at = bytes.windows(needle.len()).position(|w| w == needle).unwrap();
    bytes[at + 8..at + needle.len()].copy_from_slice(to.as_bytes());
    bytes
}

/// Pre-tokenizers llama.cpp knows and this runtime does not: refused,
/// naming the value and the key.
#[test]
fn an_unknown_pre_tokenizer_is_refused_by_name() {
    for (file, from, to) in [
        ("bpe-gpt-2.gguf", "gpt-2", "bloom"),
        ("bpe-llama-bpe.gguf", "llama-bpe", "chameleon"),
        ("bpe-tekken.gguf", "tekken", "viking"),
    ] {
        let f = GgufFile::from_bytes(with_pre(file, from, to)).unwrap();
        let e = Tokenizer::from_gguf(&f).unwrap_err().to_string();
        assert!(e.contains(&format!("{to:?}")) && e.contains("tokenizer.ggml.pre"), "{e}");
        // The same bytes with the name put back load.
        let f = GgufFile::from_bytes(with_pre(file, from, from)).unwrap();
        assert!(Tokenizer::from_gguf(&f).is_ok());
    }
}
