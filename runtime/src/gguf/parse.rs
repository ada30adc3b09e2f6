//! The GGUF byte-level parser: header, metadata, tensor infos, layout checks.
//!
//! Layout (ggml `docs/gguf.md`, all little endian):
//! `"GGUF"`, u32 version, u64 tensor_count, u64 metadata_kv_count, the
//! key-value pairs (string key, u32 value type, value), the tensor infos
//! (string name, u32 n_dims, u64 dims[n_dims], u32 ggml type, u64 offset),
//! padding to `general.alignment`, then the tensor data. A string is a u64
//! byte length and UTF-8 bytes; an array is a u32 element type, a u64 count
//! and the elements.
//!
//! Every length or count read from the file is checked against a cap and
//! against the bytes that remain before anything is reserved for it: each
//! entry takes at least a known number of bytes, so a count the rest of the
//! file cannot hold is refused outright.
//!
//! Of the metadata, only the namespaces the engine reads are kept for the
//! file's life (`general.`, `tokenizer.` and the architecture's own, see
//! [`is_read_key`]); every other pair is parsed, so the file is checked
//! whole, and dropped. A file may declare at most [`MAX_METADATA_KV`] pairs.

use std::collections::{BTreeMap, HashSet};

use kernels::quant::GgmlType;

use super::{GgufError, TensorInfo, Value};

/// Longest string accepted (key, value or tensor name). The longest real
/// strings are chat templates of tens of KiB.
pub const MAX_STRING_LEN: u64 = 1 << 24;
/// Most elements accepted in one array. Real vocabularies (token lists,
/// scores, merges) stay under 1M entries.
pub const MAX_ARRAY_LEN: u64 = 1 << 24;
/// Deepest array nesting accepted: an array of arrays is depth 2.
pub const MAX_ARRAY_DEPTH: usize = 4;
/// A metadata array may take at most this many times its size in the file
/// in memory, plus [`ARRAY_AMPLIFICATION_SLACK`] bytes: each element is a
/// [`Value`] of 32 bytes, so a long array of 1- or 2-byte elements (a 16 MB
/// file array would take 512 MB) is refused, while 4-byte and larger
/// elements and strings always fit.
pub const MAX_ARRAY_AMPLIFICATION: u64 = 8;
/// The bytes every array may take beyond [`MAX_ARRAY_AMPLIFICATION`], so
/// short arrays of small elements (per-layer flags) still load.
pub const ARRAY_AMPLIFICATION_SLACK: u64 = 256 * 1024;
/// Most metadata key-value pairs a file may declare, refused at the
/// header. Real files carry tens (the general fields, the architecture's
/// hyper-parameters, the tokenizer's); each pair kept costs about 100 bytes
/// beyond its bytes in the file (a `String` key, a 32-byte [`Value`], a
/// B-tree slot), so 4 M pairs of one-byte values (87 MB of metadata added
/// to SmolLM2-135M) peaked at 747 MB resident against 143 MB without them.
pub const MAX_METADATA_KV: u64 = 1 << 16;
/// The metadata namespaces (the text before a key's first `.`) the engine
/// reads besides the architecture's own (`<general.architecture>.`): the
/// model's description and layout (`general.alignment`, `general.file_type`)
/// and the tokenizer.
pub const READ_NAMESPACES: [&str; 2] = ["general", "tokenizer"];
/// Most tensor dimensions (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;
/// Alignment of the data section when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;

const ALIGNMENT_KEY: &str = "general.alignment";
const ARCHITECTURE_KEY: &str = "general.architecture";
const TYPE_ARRAY: u32 = 9;
/// Fewest bytes a key-value pair can take: empty key (8), type (4), a u8 (1).
const MIN_KV_BYTES: u64 = 13;
/// Fewest bytes a tensor info can take: empty name (8), n_dims (4), type (4),
/// offset (8).
const MIN_TENSOR_INFO_BYTES: u64 = 24;

pub(super) struct Parsed {
    pub version: u32,
    pub alignment: u64,
    pub metadata: BTreeMap<String, Value>,
    pub tensors: Vec<TensorInfo>,
    pub data_offset: u64,
}

/// Whether the engine reads `key`, given the file's architecture as far as
/// it is known: a key of [`READ_NAMESPACES`] or of the architecture's
/// namespace. Until `general.architecture` has been read (`arch` is `None`)
/// every key may be the architecture's, so every key counts as read; the
/// parser drops the others once it knows.
pub(super) fn is_read_key(key: &str, arch: Option<&str>) -> bool {
    let namespace = key.split('.').next().unwrap_or(key);
    match arch {
        None => true,
        Some(a) => READ_NAMESPACES.contains(&namespace) || namespace == a,
    }
}

