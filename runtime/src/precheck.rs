//! Checks made on a Hugging Face checkpoint's files before they are
//! loaded: a streaming look at `tokenizer.json` (how many vocabulary
//! entries, merges and added tokens it holds) against the bounds and the
//! model's `vocab_size` ([`hf_dir`]).
//!
//! The `tokenizers` crate builds the whole tokenizer from the file, at about
//! twenty times the file's size in memory and tens of seconds for a large
//! one (a crafted 120 MB file: 25 s and 2.63 GB), before the runtime can
//! compare its vocabulary with the model's. This pass reads the file once
//! through serde with a visitor that keeps nothing but three counts
//! (every other value is skipped as `IgnoredAny`), so a file that cannot
//! belong to its model is refused in about a second and in constant memory
//! ([`check_against_model`], called by `runtime::open` before loading).

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;
use std::path::Path;

/// Most merges accepted: a BPE merge makes one vocabulary entry, so real
/// files have fewer merges than tokens (Llama 3: 280k for 128k tokens,
/// with the byte-level alphabet's merges); the vocabulary bound
/// ([`crate::model::config::MAX_VOCAB`]) times four leaves room for any of them.
pub const MAX_MERGES: u64 = 4 * crate::model::config::MAX_VOCAB as u64;

/// What the scan counted (0 where the file has no such field).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Entries of `model.vocab` (a map for BPE and WordPiece, a list for Unigram).
    pub vocab: u64,
    /// Entries of `model.merges`.
    pub merges: u64,
    /// Entries of `added_tokens`.
    pub added_tokens: u64,
}

/// Counts `path`'s vocabulary, merges and added tokens without building
/// anything. Errors are the file's own JSON errors (a file that is not
/// JSON is refused here as it would be by the full parse).
pub fn count(path: &Path) -> Result<Counts, String> {
    let f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut de = serde_json::Deserializer::from_reader(std::io::BufReader::new(f));
    let mut counts = Counts::default();
    Top(&mut counts).deserialize(&mut de).map_err(|e| e.to_string())?;
    Ok(counts)
}

/// [`check_against_model`] for the checkpoint directory `dir`, with the
/// `vocab_size` its `config.json` declares (read capped; a config that
/// cannot be read is left to the loader, which names the problem).
pub fn hf_dir(dir: &Path) -> Result<(), String> {
    let vocab_size = crate::limits::read_capped(&dir.join("config.json"), crate::limits::MAX_CONFIG_JSON_BYTES)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v.get("vocab_size").and_then(|x| x.as_u64()));
    check_against_model(dir, vocab_size)
}

/// Refuses a `tokenizer.json` beside a checkpoint whose `config.json`
/// declares `vocab_size`, when its vocabulary plus added tokens could not
/// fit it (the check the loader makes after building, made first), or when
/// its counts pass the runtime's bounds.
pub fn check_against_model(dir: &Path, vocab_size: Option<u64>) -> Result<(), String> {
    let path = dir.join("tokenizer.json");
    if !path.is_file() {
        return Ok(());
    }
    let c = count(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let max_vocab = crate::model::config::MAX_VOCAB as u64;
    if c.vocab > max_vocab {
        return Err(format!(
            "{}: its vocabulary has {} entries, more than the {max_vocab} this runtime loads",
            path.display(),
            c.vocab
        ));
    }
    if c.merges > MAX_MERGES {
        return Err(format!(
            "{}: it has {} merges, more than the {MAX_MERGES} this runtime loads",
            path.display(),
            c.merges
        ));
    }
    if c.added_tokens > max_vocab {
        return Err(format!(
            "{}: it has {} added tokens, more than the {max_vocab} this runtime loads",
            path.display(),
            c.added_tokens
        ));
    }
    // Added tokens usually repeat ids of the vocabulary, so only the
    // vocabulary itself must fit the embedding.
    if let Some(v) = vocab_size
        && c.vocab > v
    {
        return Err(format!(
            "{}: tokenizer has {} tokens, the model only {v} (config.json vocab_size)",
            path.display(),
            c.vocab
        ));
    }
    Ok(())
}

/// The top-level object: `model` and `added_tokens` are looked into.
struct Top<'a>(&'a mut Counts);

