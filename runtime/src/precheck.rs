//! Checks made on a Hugging Face checkpoint's files before they are
//! loaded ([`hf_dir`]): a streaming look at `tokenizer.json` (how many
//! vocabulary entries, merges and added tokens it holds) against the bounds
//! and the model's `vocab_size`, and at each safetensors header (how many
//! tensors it declares; each shard a different file).
//!
//! Parsing a safetensors header keeps about 1.2 KiB per tensor it names,
//! whatever the tensor's size: a 95 MB header of 1.36 M zero-size tensors
//! took 1.69 GB, and an index naming four shards that were links to that
//! file 2.23 GB, before any check. Counted first, such files are refused
//! in constant memory.
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

/// Most tensors one safetensors file may name, and all of a checkpoint's
/// files together: a dense model of the families this engine runs has
/// about nine per layer (a 126-layer Llama 3.1 405B: 1,138), so 65,536
/// leaves room for any of them and bounds a header's parse at about 80 MB.
pub const MAX_SAFETENSORS_TENSORS: u64 = 1 << 16;

/// Largest safetensors header read (the `safetensors` crate's own limit).
pub const MAX_SAFETENSORS_HEADER_BYTES: u64 = 100_000_000;

/// The checks of this module for the checkpoint directory `dir`: its
/// safetensors headers ([`check_safetensors`]) and its tokenizer.json
/// against the `vocab_size` its `config.json` declares
/// ([`check_against_model`]; a config that cannot be read is left to the
/// loader, which names the problem).
pub fn hf_dir(dir: &Path) -> Result<(), String> {
    check_safetensors(dir)?;
    let vocab_size = crate::limits::read_capped(&dir.join("config.json"), crate::limits::MAX_CONFIG_JSON_BYTES)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v.get("vocab_size").and_then(|x| x.as_u64()));
    check_against_model(dir, vocab_size)
}

/// Counts the tensors each safetensors file of `dir` names (the index's
/// shards, else `model.safetensors`) in a streaming pass over its header,
/// and refuses a file or a checkpoint past [`MAX_SAFETENSORS_TENSORS`], a
/// header past [`MAX_SAFETENSORS_HEADER_BYTES`], and two shards that are
/// the same file. Files that are missing or unreadable are left to the
/// loader, which names them.
pub fn check_safetensors(dir: &Path) -> Result<(), String> {
    let index_path = dir.join("model.safetensors.index.json");
    let names = if index_path.exists() {
        let bytes = crate::limits::read_capped(&index_path, crate::limits::MAX_CONFIG_JSON_BYTES)
            .map_err(|e| format!("{}: {e}", index_path.display()))?;
        crate::model::hf::parse_index(&index_path, &bytes).map_err(|e| e.to_string())?.0
    } else {
        vec!["model.safetensors".to_string()]
    };
    let mut seen: Vec<(std::path::PathBuf, String)> = Vec::new();
    let mut total = 0u64;
    for name in names {
        let p = dir.join(&name);
        let Ok(real) = std::fs::canonicalize(&p) else { continue };
        if let Some((_, other)) = seen.iter().find(|(r, _)| *r == real) {
            return Err(format!(
                "{}: shards {other} and {name} are the same file ({}); each shard of an index must be its own file",
                index_path.display(),
                real.display()
            ));
        }
        seen.push((real, name));
        let n = count_safetensors_tensors(&p)?;
        if n > MAX_SAFETENSORS_TENSORS {
            return Err(format!(
                "{}: its header names {n} tensors, more than the {MAX_SAFETENSORS_TENSORS} this runtime loads",
                p.display()
            ));
        }
        total += n;
        if total > MAX_SAFETENSORS_TENSORS {
            return Err(format!(
                "{}: the checkpoint's files name more than {MAX_SAFETENSORS_TENSORS} tensors together (the \
                 most this runtime loads)",
                dir.display()
            ));
        }
    }
    Ok(())
}