/// Fewest bytes one value of GGUF type `type_id` occupies, or `None` for an
/// unknown type.
fn min_value_bytes(type_id: u32) -> Option<u64> {
    Some(match type_id {
        0 | 1 | 7 => 1,      // U8, I8, BOOL
        2 | 3 => 2,          // U16, I16
        4..=6 => 4,          // U32, I32, F32
        10..=12 => 8,        // U64, I64, F64
        8 => 8,              // STRING: its length
        TYPE_ARRAY => 4 + 8, // element type and count
        _ => return None,
    })
}

/// A position in the file plus what is being read there, for error messages.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    /// What the bytes at `pos` belong to ("metadata key \"x\"", "tensor \"y\"").
    context: String,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn offset(&self) -> u64 {
        self.pos as u64
    }

    fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8], GgufError> {
        let have = self.remaining();
        if n > have {
            return Err(GgufError::Truncated {
                offset: self.offset(),
                context: self.context.clone(),
                what,
                need: n,
                have,
            });
        }
        // n <= remaining, which is a usize difference: no truncation.
        let end = self.pos + n as usize;
        let bytes = &self.buf[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], GgufError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N as u64, what)?);
        Ok(a)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, GgufError> {
        Ok(self.array::<1>(what)?[0])
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// Refuses `count` entries of at least `min_entry_bytes` each when the
    /// rest of the file cannot hold them; `at` is where the count was read.
    fn check_count(&self, at: u64, what: &'static str, count: u64, min_entry_bytes: u64) -> Result<(), GgufError> {
        let have = self.remaining();
        if u128::from(count) * u128::from(min_entry_bytes) > u128::from(have) {
            return Err(GgufError::CountTooLarge {
                offset: at,
                context: self.context.clone(),
                what,
                count,
                min_entry_bytes,
                have,
            });
        }
        Ok(())
    }

    fn string(&mut self, what: &'static str) -> Result<String, GgufError> {
        let at = self.offset();
        let len = self.u64(what)?;
        if len > MAX_STRING_LEN {
            return Err(GgufError::TooLong {
                offset: at,
                context: self.context.clone(),
                what,
                len,
                max: MAX_STRING_LEN,
            });
        }
        let start = self.offset();
        let bytes = self.take(len, what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(e) => Err(GgufError::InvalidUtf8 {
                offset: start + e.valid_up_to() as u64,
                context: self.context.clone(),
                what,
            }),
        }
    }

    /// One value of type `type_id` (read at `type_at`); `depth` is the number
    /// of arrays this value sits in.
    fn value(&mut self, type_id: u32, type_at: u64, depth: usize) -> Result<Value, GgufError> {
        Ok(match type_id {
            0 => Value::U8(self.u8("U8 value")?),
            1 => Value::I8(i8::from_le_bytes(self.array("I8 value")?)),
            2 => Value::U16(u16::from_le_bytes(self.array("U16 value")?)),
            3 => Value::I16(i16::from_le_bytes(self.array("I16 value")?)),
            4 => Value::U32(self.u32("U32 value")?),
            5 => Value::I32(i32::from_le_bytes(self.array("I32 value")?)),
            6 => Value::F32(f32::from_le_bytes(self.array("F32 value")?)),
            7 => {
                let at = self.offset();
                match self.u8("BOOL value")? {
                    0 => Value::Bool(false),
                    1 => Value::Bool(true),
                    byte => {
                        return Err(GgufError::BadBool { offset: at, context: self.context.clone(), byte });
                    }
                }
            }
            8 => Value::String(self.string("STRING value")?),
            TYPE_ARRAY => self.array_value(depth + 1)?,
            10 => Value::U64(self.u64("U64 value")?),
            11 => Value::I64(i64::from_le_bytes(self.array("I64 value")?)),
            12 => Value::F64(f64::from_le_bytes(self.array("F64 value")?)),
            _ => {
                return Err(GgufError::UnknownValueType { offset: type_at, context: self.context.clone(), type_id });
            }
        })
    }

    /// An ARRAY's body; `depth` counts this array (1 for a top-level array).
    fn array_value(&mut self, depth: usize) -> Result<Value, GgufError> {
        let elem_at = self.offset();
        let elem_type = self.u32("array element type")?;
        let Some(min_elem_bytes) = min_value_bytes(elem_type) else {
            return Err(GgufError::UnknownValueType {
                offset: elem_at,
                context: self.context.clone(),
                type_id: elem_type,
            });
        };
        // Refuse on the declared element type, so that even an empty array of
        // too-deep arrays is reported, and recursion stays bounded.
        if elem_type == TYPE_ARRAY && depth >= MAX_ARRAY_DEPTH {
            return Err(GgufError::NestingTooDeep {
                offset: elem_at,
                context: self.context.clone(),
                max: MAX_ARRAY_DEPTH,
            });
        }
        let count_at = self.offset();
        let count = self.u64("array length")?;
        if count > MAX_ARRAY_LEN {
            return Err(GgufError::TooLong {
                offset: count_at,
                context: self.context.clone(),
                what: "array length",
                len: count,
                max: MAX_ARRAY_LEN,
            });
        }
        self.check_count(count_at, "array length", count, min_elem_bytes)?;
        // Memory: one `Value` per element, whatever its size in the file.
        let per_elem = std::mem::size_of::<Value>() as u64;
        let budget = MAX_ARRAY_AMPLIFICATION * min_elem_bytes;
        if per_elem > budget {
            let max_count = ARRAY_AMPLIFICATION_SLACK / (per_elem - budget);
            if count > max_count {
                return Err(GgufError::ArrayTooCostly {
                    offset: count_at,
                    context: self.context.clone(),
                    count,
                    elem_bytes: min_elem_bytes,
                    memory: count.saturating_mul(per_elem),
                    max_count,
                    factor: MAX_ARRAY_AMPLIFICATION,
                    slack: ARRAY_AMPLIFICATION_SLACK,
                });
            }
        }
        // count <= MAX_ARRAY_LEN and the file holds them: a bounded reservation.
        let mut items = Vec::with_capacity(count as usize);
        for _ in 0..count {
            items.push(self.value(elem_type, elem_at, depth)?);
        }
        Ok(Value::Array(items))
    }
}

