//! Checks made on a Hugging Face checkpoint's files before they are
//! loaded ([`hf_dir`]): a streaming look at `tokenizer.json` (how many
//! vocabulary entries, merges and added tokens it holds) against the bounds
//! and the model's `vocab_size`, and at each safetensors header (how many
//! tensors it declares; each shard a different file).
//!
//! For a GGUF file ([`gguf`]): a walk over its metadata that counts the
//! elements of the arrays the runtime never reads. The GGUF reader builds
//! every metadata value as a 32-byte value while it parses (it keeps those
//! of the namespaces the engine reads for the life of the model, and drops
//! the others after building them), so arrays are bounded from here: a
//! 203 MB file of unused F32 arrays held 1.78 GB.
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
//! Every other section (normalizer, pre-tokenizer, post-processor,
//! decoder, the model's own fields) is walked the same way and bounded
//! together ([`MAX_SECTION_VALUES`], [`MAX_SECTION_STRING_BYTES`]).

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;
use std::path::Path;

/// Most merges accepted: a BPE merge makes one vocabulary entry, so real
/// files have fewer merges than tokens (Llama 3: 280k for 128k tokens,
/// with the byte-level alphabet's merges); the vocabulary bound
/// ([`crate::model::config::MAX_VOCAB`]) times four leaves room for any of them.
pub const MAX_MERGES: u64 = 4 * crate::model::config::MAX_VOCAB as u64;

/// Most JSON values (each scalar, string, list and object counts one) all
/// the sections of a tokenizer.json other than the vocabulary, the merges
/// and the added tokens may hold together: the normalizer, pre-tokenizer,
/// post-processor, decoder, truncation, padding and the model's scalars.
/// Real files hold tens to hundreds (a sequence of a few normalizers, a
/// template with its special tokens); the `tokenizers` crate builds each
/// value into an object of its own, and a normalizer sequence of millions
/// aborted the process at 3.7 GB.
pub const MAX_SECTION_VALUES: u64 = 1 << 16;

/// Most bytes of strings (keys included) those sections may hold together:
/// the largest real one is a SentencePiece normalizer's
/// `precompiled_charsmap`, a few hundred kB of base64.
pub const MAX_SECTION_STRING_BYTES: u64 = 16 << 20;

/// What the scan counted (0 where the file has no such field).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Entries of `model.vocab` (a map for BPE and WordPiece, a list for Unigram).
    pub vocab: u64,
    /// Entries of `model.merges`.
    pub merges: u64,
    /// Entries of `added_tokens`.
    pub added_tokens: u64,
    /// JSON values of every other section ([`MAX_SECTION_VALUES`]).
    pub section_values: u64,
    /// Bytes of their strings and keys ([`MAX_SECTION_STRING_BYTES`]).
    pub section_string_bytes: u64,
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

/// The metadata arrays the runtime reads (the tokenizer's); every other
/// array is read past and dropped by no one, so their elements together
/// are bounded by [`MAX_UNREAD_ARRAY_ELEMENTS`].
pub const READ_ARRAYS: [&str; 4] =
    ["tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type", "tokenizer.ggml.merges"];

/// Elements all unread metadata arrays of a GGUF file may hold together:
/// real files carry only short per-layer arrays besides the tokenizer's
/// (a few hundred elements), and 65,536 of them take 2 MiB in memory.
pub const MAX_UNREAD_ARRAY_ELEMENTS: u64 = 1 << 16;

/// Walks `path`'s GGUF metadata and refuses a file whose arrays other than
/// [`READ_ARRAYS`] hold more than [`MAX_UNREAD_ARRAY_ELEMENTS`] elements
/// together, or whose read arrays pass the vocabulary bounds
/// (`MAX_VOCAB` entries; `MAX_MERGES` merges). The walk keeps nothing but
/// counts and the current key; a file that is not GGUF or is malformed is
/// left to the reader, which names the problem precisely.
pub fn gguf(path: &Path) -> Result<(), String> {
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut w = Walk { r: std::io::BufReader::new(f), unread: 0 };
    match w.file() {
        Ok(()) | Err(Stop::Malformed) => Ok(()),
        Err(Stop::Refused(why)) => Err(format!("{}: {why}", path.display())),
    }
}