impl<'de> DeserializeSeed<'de> for Top<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Top<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a tokenizer.json object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<(), A::Error> {
        while let Some(k) = m.next_key::<std::borrow::Cow<'de, str>>()? {
            match k.as_ref() {
                "model" => m.next_value_seed(ModelPart(&mut *self.0))?,
                "added_tokens" => self.0.added_tokens = m.next_value_seed(Entries)?,
                _ => {
                    m.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// `model`: `vocab` and `merges` are counted.
struct ModelPart<'a>(&'a mut Counts);

impl<'de> DeserializeSeed<'de> for ModelPart<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ModelPart<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a tokenizer model object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<(), A::Error> {
        while let Some(k) = m.next_key::<std::borrow::Cow<'de, str>>()? {
            match k.as_ref() {
                "vocab" => self.0.vocab = m.next_value_seed(Entries)?,
                "merges" => self.0.merges = m.next_value_seed(Entries)?,
                _ => {
                    m.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
    // `model: null` and other shapes: nothing to count (the full parse judges them).
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

/// The number of entries of a map or a list, each skipped unread.
struct Entries;

impl<'de> DeserializeSeed<'de> for Entries {
    type Value = u64;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u64, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Entries {
    type Value = u64;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map or a list")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<u64, A::Error> {
        let mut n = 0;
        while m.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {
            n += 1;
        }
        Ok(n)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<u64, A::Error> {
        let mut n = 0;
        while s.next_element::<IgnoredAny>()?.is_some() {
            n += 1;
        }
        Ok(n)
    }
    fn visit_unit<E>(self) -> Result<u64, E> {
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn the_tiny_checkpoints_tokenizer_is_counted_as_the_tokenizers_crate_builds_it() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../reference/data/tiny/qwen2-hf");
        let c = count(&dir.join("tokenizer.json")).unwrap();
        let built = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
        assert_eq!(c.vocab, built.get_vocab_size(false) as u64, "{c:?}");
        assert_eq!(c.added_tokens, built.get_added_tokens_decoder().len() as u64, "{c:?}");
        assert!(check_against_model(&dir, Some(c.vocab)).is_ok());
    }

    /// A tokenizer.json of `n` vocabulary entries (about 20 bytes each).
    fn big_tokenizer(dir: &Path, n: usize) {
        use std::io::Write;
        let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join("tokenizer.json")).unwrap());
        write!(f, "{{\"version\":\"1.0\",\"added_tokens\":[],\"model\":{{\"type\":\"BPE\",\"vocab\":{{").unwrap();
        for i in 0..n {
            write!(f, "{}\"tok{i:09}\":{i}", if i == 0 { "" } else { "," }).unwrap();
        }
        write!(f, "}},\"merges\":[]}}}}").unwrap();
        f.flush().unwrap();
    }

    #[test]
    fn a_vocabulary_past_the_model_or_the_bound_is_refused_in_a_streaming_pass() {
        let dir = tempfile::tempdir().unwrap();
        // 2 M entries, 44 MB: past MAX_VOCAB. Built by the tokenizers crate, this took gigabytes.
        big_tokenizer(dir.path(), 2 << 20);
        let t0 = Instant::now();
        let e = check_against_model(dir.path(), Some(49152)).unwrap_err();
        assert!(e.contains("more than the 1048576 this runtime loads"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
        // Within the bound but past the model's embedding.
        big_tokenizer(dir.path(), 50_000);
        let e = check_against_model(dir.path(), Some(49152)).unwrap_err();
        assert!(e.contains("tokenizer has 50000 tokens, the model only 49152"), "{e}");
        assert!(check_against_model(dir.path(), Some(50_000)).is_ok());
    }

    #[test]
    fn a_file_that_is_not_json_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tokenizer.json"), "{\"model\": {\"vocab\": [1, 2,").unwrap();
        let e = check_against_model(dir.path(), None).unwrap_err();
        assert!(e.contains("tokenizer.json"), "{e}");
    }
}