/// ggml's name for a type id this reader does not support, if it has one
/// (`enum ggml_type` in ggml.h).
fn ggml_type_name(id: u32) -> Option<&'static str> {
    Some(match id {
        9 => "Q8_1",
        15 => "Q8_K",
        16 => "IQ2_XXS",
        17 => "IQ2_XS",
        18 => "IQ3_XXS",
        19 => "IQ1_S",
        20 => "IQ4_NL",
        21 => "IQ3_S",
        22 => "IQ2_S",
        23 => "IQ4_XS",
        24 => "I8",
        25 => "I16",
        26 => "I32",
        27 => "I64",
        28 => "F64",
        29 => "IQ1_M",
        34 => "TQ1_0",
        35 => "TQ2_0",
        39 => "MXFP4",
        _ => return None,
    })
}

fn unsupported_type_problem(type_id: u32) -> String {
    const SUPPORTED: &str = "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K";
    match ggml_type_name(type_id) {
        Some(name) => format!(
            "ggml type {type_id} ({name}) is not supported; use a model quantized to one of \
             {SUPPORTED}"
        ),
        None => format!("unknown ggml type id {type_id} (supported: {SUPPORTED})"),
    }
}

pub(super) fn parse(buf: &[u8]) -> Result<Parsed, GgufError> {
    let mut c = Cursor { buf, pos: 0, context: "header".to_string() };

    let magic = c.array::<4>("magic")?;
    if &magic != b"GGUF" {
        return Err(GgufError::BadMagic { found: magic });
    }
    let version = c.u32("version")?;
    if !(version == 2 || version == 3) {
        let hint = if (1..=3).contains(&version.swap_bytes()) {
            " (this looks like a big-endian GGUF file; convert it to little endian)"
        } else if version == 1 {
            " (version 1 used 32-bit lengths; re-convert the model with a current llama.cpp)"
        } else {
            ""
        };
        return Err(GgufError::UnsupportedVersion { version, hint });
    }
    let n_tensors_at = c.offset();
    let n_tensors = c.u64("tensor count")?;
    let n_kv_at = c.offset();
    let n_kv = c.u64("metadata key-value count")?;
    c.check_count(n_tensors_at, "tensor count", n_tensors, MIN_TENSOR_INFO_BYTES)?;
    c.check_count(n_kv_at, "metadata key-value count", n_kv, MIN_KV_BYTES)?;
    if n_kv > MAX_METADATA_KV {
        return Err(GgufError::TooManyKeys { offset: n_kv_at, count: n_kv, max: MAX_METADATA_KV });
    }

    // The pairs the engine reads are kept; the others are parsed (the file
    // is checked whole) and dropped, their keys remembered until the end of
    // the parse only, so that a repeated key is still refused.
    let mut metadata = BTreeMap::new();
    let mut dropped = HashSet::new();
    let mut arch: Option<String> = None;
    for i in 0..n_kv {
        c.context = format!("metadata key-value #{i}");
        let key_at = c.offset();
        let key = c.string("key")?;
        if metadata.contains_key(&key) || dropped.contains(&key) {
            return Err(GgufError::DuplicateKey { offset: key_at, key });
        }
        c.context = format!("metadata key \"{key}\"");
        let type_at = c.offset();
        let type_id = c.u32("value type")?;
        let value = c.value(type_id, type_at, 0)?;
        if key == ARCHITECTURE_KEY {
            arch = value.as_str().map(str::to_string);
        }
        if is_read_key(&key, arch.as_deref()) {
            metadata.insert(key, value);
        } else {
            dropped.insert(key);
        }
    }
    // Pairs read before the architecture was known: the architecture's
    // namespace stays, the rest go. (A file with no architecture keeps every
    // pair, at most MAX_METADATA_KV; it cannot load as a model.)
    if let Some(a) = arch.as_deref() {
        metadata.retain(|k, _| is_read_key(k, Some(a)));
    }
    drop(dropped);

    let alignment = match metadata.get(ALIGNMENT_KEY) {
        None => DEFAULT_ALIGNMENT,
        Some(v) => v
            .as_int()
            .and_then(|a| u64::try_from(a).ok())
            .filter(|a| a.is_power_of_two())
            .ok_or_else(|| GgufError::BadAlignment { value: format!("{v:?}") })?,
    };

    c.context = "tensor infos".to_string();
    c.check_count(n_tensors_at, "tensor count", n_tensors, MIN_TENSOR_INFO_BYTES)?;
    // Checked just above against the bytes left: a bounded reservation.
    let mut tensors = Vec::with_capacity(n_tensors as usize);
    let mut names = HashSet::with_capacity(n_tensors as usize);
    for i in 0..n_tensors {
        c.context = format!("tensor info #{i}");
        let name_at = c.offset();
        let name = c.string("tensor name")?;
        if !names.insert(name.clone()) {
            return Err(GgufError::DuplicateTensor { offset: name_at, name });
        }
        c.context = format!("tensor \"{name}\"");
        let n_dims_at = c.offset();
        let n_dims = c.u32("n_dims")?;
        if n_dims > MAX_DIMS {
            return Err(GgufError::TooManyDims { offset: n_dims_at, tensor: name, n_dims, max: MAX_DIMS });
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(c.u64("dimension")?);
        }
        let type_at = c.offset();
        let type_id = c.u32("ggml type")?;
        let Some(ty) = GgmlType::from_id(type_id) else {
            return Err(GgufError::UnsupportedTensorType {
                offset: type_at,
                tensor: name,
                type_id,
                problem: unsupported_type_problem(type_id),
            });
        };
        let offset_at = c.offset();
        let offset = c.u64("data offset")?;

        let Some(n_elems) = dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)) else {
            return Err(GgufError::ElemCountOverflow { tensor: name, dims });
        };
        let row_len = dims.first().copied().unwrap_or(1);
        let block_elems = ty.block_elems();
        if !row_len.is_multiple_of(block_elems as u64) {
            return Err(GgufError::PartialBlock { tensor: name, ty, row_len, block_elems });
        }
        // row_len is whole blocks, so n_elems (a multiple of it) is too.
        let n_bytes =
            (n_elems / block_elems as u64).checked_mul(ty.block_bytes() as u64).and_then(|b| usize::try_from(b).ok());
        let Some(n_bytes) = n_bytes else {
            return Err(GgufError::ByteSizeOverflow { tensor: name, ty, n_elems });
        };
        if !offset.is_multiple_of(alignment) {
            return Err(GgufError::Misaligned { tensor: name, field_offset: offset_at, offset, alignment });
        }
        tensors.push(TensorInfo { name, dims, ty, offset, n_elems, n_bytes });
    }

    // The data section starts at the next multiple of the alignment; the
    // padding's content is not checked (writers fill it with zeros).
    let infos_end = c.offset();
    let Some(data_offset) = infos_end.checked_next_multiple_of(alignment) else {
        return Err(GgufError::BadAlignment { value: format!("{alignment} (past the end of u64)") });
    };
    check_layout(&tensors, data_offset, buf.len() as u64)?;
    Ok(Parsed { version, alignment, metadata, tensors, data_offset })
}