enum Stop {
    /// Not GGUF, or cut short: the reader reports it.
    Malformed,
    Refused(String),
}

impl From<std::io::Error> for Stop {
    fn from(_: std::io::Error) -> Self {
        Stop::Malformed
    }
}

struct Walk<R> {
    r: R,
    /// Elements of unread arrays so far.
    unread: u64,
}

const GGUF_STRING: u32 = 8;
const GGUF_ARRAY: u32 = 9;

impl<R: std::io::BufRead + std::io::Seek> Walk<R> {
    fn u32(&mut self) -> Result<u32, Stop> {
        let mut b = [0u8; 4];
        self.r.read_exact(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    fn u64(&mut self) -> Result<u64, Stop> {
        let mut b = [0u8; 8];
        self.r.read_exact(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    fn skip(&mut self, n: u64) -> Result<(), Stop> {
        let n = i64::try_from(n).map_err(|_| Stop::Malformed)?;
        self.r.seek_relative(n)?;
        Ok(())
    }

    /// A string's bytes, kept only when short (keys): longer ones are skipped.
    fn string(&mut self, keep: bool) -> Result<Option<String>, Stop> {
        let n = self.u64()?;
        if n > crate::gguf::MAX_STRING_LEN {
            return Err(Stop::Malformed);
        }
        if !keep {
            self.skip(n)?;
            return Ok(None);
        }
        let mut b = vec![0u8; n as usize];
        self.r.read_exact(&mut b)?;
        Ok(Some(String::from_utf8_lossy(&b).into_owned()))
    }

    fn file(&mut self) -> Result<(), Stop> {
        let mut magic = [0u8; 4];
        self.r.read_exact(&mut magic)?;
        if &magic != b"GGUF" {
            return Err(Stop::Malformed);
        }
        let _version = self.u32()?;
        let _n_tensors = self.u64()?;
        let n_kv = self.u64()?;
        // Each pair takes at least 13 bytes, so a false count ends at the file's end.
        for _ in 0..n_kv {
            let key = self.string(true)?.unwrap_or_default();
            let ty = self.u32()?;
            if ty == GGUF_ARRAY {
                let n = self.array(1)?;
                if READ_ARRAYS.contains(&key.as_str()) {
                    let max = if key.ends_with("merges") {
                        crate::precheck::MAX_MERGES
                    } else {
                        crate::model::config::MAX_VOCAB as u64
                    };
                    if n > max {
                        return Err(Stop::Refused(format!(
                            "metadata array {key} has {n} elements, more than the {max} this runtime loads"
                        )));
                    }
                } else {
                    self.unread = self.unread.saturating_add(n);
                    if self.unread > MAX_UNREAD_ARRAY_ELEMENTS {
                        return Err(Stop::Refused(format!(
                            "its metadata arrays other than the tokenizer's hold more than \
                             {MAX_UNREAD_ARRAY_ELEMENTS} elements together (the runtime reads none of them; at \
                             {key}); remove them from the file"
                        )));
                    }
                }
            } else {
                self.value(ty)?;
            }
        }
        Ok(())
    }

    /// Skips one value of type `ty`.
    fn value(&mut self, ty: u32) -> Result<(), Stop> {
        match ty {
            GGUF_STRING => self.string(false).map(|_| ()),
            GGUF_ARRAY => self.array(1).map(|_| ()),
            t => {
                let n = fixed_bytes(t).ok_or(Stop::Malformed)?;
                self.skip(n)
            }
        }
    }

    /// Skips an array's body; returns its elements, nested arrays' included.
    fn array(&mut self, depth: usize) -> Result<u64, Stop> {
        if depth > crate::gguf::MAX_ARRAY_DEPTH {
            return Err(Stop::Malformed);
        }
        let ty = self.u32()?;
        let count = self.u64()?;
        if count > crate::gguf::MAX_ARRAY_LEN {
            return Err(Stop::Malformed);
        }
        if let Some(n) = fixed_bytes(ty) {
            self.skip(count.checked_mul(n).ok_or(Stop::Malformed)?)?;
            return Ok(count);
        }
        let mut total = count;
        for _ in 0..count {
            match ty {
                GGUF_STRING => {
                    self.string(false)?;
                }
                GGUF_ARRAY => total = total.saturating_add(self.array(depth + 1)?),
                _ => return Err(Stop::Malformed),
            }
        }
        Ok(total)
    }
}

/// Bytes of one value of a fixed-size GGUF type.
fn fixed_bytes(ty: u32) -> Option<u64> {
    Some(match ty {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        10..=12 => 8,
        _ => return None,
    })
}

/// The loader's bounds (defined beside it, `model::hf`, which this module
/// checks ahead of: one definition, and no import circle).
pub use crate::model::hf::{MAX_SAFETENSORS_METADATA, MAX_SAFETENSORS_TENSORS};

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
    // Files are told apart as the loader tells them apart (device and inode
    // on unix, after symlinks): a hard link is another name of the same
    // file, and its path another path.
    let mut seen: Vec<(crate::model::hf::FileId, String)> = Vec::new();
    let mut total = 0u64;
    for name in names {
        let p = dir.join(&name);
        let Ok(id) = crate::model::hf::FileId::of(&p) else { continue };
        if let Some((_, other)) = seen.iter().find(|(r, _)| *r == id) {
            return Err(format!(
                "{}: shards {other} and {name} are the same file (one inode, linked or named twice); each shard \
                 of an index must be its own file",
                index_path.display(),
            ));
        }
        seen.push((id, name));
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
/// one), read as a stream: nothing but the count is kept. A
/// `__metadata__` of more than [`MAX_SAFETENSORS_METADATA`] entries is
/// refused here (the loader keeps every entry, like a tensor's name).
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
    TensorKeys.deserialize(&mut de).map_err(|e| match e.classify() {
        // A bound of this pass (its own message), not the shape.
        serde_json::error::Category::Data if e.to_string().contains("__metadata__") => err(&e),
        _ => err(&format!("the header is not a JSON object: {e}")),
    })
}

/// The keys of a safetensors header other than `__metadata__` (its
/// tensors), counted in one pass, and `__metadata__`'s entries bounded;
/// every other value is skipped unread.
struct TensorKeys;

impl<'de> DeserializeSeed<'de> for TensorKeys {
    type Value = u64;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u64, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for TensorKeys {
    type Value = u64;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<u64, A::Error> {
        let mut n = 0;
        while let Some(k) = m.next_key::<std::borrow::Cow<'de, str>>()? {
            if k == "__metadata__" {
                let entries = m.next_value_seed(Entries)?;
                if entries > MAX_SAFETENSORS_METADATA {
                    return Err(serde::de::Error::custom(format!(
                        "its __metadata__ has {entries} entries, more than the {MAX_SAFETENSORS_METADATA} this runtime \
                         reads (real files carry a few, like \"format\": \"pt\")"
                    )));
                }
            } else {
                n += 1;
                m.next_value::<IgnoredAny>()?;
            }
        }
        Ok(n)
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
                other => {
                    let section = other.to_string();
                    self.0.add_string(&section, other.len()).map_err(serde::de::Error::custom)?;
                    m.next_value_seed(Section { counts: &mut *self.0, section: &section, depth: 0 })?
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
                other => {
                    let section = format!("model.{other}");
                    self.0.add_string(&section, other.len()).map_err(serde::de::Error::custom)?;
                    m.next_value_seed(Section { counts: &mut *self.0, section: &section, depth: 0 })?
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

impl Counts {
    /// One more value of `section`, of `bytes` bytes of string: an error
    /// naming the section once the sections pass either bound.
    fn add_value(&mut self, section: &str, bytes: usize) -> Result<(), String> {
        self.section_values += 1;
        if self.section_values > MAX_SECTION_VALUES {
            return Err(format!(
                "its sections other than the vocabulary, merges and added tokens hold more than \
                 {MAX_SECTION_VALUES} values (passed in `{section}`); real ones hold hundreds"
            ));
        }
        self.add_string(section, bytes)
    }

    fn add_string(&mut self, section: &str, bytes: usize) -> Result<(), String> {
        self.section_string_bytes += bytes as u64;
        if self.section_string_bytes > MAX_SECTION_STRING_BYTES {
            return Err(format!(
                "its sections other than the vocabulary, merges and added tokens hold more than \
                 {MAX_SECTION_STRING_BYTES} bytes of strings (passed in `{section}`)"
            ));
        }
        Ok(())
    }
}

/// Deepest nesting walked in a section (serde_json stops at 128 anyway).
const MAX_SECTION_DEPTH: usize = 64;

/// A section other than the vocabulary, merges and added tokens: every
/// value is counted against [`MAX_SECTION_VALUES`] and
/// [`MAX_SECTION_STRING_BYTES`] and dropped.
struct Section<'a> {
    counts: &'a mut Counts,
    section: &'a str,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Section<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl Section<'_> {
    fn value<E: serde::de::Error>(self, bytes: usize) -> Result<(), E> {
        self.counts.add_value(self.section, bytes).map_err(E::custom)
    }

    fn inner(&mut self) -> Section<'_> {
        Section { counts: &mut *self.counts, section: self.section, depth: self.depth + 1 }
    }
}

impl<'de> Visitor<'de> for Section<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
        self.value(0)
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<(), E> {
        self.value(0)
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<(), E> {
        self.value(0)
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<(), E> {
        self.value(0)
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        self.value(v.len())
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.value(0)
    }
    fn visit_seq<A: SeqAccess<'de>>(mut self, mut s: A) -> Result<(), A::Error> {
        use serde::de::Error;
        if self.depth >= MAX_SECTION_DEPTH {
            return Err(A::Error::custom(format!("`{}` nests deeper than {MAX_SECTION_DEPTH}", self.section)));
        }
        self.counts.add_value(self.section, 0).map_err(A::Error::custom)?;
        while s.next_element_seed(self.inner())?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut m: A) -> Result<(), A::Error> {
        use serde::de::Error;
        if self.depth >= MAX_SECTION_DEPTH {
            return Err(A::Error::custom(format!("`{}` nests deeper than {MAX_SECTION_DEPTH}", self.section)));
        }
        self.counts.add_value(self.section, 0).map_err(A::Error::custom)?;
        while let Some(k) = m.next_key::<std::borrow::Cow<'de, str>>()? {
            self.counts.add_string(self.section, k.len()).map_err(A::Error::custom)?;
            m.next_value_seed(self.inner())?;
        }
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
    fn a_normalizer_or_pre_tokenizer_of_millions_of_entries_is_refused_in_a_streaming_pass() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        // The tiny checkpoint's tokenizer passes with its sections counted.
        let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("../reference/data/tiny/qwen2-hf");
        let c = count(&tiny.join("tokenizer.json")).unwrap();
        assert!(c.section_values > 0 && c.section_values < 1000, "{c:?}");
        for section in ["normalizer", "pre_tokenizer", "decoder"] {
            // A sequence of 1 M lowercase steps (18 MB): built by the
            // tokenizers crate, such a file aborted the process at 3.7 GB.
            let mut f = std::io::BufWriter::new(std::fs::File::create(dir.path().join("tokenizer.json")).unwrap());
            write!(f, "{{\"version\":\"1.0\",\"{section}\":{{\"type\":\"Sequence\",\"steps\":[").unwrap();
            for i in 0..1_000_000 {
                write!(f, "{}{{\"type\":\"Lowercase\"}}", if i == 0 { "" } else { "," }).unwrap();
            }
            write!(f, "]}},\"model\":{{\"type\":\"BPE\",\"vocab\":{{\"a\":0}},\"merges\":[]}}}}").unwrap();
            f.flush().unwrap();
            drop(f);
            let e = check_against_model(dir.path(), Some(10)).unwrap_err();
            assert!(e.contains(&format!("more than {MAX_SECTION_VALUES} values (passed in `{section}`)")), "{e}");
        }
        // One long string in the model's own fields.
        let long = "x".repeat(MAX_SECTION_STRING_BYTES as usize + 1);
        let text = format!("{{\"model\":{{\"type\":\"BPE\",\"unk_token\":\"{long}\",\"vocab\":{{}},\"merges\":[]}}}}");
        std::fs::write(dir.path().join("tokenizer.json"), text).unwrap();
        let e = check_against_model(dir.path(), Some(10)).unwrap_err();
        assert!(e.contains("bytes of strings (passed in `model.unk_token`)"), "{e}");
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
        // Hard links: other names, other paths, one file.
        for s in ["s1.safetensors", "s2.safetensors"] {
            std::fs::remove_file(dir.path().join(s)).unwrap();
            std::fs::hard_link(&p, dir.path().join(s)).unwrap();
        }
        let e = check_safetensors(dir.path()).unwrap_err();
        assert!(e.contains("shards s1.safetensors and s2.safetensors are the same file"), "{e}");
        // A __metadata__ of 70,000 entries beside one tensor.
        let mut meta = serde_json::Map::new();
        for i in 0..70_000 {
            meta.insert(format!("k{i}"), serde_json::json!("v"));
        }
        let header =
            serde_json::json!({"__metadata__": meta, "a": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}});
        let bytes = header.to_string().into_bytes();
        let mut file = (bytes.len() as u64).to_le_bytes().to_vec();
        file.extend_from_slice(&bytes);
        let m = dir.path().join("meta.safetensors");
        std::fs::write(&m, file).unwrap();
        let e = count_safetensors_tensors(&m).unwrap_err();
        assert!(e.contains("__metadata__ has 70000 entries, more than the 4096"), "{e}");
        // Shards that are each under the bound but not together.
        std::fs::remove_file(dir.path().join("s1.safetensors")).unwrap();
        std::os::unix::fs::symlink(&p, dir.path().join("s1.safetensors")).unwrap();
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
    fn a_gguf_of_large_unread_arrays_is_refused_and_real_files_pass() {
        use crate::gguf::Value;
        use crate::gguf::test_writer::Builder as GgufBuilder;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.gguf");
        // The tiny checkpoints' GGUFs, and the default model when it is cached, pass.
        let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("../reference/data/tiny");
        for f in ["qwen2.gguf", "llama3.gguf", "mistral.gguf"] {
            assert!(gguf(&tiny.join(f)).is_ok(), "{f}");
        }
        let write = |kvs: &[(&str, Value)]| {
            let mut b = GgufBuilder::new();
            for (k, v) in kvs {
                b.kv(k, v);
            }
            std::fs::write(&p, b.build()).unwrap();
        };
        // 100,000 unused F32s: the reader held 32 bytes for each.
        write(&[
            ("general.architecture", Value::String("llama".into())),
            ("x.unused", Value::Array(vec![Value::F32(0.5); 100_000])),
        ]);
        let e = gguf(&p).unwrap_err();
        assert!(e.contains("more than 65536 elements together") && e.contains("x.unused"), "{e}");
        // Nested arrays count every element; under the bound, they pass.
        let nested =
            Value::Array(vec![Value::Array(vec![Value::I32(1); 40_000]), Value::Array(vec![Value::I32(1); 30_000])]);
        write(&[("x.nested", nested)]);
        assert!(gguf(&p).unwrap_err().contains("x.nested"));
        write(&[("x.small", Value::Array(vec![Value::U32(1); 60_000])), ("s", Value::String("x".repeat(100)))]);
        assert!(gguf(&p).is_ok());
        // The tokenizer's arrays are bounded by the vocabulary instead.
        write(&[("tokenizer.ggml.scores", Value::Array(vec![Value::F32(0.0); 200_000]))]);
        assert!(gguf(&p).is_ok());
        // A file that is not GGUF, or cut short, is left to the reader.
        std::fs::write(&p, b"GGUF\x03\0\0\0").unwrap();
        assert!(gguf(&p).is_ok());
    }

    #[test]
    fn a_file_that_is_not_json_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tokenizer.json"), "{\"model\": {\"vocab\": [1, 2,").unwrap();
        let e = check_against_model(dir.path(), None).unwrap_err();
        assert!(e.contains("tokenizer.json"), "{e}");
    }
}