/// The tensors a safetensors file's header names (`__metadata__` is not
/// one), read as a stream: nothing but the count is kept.
pub fn count_safetensors_tensors(path: &Path) -> Result<u64, String> {
    use std::io::Read;
    let err = |e: &dyn fmt::Display| format!("{}: {e}", path.display());
    let mut f = std::fs::File::open(path).map_err(|e| err(&e))?;
    let mut len = [0u8; 8];
    f.read_exact(&mut len).map_err(|e| err(&format!("no safetensors header length ({e})")))?;
    let n = u64::from_le_bytes(len);
    if n > MAX_SAFETENSORS_HEADER_BYTES {
        return Err(err(&format!(
            "the header is {n} bytes, more than the {MAX_SAFETENSORS_HEADER_BYTES} a safetensors header may be"
        )));
    }
    let mut de = serde_json::Deserializer::from_reader(std::io::BufReader::new(f.take(n)));
    let keys = Entries.deserialize(&mut de).map_err(|e| err(&format!("the header is not a JSON object: {e}")))?;
    Ok(keys.saturating_sub(u64::from(header_has_metadata(path).unwrap_or(false))))
}

/// Whether the header has a `__metadata__` entry (a second short pass; the
/// count above does not keep key names).
fn header_has_metadata(path: &Path) -> Option<bool> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).ok()?;
    let mut len = [0u8; 8];
    f.read_exact(&mut len).ok()?;
    let mut de = serde_json::Deserializer::from_reader(std::io::BufReader::new(f.take(u64::from_le_bytes(len))));
    HasKey("__metadata__").deserialize(&mut de).ok()
}

/// Whether a JSON object has the key `.0`; every value is skipped unread.
struct HasKey(&'static str);

impl<'de> DeserializeSeed<'de> for HasKey {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for HasKey {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<bool, A::Error> {
        let mut found = false;
        while let Some(k) = m.next_key::<std::borrow::Cow<'de, str>>()? {
            found |= k == self.0;
            m.next_value::<IgnoredAny>()?;
        }
        Ok(found)
    }
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

    /// A safetensors file of `n` zero-size tensors (about 50 bytes each in the header).
    fn zero_size_tensors(path: &Path, n: usize) {
        use std::io::Write;
        let mut header = String::from("{\"__metadata__\":{\"format\":\"pt\"}");
        for i in 0..n {
            header.push_str(&format!(",\"t{i}\":{{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}"));
        }
        header.push('}');
        let mut f = std::fs::File::create(path).unwrap();
        f.write_all(&(header.len() as u64).to_le_bytes()).unwrap();
        f.write_all(header.as_bytes()).unwrap();
    }

    #[test]
    fn a_safetensors_header_of_too_many_tensors_and_shards_that_are_one_file_are_refused() {
        let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("../reference/data/tiny");
        // Real checkpoints pass, sharded or not.
        assert!(check_safetensors(&tiny.join("qwen2-hf")).is_ok());
        assert!(check_safetensors(&tiny.join("linear-hf")).is_ok());
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("model.safetensors");
        zero_size_tensors(&p, 3);
        assert_eq!(count_safetensors_tensors(&p).unwrap(), 3);
        // One file past the bound (70,000 tensors, 4 MB of header).
        zero_size_tensors(&p, 70_000);
        let t0 = Instant::now();
        let e = check_safetensors(dir.path()).unwrap_err();
        assert!(e.contains("names 70000 tensors, more than the 65536"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
        // An index whose shards are links to one file.
        zero_size_tensors(&p, 10);
        let index = serde_json::json!({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}});
        std::fs::write(dir.path().join("model.safetensors.index.json"), index.to_string()).unwrap();
        std::os::unix::fs::symlink(&p, dir.path().join("s1.safetensors")).unwrap();
        std::os::unix::fs::symlink(&p, dir.path().join("s2.safetensors")).unwrap();
        let e = check_safetensors(dir.path()).unwrap_err();
        assert!(e.contains("shards s1.safetensors and s2.safetensors are the same file"), "{e}");
        // Shards that are each under the bound but not together.
        std::fs::remove_file(dir.path().join("s2.safetensors")).unwrap();
        zero_size_tensors(&dir.path().join("s2.safetensors"), 40_000);
        zero_size_tensors(&p, 40_000);
        let e = check_safetensors(dir.path()).unwrap_err();
        assert!(e.contains("more than 65536 tensors together"), "{e}");
        // A header length past the format's limit.
        std::fs::write(&p, u64::MAX.to_le_bytes()).unwrap();
        let e = count_safetensors_tensors(&p).unwrap_err();
        assert!(e.contains("more than the 100000000"), "{e}");
    }

    #[test]
    fn a_file_that_is_not_json_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tokenizer.json"), "{\"model\": {\"vocab\": [1, 2,").unwrap();
        let e = check_against_model(dir.path(), None).unwrap_err();
        assert!(e.contains("tokenizer.json"), "{e}");
    }
}