/// Every tensor's data lies inside the file and no two overlap.
fn check_layout(tensors: &[TensorInfo], data_offset: u64, file_len: u64) -> Result<(), GgufError> {
    // (start, end, index); u128 so that no sum can overflow.
    let mut ranges = Vec::with_capacity(tensors.len());
    for (i, t) in tensors.iter().enumerate() {
        let start = u128::from(data_offset) + u128::from(t.offset);
        let end = start + t.n_bytes as u128;
        if end > u128::from(file_len) {
            return Err(GgufError::OutOfBounds { tensor: t.name.clone(), start, end, file_len });
        }
        // Both fit in file_len now.
        ranges.push((start as u64, end as u64, i));
    }
    ranges.sort_unstable();
    // The furthest end so far and whose it is: a range starting before it overlaps.
    let mut furthest: Option<(u64, u64, usize)> = None;
    for &(start, end, i) in &ranges {
        // An empty range overlaps nothing.
        if let Some((f_start, f_end, f)) = furthest
            && start < f_end
            && start < end
        {
            return Err(GgufError::Overlap {
                first: tensors[f].name.clone(),
                first_start: f_start,
                first_end: f_end,
                second: tensors[i].name.clone(),
                second_start: start,
            });
        }
        if furthest.is_none_or(|(_, f_end, _)| end > f_end) {
            furthest = Some((start, end, i));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::GgufFile;
    use super::super::test_writer::{Builder, Raw};
    use super::*;

    fn small_valid_file() -> Vec<u8> {
        let mut b = Builder::new();
        b.kv("general.architecture", &Value::String("llama".into()));
        b.kv("n", &Value::U32(7));
        b.kv("flag", &Value::Bool(true));
        b.kv("arr", &Value::Array(vec![Value::Array(vec![Value::String("x".into())]), Value::Array(vec![])]));
        b.tensor("a", &[4], GgmlType::F32, &[1u8; 16]);
        b.tensor("b", &[32], GgmlType::Q4_1, &[2u8; 20]);
        b.build()
    }

    fn parse_err(bytes: Vec<u8>) -> GgufError {
        GgufFile::from_bytes(bytes).expect_err("crafted file must be refused")
    }

    /// A file whose one key is an array of `count` U8 elements.
    fn u8_array_file(count: usize) -> Vec<u8> {
        let mut b = Builder::new();
        b.kv("general.architecture", &Value::String("llama".into()));
        b.kv("flags", &Value::Array(vec![Value::U8(1); count]));
        b.build()
    }

    #[test]
    fn a_long_array_of_bytes_is_refused_before_it_is_amplified_in_memory() {
        // 16 MiB of U8 elements would be 512 MiB of `Value`s.
        let e = parse_err(u8_array_file(1 << 24));
        assert!(matches!(e, GgufError::ArrayTooCostly { count, .. } if count == 1 << 24), "{e}");
        assert!(e.to_string().contains("in memory"), "{e}");
        // Short arrays of small elements still load.
        GgufFile::from_bytes(u8_array_file(1000)).expect("a 1000-flag array loads");
        // Arrays of 4-byte elements are never more than 8 times their file size.
        let mut b = Builder::new();
        b.kv("general.architecture", &Value::String("llama".into()));
        b.kv("scores", &Value::Array(vec![Value::F32(0.5); 100_000]));
        GgufFile::from_bytes(b.build()).expect("an f32 array loads");
    }

    #[test]
    fn a_file_declaring_more_metadata_pairs_than_the_cap_is_refused_at_its_header() {
        // One-byte values under distinct keys: the shape that was held at
        // 6-8 bytes of memory per byte of file.
        let file = |n: u64| {
            let mut b = Builder::new();
            b.kv("general.architecture", &Value::String("llama".into()));
            for i in 1..n {
                b.kv(&format!("general.k{i}"), &Value::U8(1));
            }
            b.build()
        };
        let t = std::time::Instant::now();
        let e = parse_err(file(MAX_METADATA_KV + 1));
        assert!(t.elapsed().as_secs() < 1, "{:?}", t.elapsed());
        assert!(
            matches!(e, GgufError::TooManyKeys { offset: 16, count, max: MAX_METADATA_KV } if count == MAX_METADATA_KV + 1),
            "{e}"
        );
        assert!(e.to_string().contains("over the limit of 65536"), "{e}");
        let f = GgufFile::from_bytes(file(MAX_METADATA_KV)).expect("a file at the cap loads");
        assert_eq!(f.metadata.len() as u64, MAX_METADATA_KV);
    }

    #[test]
    fn only_the_metadata_namespaces_the_engine_reads_are_kept() {
        let mut b = Builder::new();
        // Before the architecture is known, its namespace cannot be told apart.
        b.kv("llama.block_count", &Value::U32(2));
        b.kv("early.unread", &Value::String("x".repeat(1000)));
        b.kv("general.architecture", &Value::String("llama".into()));
        b.kv("general.name", &Value::String("tiny".into()));
        b.kv("llama.embedding_length", &Value::U32(64));
        b.kv("tokenizer.ggml.model", &Value::String("gpt2".into()));
        b.kv("quantize.imatrix.file", &Value::String("imatrix.dat".into()));
        b.kv("qwen2.block_count", &Value::U32(9));
        b.kv("llamax.y", &Value::U8(1));
        for i in 0..1000 {
            b.kv(&format!("junk.{i}"), &Value::U8(1));
        }
        let f = GgufFile::from_bytes(b.build()).unwrap();
        let kept: Vec<&str> = f.metadata.keys().map(String::as_str).collect();
        assert_eq!(
            kept,
            [
                "general.architecture",
                "general.name",
                "llama.block_count",
                "llama.embedding_length",
                "tokenizer.ggml.model"
            ]
        );
        assert_eq!(f.get_u32("llama.block_count").unwrap(), 2);
        // A dropped key given twice is still a malformed file.
        let mut b = Builder::new();
        b.kv("general.architecture", &Value::String("llama".into()));
        b.kv("junk.k", &Value::U8(1));
        b.kv("junk.k", &Value::U8(2));
        let e = parse_err(b.build());
        assert!(matches!(&e, GgufError::DuplicateKey { key, .. } if key == "junk.k"), "{e}");
        // A dropped pair is still checked: a bad BOOL under an unread key.
        let mut r = header(0, 2);
        r.str("general.architecture").u32(8).str("llama");
        r.str("junk.b").u32(7).bytes(&[2]);
        assert!(matches!(parse_err(r.0), GgufError::BadBool { byte: 2, .. }));
    }

    /// A header declaring `n_tensors` and `n_kv`, then `rest`.
    fn header(n_tensors: u64, n_kv: u64) -> Raw {
        let mut r = Raw::default();
        r.bytes(b"GGUF").u32(3).u64(n_tensors).u64(n_kv);
        r
    }

    #[test]
    fn truncation_at_every_byte_offset_is_an_error_not_a_panic() {
        let full = small_valid_file();
        GgufFile::from_bytes(full.clone()).unwrap();
        for len in 0..full.len() {
            let r = GgufFile::from_bytes(full[..len].to_vec());
            assert!(r.is_err(), "truncated to {len} of {} bytes parsed", full.len());
        }
    }

    #[test]
    fn random_byte_corruptions_never_panic() {
        // A fixed-seed xorshift: reproducible without a rand dependency.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let full = small_valid_file();
        for _ in 0..20_000 {
            let mut bytes = full.clone();
            for _ in 0..1 + next() % 4 {
                let at = (next() % bytes.len() as u64) as usize;
                bytes[at] = match next() % 4 {
                    0 => 0xFF,
                    1 => 0,
                    _ => next() as u8,
                };
            }
            let _ = GgufFile::from_bytes(bytes);
        }
    }

    #[test]
    fn truncated_header_names_the_offset_and_field() {
        let full = small_valid_file();
        let e = parse_err(full[..10].to_vec()).to_string();
        assert!(e.contains("at byte 8") && e.contains("tensor count"), "{e}");
        let e = parse_err(full[..full.len() - 1].to_vec()).to_string();
        assert!(e.contains("tensor \"b\"") && e.contains("past the end of the file"), "{e}");
    }

    #[test]
    fn a_u64_max_string_length_is_refused_without_allocating() {
        let mut r = header(0, 1);
        r.u64(u64::MAX).bytes(&[0; 16]);
        let e = parse_err(r.0);
        assert!(matches!(e, GgufError::TooLong { offset: 24, len: u64::MAX, what: "key", .. }), "{e}");
        // Under the cap but longer than the file: truncation, same offset story.
        let mut r = header(0, 1);
        r.u64(1000).bytes(b"abcdefghij");
        let e = parse_err(r.0);
        assert!(matches!(e, GgufError::Truncated { offset: 32, need: 1000, have: 10, .. }), "{e}");
    }

    #[test]
    fn an_array_of_2_pow_40_elements_is_refused_quickly() {
        let mut r = header(0, 1);
        r.str("big").u32(TYPE_ARRAY).u32(0).u64(1 << 40);
        let t = std::time::Instant::now();
        let e = parse_err(r.0);
        assert!(t.elapsed().as_secs() < 1);
        assert!(matches!(e, GgufError::TooLong { what: "array length", len, .. } if len == 1 << 40));
        assert!(e.to_string().contains("\"big\""), "{e}");
        // Under the cap but more than the bytes left can hold.
        let mut r = header(0, 1);
        r.str("big").u32(TYPE_ARRAY).u32(8).u64(1 << 20).bytes(&[0; 64]);
        let e = parse_err(r.0);
        assert!(matches!(e, GgufError::CountTooLarge { count: 1048576, have: 64, .. }), "{e}");
    }

    #[test]
    fn huge_tensor_and_kv_counts_are_refused_before_reserving() {
        let e = parse_err(header(u64::MAX, 0).0);
        assert!(matches!(e, GgufError::CountTooLarge { offset: 8, what: "tensor count", .. }));
        let e = parse_err(header(0, 1 << 50).0);
        assert!(matches!(e, GgufError::CountTooLarge { offset: 16, .. }), "{e}");
    }

    #[test]
    fn n_dims_of_99_is_refused_naming_the_tensor() {
        let mut r = header(1, 0);
        r.str("w").u32(99).bytes(&[0; 64]);
        let e = parse_err(r.0);
        assert!(matches!(e, GgufError::TooManyDims { n_dims: 99, offset: 33, .. }), "{e}");
        assert!(e.to_string().contains("tensor \"w\""), "{e}");
    }

    #[test]
    fn dims_whose_product_overflows_are_refused() {
        let mut r = header(1, 0);
        r.str("w").u32(3).u64(1 << 32).u64(1 << 32).u64(2).u32(0).u64(0);
        let e = parse_err(r.0);
        assert!(matches!(e, GgufError::ElemCountOverflow { .. }), "{e}");
        // The element count fits but the byte count does not.
        let mut r = header(1, 0);
        r.str("w").u32(2).u64(1 << 32).u64(1 << 31).u32(0).u64(0);
        let e = parse_err(r.0);
        assert!(matches!(e, GgufError::ByteSizeOverflow { .. }), "{e}");
    }

    #[test]
    fn unknown_value_and_tensor_types_are_named() {
        let mut r = header(0, 1);
        r.str("k").u32(13).u32(0);
        let e = parse_err(r.0);
        assert!(matches!(e, GgufError::UnknownValueType { type_id: 13, offset: 33, .. }), "{e}");
        let mut r = header(0, 1);
        r.str("k").u32(TYPE_ARRAY).u32(200).u64(0);
        let e = parse_err(r.0);
        assert!(matches!(e, GgufError::UnknownValueType { type_id: 200, offset: 37, .. }), "{e}");

        let mut r = header(1, 0);
        r.str("w").u32(1).u64(256).u32(23).u64(0);
        let e = parse_err(r.0).to_string();
        assert!(e.contains("tensor \"w\"") && e.contains("(IQ4_XS) is not supported"), "{e}");
        assert!(e.contains("Q5_0, Q5_1") && e.contains("Q2_K, Q3_K"), "{e}");
        let mut r = header(1, 0);
        r.str("w").u32(1).u64(32).u32(99).u64(0);
        let e = parse_err(r.0).to_string();
        assert!(e.contains("unknown ggml type id 99"), "{e}");
    }

    #[test]
    fn bool_bytes_other_than_0_and_1_are_refused() {
        let mut r = header(0, 1);
        r.str("b").u32(7).bytes(&[2]);
        let e = parse_err(r.0);
        assert!(matches!(e, GgufError::BadBool { byte: 2, offset: 37, .. }), "{e}");
    }

    #[test]
    fn arrays_nested_deeper_than_the_cap_are_refused() {
        // Depth 5: four ARRAY-of-ARRAY headers, then a u8 array.
        let mut r = header(0, 1);
        r.str("deep").u32(TYPE_ARRAY);
        for _ in 0..MAX_ARRAY_DEPTH {
            r.u32(TYPE_ARRAY).u64(1);
        }
        r.u32(0).u64(0);
        let e = parse_err(r.0);
        assert!(matches!(e, GgufError::NestingTooDeep { max: MAX_ARRAY_DEPTH, .. }), "{e}");
    }

    #[test]
    fn duplicate_keys_and_tensor_names_are_refused() {
        let mut b = Builder::new();
        b.kv("k", &Value::U8(1));
        b.kv("k", &Value::U8(2));
        let e = parse_err(b.build());
        assert!(matches!(&e, GgufError::DuplicateKey { key, .. } if key == "k"), "{e}");

        let mut b = Builder::new();
        b.tensor("t", &[1], GgmlType::F32, &[0; 4]);
        b.tensor("t", &[1], GgmlType::F32, &[0; 4]);
        let e = parse_err(b.build());
        assert!(matches!(&e, GgufError::DuplicateTensor { name, .. } if name == "t"), "{e}");
    }

    #[test]
    fn misaligned_overlapping_and_out_of_bounds_tensors_are_named() {
        let mut b = Builder::new();
        b.tensor_raw("m", &[1], GgmlType::F32.id(), 4);
        b.data(&[0; 64]);
        let e = parse_err(b.build());
        assert!(matches!(&e, GgufError::Misaligned { tensor, offset: 4, alignment: 32, .. } if tensor == "m"), "{e}");

        let mut b = Builder::new();
        b.tensor_raw("first", &[16], GgmlType::F32.id(), 0); // bytes 0..64
        b.tensor_raw("second", &[1], GgmlType::F32.id(), 32);
        b.data(&[0; 64]);
        let e = parse_err(b.build());
        assert!(
            matches!(&e, GgufError::Overlap { first, second, .. } if first == "first" && second == "second"),
            "{e}"
        );

        let mut b = Builder::new();
        b.tensor_raw("far", &[8], GgmlType::F32.id(), 1 << 62);
        let e = parse_err(b.build());
        assert!(matches!(&e, GgufError::OutOfBounds { tensor, .. } if tensor == "far"), "{e}");
        let mut b = Builder::new();
        b.tensor_raw("huge_offset", &[8], GgmlType::F32.id(), u64::MAX - 31);
        assert!(matches!(parse_err(b.build()), GgufError::OutOfBounds { .. }));
    }

    #[test]
    fn a_row_that_is_not_whole_blocks_is_refused() {
        let mut b = Builder::new();
        b.tensor_raw("q", &[33], GgmlType::Q4_1.id(), 0);
        b.data(&[0; 64]);
        let e = parse_err(b.build());
        assert!(matches!(e, GgufError::PartialBlock { row_len: 33, block_elems: 32, .. }), "{e}");
    }

    #[test]
    fn bad_alignments_are_refused() {
        for v in [Value::U32(0), Value::U32(24), Value::I32(-32), Value::String("32".into())] {
            let mut b = Builder::new();
            b.kv("general.alignment", &v);
            let e = parse_err(b.build());
            assert!(matches!(e, GgufError::BadAlignment { .. }), "{v:?}: {e}");
        }
        // A huge power of two parses; the data section is then past the end.
        let mut b = Builder::new();
        b.kv("general.alignment", &Value::U64(1 << 63));
        b.tensor_raw("t", &[1], GgmlType::F32.id(), 0);
        assert!(matches!(parse_err(b.build()), GgufError::OutOfBounds { .. }));
    }

    #[test]
    fn wrong_magic_and_versions_are_refused_with_hints() {
        let mut full = small_valid_file();
        full[0] = b'X';
        assert!(matches!(parse_err(full), GgufError::BadMagic { .. }));
        for (v, hint) in [(1u32, "32-bit"), (4, ""), (3u32.swap_bytes(), "big-endian")] {
            let mut r = Raw::default();
            r.bytes(b"GGUF").u32(v).u64(0).u64(0);
            let e = parse_err(r.0);
            assert!(matches!(e, GgufError::UnsupportedVersion { version, .. } if version == v));
            assert!(e.to_string().contains(hint), "{e}");
        }
    }

    #[test]
    fn invalid_utf8_in_a_key_names_its_offset() {
        let mut r = header(0, 1);
        r.u64(3).bytes(&[b'a', 0xFF, b'b']).u32(0).bytes(&[0]);
        let e = parse_err(r.0);
        assert!(matches!(e, GgufError::InvalidUtf8 { offset: 33, what: "key", .. }), "{e}");
    }
}
