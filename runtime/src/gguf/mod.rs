//! GGUF v3 (and v2) reader over a memory map.
//!
//! [`GgufFile::open`] maps the file, parses the header, the metadata
//! key-value pairs ([`Value`]; it keeps those the engine reads) and the
//! tensor infos ([`TensorInfo`]), and
//! validates every tensor's byte range before returning; after that,
//! [`GgufFile::tensor_data`] hands out the exact bytes of a tensor without
//! copying. The format is specified in ggml's `docs/gguf.md`; the parser
//! (`parse.rs`) caps every length, count and depth read from the file, so a
//! crafted or truncated file gives a [`GgufError`] naming the byte offset and
//! what was wrong, never a panic or an oversized allocation.

mod parse;
#[cfg(test)]
pub(crate) mod test_writer;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kernels::quant::GgmlType;

pub use parse::{
    DEFAULT_ALIGNMENT, MAX_ARRAY_DEPTH, MAX_ARRAY_LEN, MAX_DIMS, MAX_METADATA_KV, MAX_STRING_LEN, READ_NAMESPACES,
};

/// A metadata value (GGUF value types 0..=12).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    /// Elements all of one type (GGUF arrays declare a single element type).
    Array(Vec<Value>),
}

impl Value {
    /// The GGUF name of the value's type (`U32`, `STRING`, `ARRAY`, ...).
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "U8",
            Value::I8(_) => "I8",
            Value::U16(_) => "U16",
            Value::I16(_) => "I16",
            Value::U32(_) => "U32",
            Value::I32(_) => "I32",
            Value::U64(_) => "U64",
            Value::I64(_) => "I64",
            Value::F32(_) => "F32",
            Value::F64(_) => "F64",
            Value::Bool(_) => "BOOL",
            Value::String(_) => "STRING",
            Value::Array(_) => "ARRAY",
        }
    }

    /// The type for error messages, with the element type of an array
    /// (`ARRAY of U32`; `ARRAY` when empty).
    fn describe_type(&self) -> String {
        match self {
            Value::Array(v) => match v.first() {
                Some(e) => format!("ARRAY of {}", e.describe_type()),
                None => "ARRAY (empty)".to_string(),
            },
            v => v.type_name().to_string(),
        }
    }

    /// The value of any integer type, widened; `None` for the other types.
    pub fn as_int(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(x) => x.into(),
            Value::I8(x) => x.into(),
            Value::U16(x) => x.into(),
            Value::I16(x) => x.into(),
            Value::U32(x) => x.into(),
            Value::I32(x) => x.into(),
            Value::U64(x) => x.into(),
            Value::I64(x) => x.into(),
            _ => return None,
        })
    }

    /// The value of a float type, widened; `None` for the other types.
    pub fn as_float(&self) -> Option<f64> {
        match *self {
            Value::F32(x) => Some(x.into()),
            Value::F64(x) => Some(x),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(v) => Some(v),
            _ => None,
        }
    }
}

/// One tensor's header entry, validated against the file at open.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// Extent of each dimension, innermost first: `dims[0]` is the row length
    /// (ggml's `ne`). At most [`MAX_DIMS`] entries.
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Byte offset of the data from the start of the data section; a multiple
    /// of the file's alignment.
    pub offset: u64,
    /// Product of `dims` (1 for a tensor with no dimensions).
    pub n_elems: u64,
    /// Bytes of data: whole blocks of `ty`.
    pub n_bytes: usize,
}

impl TensorInfo {
    /// Elements per row (`dims[0]`; 1 when the tensor has no dimensions).
    pub fn row_len(&self) -> u64 {
        self.dims.first().copied().unwrap_or(1)
    }

    /// Number of rows: the product of every dimension but the first.
    pub fn n_rows(&self) -> u64 {
        self.dims.iter().skip(1).product()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("cannot open GGUF file {path}: {source}")]
    Open { path: PathBuf, source: std::io::Error },
    #[error("cannot memory-map GGUF file {path}: {source}")]
    Map { path: PathBuf, source: std::io::Error },
    #[error("not a GGUF file: bytes 0..4 are {found:02x?}, expected \"GGUF\" (47 47 55 46)")]
    BadMagic { found: [u8; 4] },
    #[error("GGUF version {version} (byte 4) is not supported: this reader reads versions 2 and 3{hint}")]
    UnsupportedVersion { version: u32, hint: &'static str },
    #[error(
        "{context}: at byte {offset}, the file ends inside {what} (needs {need} bytes, {have} left); \
         the file is truncated or corrupt"
    )]
    Truncated { offset: u64, context: String, what: &'static str, need: u64, have: u64 },
    #[error("{context}: at byte {offset}, {what} declares length {len}, over the limit of {max}")]
    TooLong { offset: u64, context: String, what: &'static str, len: u64, max: u64 },
    #[error(
        "{context}: at byte {offset}, {what} declares {count} entries of at least {min_entry_bytes} \
         bytes each, but only {have} bytes remain in the file"
    )]
    CountTooLarge { offset: u64, context: String, what: &'static str, count: u64, min_entry_bytes: u64, have: u64 },
    #[error(
        "{context}: at byte {offset}, an array of {count} elements of {elem_bytes} bytes each would take \
         {memory} bytes in memory; this reader allows at most {max_count} such elements (a metadata array may \
         take at most {factor} times its size in the file, plus {slack} bytes)"
    )]
    ArrayTooCostly {
        offset: u64,
        context: String,
        count: u64,
        elem_bytes: u64,
        memory: u64,
        max_count: u64,
        factor: u64,
        slack: u64,
    },
    #[error("{context}: at byte {offset}, {what} is not valid UTF-8")]
    InvalidUtf8 { offset: u64, context: String, what: &'static str },
    #[error("{context}: at byte {offset}, unknown value type {type_id} (GGUF defines 0..=12)")]
    UnknownValueType { offset: u64, context: String, type_id: u32 },
    #[error("{context}: at byte {offset}, arrays are nested deeper than {max} levels")]
    NestingTooDeep { offset: u64, context: String, max: usize },
    #[error("{context}: at byte {offset}, a BOOL is stored as {byte}; it must be 0 or 1")]
    BadBool { offset: u64, context: String, byte: u8 },
    #[error(
        "at byte {offset}, the file declares {count} metadata key-value pairs, over the limit of {max} (real files \
         carry tens); remove the pairs the model does not need"
    )]
    TooManyKeys { offset: u64, count: u64, max: u64 },
    #[error("at byte {offset}, metadata key \"{key}\" appears a second time")]
    DuplicateKey { offset: u64, key: String },
    #[error("metadata general.alignment = {value} is invalid: it must be a nonzero power of two")]
    BadAlignment { value: String },
    #[error("tensor \"{tensor}\": at byte {offset}, n_dims = {n_dims}, over the maximum of {max}")]
    TooManyDims { offset: u64, tensor: String, n_dims: u32, max: u32 },
    #[error("tensor \"{tensor}\": at byte {offset}, {problem}")]
    UnsupportedTensorType { offset: u64, tensor: String, type_id: u32, problem: String },
    #[error("tensor \"{tensor}\": the element count of dims {dims:?} overflows")]
    ElemCountOverflow { tensor: String, dims: Vec<u64> },
    #[error(
        "tensor \"{tensor}\": row length dims[0] = {row_len} is not a multiple of the {ty:?} block \
         size {block_elems}"
    )]
    PartialBlock { tensor: String, ty: GgmlType, row_len: u64, block_elems: usize },
    #[error("tensor \"{tensor}\": its byte size ({n_elems} {ty:?} elements) overflows")]
    ByteSizeOverflow { tensor: String, ty: GgmlType, n_elems: u64 },
    #[error(
        "tensor \"{tensor}\": data offset {offset} (field at byte {field_offset}) is not a multiple \
         of the alignment {alignment}"
    )]
    Misaligned { tensor: String, field_offset: u64, offset: u64, alignment: u64 },
    #[error(
        "tensor \"{tensor}\": its data (file bytes {start}..{end}) extends past the end of the file \
         ({file_len} bytes); the file is truncated or corrupt"
    )]
    OutOfBounds { tensor: String, start: u128, end: u128, file_len: u64 },
    #[error(
        "tensors \"{first}\" (file bytes {first_start}..{first_end}) and \"{second}\" (from byte \
         {second_start}) overlap"
    )]
    Overlap { first: String, first_start: u64, first_end: u64, second: String, second_start: u64 },
    #[error("at byte {offset}, tensor name \"{name}\" appears a second time")]
    DuplicateTensor { offset: u64, name: String },
    #[error("metadata key \"{key}\" is missing")]
    MissingKey { key: String },
    #[error("metadata key \"{key}\" has the wrong type: expected {expected}, found {found}")]
    WrongType { key: String, expected: &'static str, found: String },
    #[error("metadata key \"{key}\" = {value} does not fit in {target}")]
    OutOfRange { key: String, value: String, target: &'static str },
}

/// The bytes a [`GgufFile`] reads from.
enum Backing {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mmap(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

/// A parsed GGUF file with its (mapped or owned) bytes.
pub struct GgufFile {
    pub version: u32,
    /// Alignment of every tensor's data (`general.alignment`, default 32).
    pub alignment: u64,
    /// The metadata the engine reads: the pairs of [`READ_NAMESPACES`] and
    /// of the architecture's namespace (every pair, when the file names no
    /// architecture). The other pairs were checked at open and dropped.
    pub metadata: BTreeMap<String, Value>,
    /// In file order.
    pub tensors: Vec<TensorInfo>,
    backing: Backing,
    /// Absolute file offset of the data section.
    data_offset: u64,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("alignment", &self.alignment)
            .field("n_metadata", &self.metadata.len())
            .field("n_tensors", &self.tensors.len())
            .field("data_offset", &self.data_offset)
            .field("n_bytes", &self.backing.bytes().len())
            .finish()
    }
}

impl GgufFile {
    /// Maps and parses the file at `path`.
    ///
    /// The map is read-only. Mapping is only sound while nobody rewrites the
    /// file in place; the model cache replaces files by rename (`fetch`), which
    /// leaves an existing map intact.
    pub fn open(path: &Path) -> Result<GgufFile, GgufError> {
        let file = std::fs::File::open(path).map_err(|source| GgufError::Open { path: path.to_path_buf(), source })?;
        let len = file.metadata().map_err(|source| GgufError::Open { path: path.to_path_buf(), source })?.len();
        if len == 0 {
            // Some platforms refuse empty maps; the parser reports the truncation.
            return Self::from_bytes(Vec::new());
        }
        // SAFETY: the map is read-only and lives inside the returned GgufFile,
        // so no slice handed out outlives it. Undefined behaviour would need
        // another process to modify or truncate the file while it is mapped;
        // draftwise never writes a model file in place (fetch renames a
        // completed temp file over it), which is the usual contract for
        // memory-mapped weights (llama.cpp, candle, safetensors do the same).
        let map = unsafe { memmap2::Mmap::map(&file) }
            .map_err(|source| GgufError::Map { path: path.to_path_buf(), source })?;
        Self::from_backing(Backing::Mmap(map))
    }

    /// Parses a GGUF file held in memory (tests, small files).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        Self::from_backing(Backing::Owned(bytes))
    }

    fn from_backing(backing: Backing) -> Result<GgufFile, GgufError> {
        let parsed = parse::parse(backing.bytes())?;
        Ok(GgufFile {
            version: parsed.version,
            alignment: parsed.alignment,
            metadata: parsed.metadata,
            tensors: parsed.tensors,
            backing,
            data_offset: parsed.data_offset,
        })
    }

    /// Absolute file offset of the data section (tensor offsets count from here).
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// The whole file's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.backing.bytes()
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    fn require(&self, key: &str) -> Result<&Value, GgufError> {
        self.get(key).ok_or_else(|| GgufError::MissingKey { key: key.to_string() })
    }

    fn wrong_type(key: &str, expected: &'static str, found: &Value) -> GgufError {
        GgufError::WrongType { key: key.to_string(), expected, found: found.describe_type() }
    }

    /// A STRING value.
    pub fn get_str(&self, key: &str) -> Result<&str, GgufError> {
        let v = self.require(key)?;
        v.as_str().ok_or_else(|| Self::wrong_type(key, "STRING", v))
    }

    /// An integer value of any type that fits in `T`.
    fn get_int<T: TryFrom<i128>>(&self, key: &str, target: &'static str) -> Result<T, GgufError> {
        let v = self.require(key)?;
        let x = v.as_int().ok_or_else(|| Self::wrong_type(key, "an integer", v))?;
        T::try_from(x).map_err(|_| GgufError::OutOfRange { key: key.to_string(), value: x.to_string(), target })
    }

    /// An integer value of any type (U8..I64) that fits in a u32.
    pub fn get_u32(&self, key: &str) -> Result<u32, GgufError> {
        self.get_int(key, "u32")
    }

    /// An integer value of any type (U8..I64) that fits in a u64.
    pub fn get_u64(&self, key: &str) -> Result<u64, GgufError> {
        self.get_int(key, "u64")
    }

    /// An F32 or F64 value (F64 rounded to the nearest f32).
    pub fn get_f32(&self, key: &str) -> Result<f32, GgufError> {
        let v = self.require(key)?;
        v.as_float().map(|x| x as f32).ok_or_else(|| Self::wrong_type(key, "F32 or F64", v))
    }

    pub fn get_bool(&self, key: &str) -> Result<bool, GgufError> {
        match self.require(key)? {
            Value::Bool(b) => Ok(*b),
            v => Err(Self::wrong_type(key, "BOOL", v)),
        }
    }

    /// An ARRAY value's elements, of any type.
    pub fn get_array(&self, key: &str) -> Result<&[Value], GgufError> {
        let v = self.require(key)?;
        v.as_array().ok_or_else(|| Self::wrong_type(key, "ARRAY", v))
    }

    /// An ARRAY of STRING (an empty array is fine).
    pub fn get_str_array(&self, key: &str) -> Result<Vec<&str>, GgufError> {
        let v = self.require(key)?;
        let items = v.as_array().ok_or_else(|| Self::wrong_type(key, "ARRAY of STRING", v))?;
        items.iter().map(|e| e.as_str().ok_or_else(|| Self::wrong_type(key, "ARRAY of STRING", v))).collect()
    }

    /// An ARRAY of integers of any type, each fitting in an i32.
    pub fn get_i32_array(&self, key: &str) -> Result<Vec<i32>, GgufError> {
        let v = self.require(key)?;
        let items = v.as_array().ok_or_else(|| Self::wrong_type(key, "ARRAY of integers", v))?;
        items
            .iter()
            .map(|e| {
                let x = e.as_int().ok_or_else(|| Self::wrong_type(key, "ARRAY of integers", v))?;
                i32::try_from(x).map_err(|_| GgufError::OutOfRange {
                    key: key.to_string(),
                    value: x.to_string(),
                    target: "i32",
                })
            })
            .collect()
    }

    /// An ARRAY of F32 or F64.
    pub fn get_f32_array(&self, key: &str) -> Result<Vec<f32>, GgufError> {
        let v = self.require(key)?;
        let items = v.as_array().ok_or_else(|| Self::wrong_type(key, "ARRAY of F32", v))?;
        items
            .iter()
            .map(|e| e.as_float().map(|x| x as f32).ok_or_else(|| Self::wrong_type(key, "ARRAY of F32", v)))
            .collect()
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The exact bytes of `t`'s data (`t.n_bytes` of them).
    ///
    /// Every tensor of this file was checked at open to lie inside it; a
    /// `TensorInfo` from another file whose range does not fit this one gets
    /// an empty slice.
    /// Tells the kernel that this process no longer needs the mapped pages
    /// of tensor `t` (`MADV_DONTNEED`): they leave the resident set and are
    /// read from the page cache again if touched. Used after a tensor was
    /// copied into another layout. A no-op for files read into memory.
    pub fn release_tensor_pages(&self, t: &TensorInfo) {
        let Backing::Mmap(m) = &self.backing else { return };
        let Some(start) = self.data_offset.checked_add(t.offset).and_then(|s| usize::try_from(s).ok()) else { return };
        // Whole pages inside the tensor only: a page shared with a
        // neighbouring tensor stays.
        let page = 4096;
        let (first, last) = (start.next_multiple_of(page), (start + t.n_bytes) / page * page);
        if last > first && last <= m.len() {
            // SAFETY: the map is read-only and private to this process, so
            // dropping its pages loses nothing: a later read faults them in
            // from the file again with the same contents.
            let _ = unsafe { m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, first, last - first) };
        }
    }

    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        let bytes = self.backing.bytes();
        let range = self
            .data_offset
            .checked_add(t.offset)
            .and_then(|s| usize::try_from(s).ok())
            .and_then(|s| Some(s..s.checked_add(t.n_bytes)?));
        let data = range.and_then(|r| bytes.get(r));
        debug_assert!(data.is_some(), "tensor {} is not from this file", t.name);
        data.unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::test_writer::{Builder, value_type_id};
    use super::*;

    fn every_value_kind() -> Vec<(&'static str, Value)> {
        vec![
            ("t.u8", Value::U8(250)),
            ("t.i8", Value::I8(-7)),
            ("t.u16", Value::U16(65535)),
            ("t.i16", Value::I16(-30000)),
            ("t.u32", Value::U32(4_000_000_000)),
            ("t.i32", Value::I32(-2_000_000_000)),
            ("t.u64", Value::U64(u64::MAX)),
            ("t.i64", Value::I64(i64::MIN)),
            ("t.f32", Value::F32(1.5e-5)),
            ("t.f64", Value::F64(-2.25e300)),
            ("t.bool.true", Value::Bool(true)),
            ("t.bool.false", Value::Bool(false)),
            ("t.str", Value::String("héllo ☃".into())),
            ("t.str.empty", Value::String(String::new())),
            ("t.arr.u32", Value::Array(vec![Value::U32(1), Value::U32(2), Value::U32(3)])),
            ("t.arr.str", Value::Array(vec![Value::String("a".into()), Value::String("".into())])),
            ("t.arr.empty", Value::Array(vec![])),
            (
                "t.arr.nested",
                Value::Array(vec![
                    Value::Array(vec![Value::I16(-1), Value::I16(2)]),
                    Value::Array(vec![]),
                    Value::Array(vec![Value::I16(3)]),
                ]),
            ),
            (
                "t.arr.deep",
                Value::Array(vec![Value::Array(vec![Value::Array(vec![Value::Array(vec![Value::Bool(true)])])])]),
            ),
        ]
    }

    #[test]
    fn every_value_type_round_trips_through_a_hand_written_file() {
        let kvs = every_value_kind();
        let mut b = Builder::new();
        for (k, v) in &kvs {
            b.kv(k, v);
        }
        let f = GgufFile::from_bytes(b.build()).unwrap();
        assert_eq!(f.version, 3);
        assert_eq!(f.alignment, DEFAULT_ALIGNMENT);
        assert_eq!(f.metadata.len(), kvs.len());
        for (k, v) in &kvs {
            assert_eq!(f.get(k), Some(v), "{k}");
        }
        assert!(f.tensors.is_empty());
    }

    #[test]
    fn version_2_files_are_read_too() {
        let mut b = Builder::new();
        b.version = 2;
        b.kv("general.architecture", &Value::String("llama".into()));
        assert_eq!(GgufFile::from_bytes(b.build()).unwrap().version, 2);
    }

    #[test]
    fn tensors_get_their_exact_bytes_sizes_and_offsets() {
        let mut b = Builder::new();
        b.kv("general.architecture", &Value::String("llama".into()));
        let f32_data: Vec<u8> = [1.0f32, 2.0, 3.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        let q8_data: Vec<u8> = (0..2 * 34).map(|i| i as u8).collect();
        b.tensor("norm", &[3], GgmlType::F32, &f32_data);
        b.tensor("w", &[32, 2], GgmlType::Q8_0, &q8_data);
        let f = GgufFile::from_bytes(b.build()).unwrap();
        let norm = f.tensor("norm").unwrap();
        assert_eq!((norm.n_elems, norm.n_bytes, norm.offset, norm.ty), (3, 12, 0, GgmlType::F32));
        assert_eq!(f.tensor_data(norm), &f32_data[..]);
        let w = f.tensor("w").unwrap();
        assert_eq!((w.n_elems, w.n_bytes, w.offset), (64, 68, 32));
        assert_eq!((w.row_len(), w.n_rows()), (32, 2));
        assert_eq!(f.tensor_data(w), &q8_data[..]);
        assert_eq!(f.data_offset() % 32, 0);
        assert!(f.tensor("missing").is_none());
    }

    #[test]
    fn a_custom_alignment_is_honoured() {
        let mut b = Builder::new();
        b.alignment = 64;
        b.kv("general.alignment", &Value::U32(64));
        b.tensor("a", &[1], GgmlType::F32, &7.0f32.to_le_bytes());
        b.tensor("b", &[1], GgmlType::F32, &9.0f32.to_le_bytes());
        let f = GgufFile::from_bytes(b.build()).unwrap();
        assert_eq!(f.alignment, 64);
        assert_eq!(f.data_offset() % 64, 0);
        assert_eq!(f.tensor("b").unwrap().offset, 64);
        assert_eq!(f.tensor_data(f.tensor("b").unwrap()), &9.0f32.to_le_bytes());
    }

    #[test]
    fn typed_getters_convert_what_fits_and_name_the_key_otherwise() {
        let mut b = Builder::new();
        b.kv("n.u8", &Value::U8(9));
        b.kv("n.i32", &Value::I32(1234));
        b.kv("n.neg", &Value::I32(-1));
        b.kv("n.big", &Value::U64(1 << 40));
        b.kv("f.64", &Value::F64(0.5));
        b.kv("s", &Value::String("x".into()));
        b.kv("b", &Value::Bool(true));
        b.kv("a.s", &Value::Array(vec![Value::String("p".into()), Value::String("q".into())]));
        b.kv("a.i", &Value::Array(vec![Value::I32(-3), Value::I32(4)]));
        b.kv("a.f", &Value::Array(vec![Value::F32(0.25)]));
        let f = GgufFile::from_bytes(b.build()).unwrap();
        assert_eq!(f.get_u32("n.u8").unwrap(), 9);
        assert_eq!(f.get_u32("n.i32").unwrap(), 1234);
        assert_eq!(f.get_u64("n.big").unwrap(), 1 << 40);
        assert_eq!(f.get_f32("f.64").unwrap(), 0.5);
        assert_eq!(f.get_str("s").unwrap(), "x");
        assert!(f.get_bool("b").unwrap());
        assert_eq!(f.get_str_array("a.s").unwrap(), vec!["p", "q"]);
        assert_eq!(f.get_i32_array("a.i").unwrap(), vec![-3, 4]);
        assert_eq!(f.get_f32_array("a.f").unwrap(), vec![0.25]);

        let e = f.get_str("nope").unwrap_err().to_string();
        assert_eq!(e, "metadata key \"nope\" is missing");
        let e = f.get_str("n.u8").unwrap_err().to_string();
        assert!(e.contains("\"n.u8\"") && e.contains("expected STRING, found U8"), "{e}");
        let e = f.get_u32("n.neg").unwrap_err().to_string();
        assert!(e.contains("\"n.neg\" = -1 does not fit in u32"), "{e}");
        let e = f.get_u32("n.big").unwrap_err().to_string();
        assert!(e.contains("does not fit in u32"), "{e}");
        let e = f.get_u32("s").unwrap_err().to_string();
        assert!(e.contains("found STRING"), "{e}");
        let e = f.get_f32("n.u8").unwrap_err().to_string();
        assert!(e.contains("expected F32 or F64, found U8"), "{e}");
        let e = f.get_str_array("a.i").unwrap_err().to_string();
        assert!(e.contains("expected ARRAY of STRING, found ARRAY of I32"), "{e}");
    }

    #[test]
    fn open_maps_a_file_from_disk() {
        let mut b = Builder::new();
        b.kv("general.name", &Value::String("tiny".into()));
        b.tensor("t", &[2], GgmlType::F16, &[0, 0x3c, 0, 0xc0]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny.gguf");
        std::fs::write(&path, b.build()).unwrap();
        let f = GgufFile::open(&path).unwrap();
        assert_eq!(f.get_str("general.name").unwrap(), "tiny");
        assert_eq!(f.tensor_data(f.tensor("t").unwrap()), &[0, 0x3c, 0, 0xc0]);

        let empty = dir.path().join("empty.gguf");
        std::fs::write(&empty, b"").unwrap();
        assert!(matches!(GgufFile::open(&empty), Err(GgufError::Truncated { offset: 0, .. })));
        let e = GgufFile::open(&dir.path().join("absent.gguf")).unwrap_err().to_string();
        assert!(e.contains("absent.gguf"), "{e}");
    }

    #[test]
    fn value_type_ids_of_the_writer_match_the_spec() {
        // Guards the test writer itself against drifting from the spec table.
        let ids: Vec<u32> = every_value_kind()[..13].iter().map(|(_, v)| value_type_id(v)).collect();
        assert_eq!(ids, [0, 1, 2, 3, 4, 5, 10, 11, 6, 12, 7, 7, 8]);
    }

    /// Opens the real model when DRAFTWISE_TEST_MODEL names it (for example
    /// the SmolLM2-135M-Instruct Q4_1 file that `fetch` caches).
    #[test]
    fn the_real_smollm2_model_parses_with_the_expected_shapes() {
        let Some(path) = std::env::var_os("DRAFTWISE_TEST_MODEL") else {
            eprintln!("skipped: set DRAFTWISE_TEST_MODEL to a SmolLM2-135M-Instruct Q4_1 GGUF");
            return;
        };
        let f = GgufFile::open(Path::new(&path)).unwrap();
        assert_eq!(f.version, 3);
        assert_eq!(f.alignment, 32);
        assert_eq!(f.get_str("general.architecture").unwrap(), "llama");
        assert_eq!(f.get_u32("llama.block_count").unwrap(), 30);
        assert_eq!(f.get_u32("llama.embedding_length").unwrap(), 576);
        assert_eq!(f.get_u32("llama.attention.head_count").unwrap(), 9);
        assert_eq!(f.get_u32("llama.attention.head_count_kv").unwrap(), 3);
        assert_eq!(f.get_f32("llama.rope.freq_base").unwrap(), 100000.0);
        let tokens = f.get_str_array("tokenizer.ggml.tokens").unwrap();
        assert_eq!(tokens.len(), 49152);
        assert_eq!(tokens[0], "<|endoftext|>");
        assert_eq!(f.get_str_array("tokenizer.ggml.merges").unwrap().len(), 48900);
        assert_eq!(f.get_i32_array("tokenizer.ggml.token_type").unwrap().len(), 49152);
        // 30 layers x 9 tensors + token_embd + output_norm; the output
        // projection is tied to token_embd, so there is no output.weight.
        assert_eq!(f.tensors.len(), 272);
        assert!(f.tensor("output.weight").is_none());

        let emb = f.tensor("token_embd.weight").unwrap();
        assert_eq!((emb.ty, emb.dims.as_slice()), (GgmlType::Q8_0, &[576, 49152][..]));
        assert_eq!(emb.n_bytes, 576 / 32 * 34 * 49152);
        let q = f.tensor("blk.0.attn_q.weight").unwrap();
        assert_eq!((q.ty, q.dims.as_slice()), (GgmlType::Q4_1, &[576, 576][..]));
        assert_eq!(q.n_bytes, 576 * 576 / 32 * 20);
        assert_eq!(f.tensor("blk.29.ffn_down.weight").unwrap().dims, [1536, 576]);
        let norm = f.tensor("output_norm.weight").unwrap();
        assert_eq!(norm.ty, GgmlType::F32);

        // Every tensor dequantizes row by row; the norm weights are sane.
        for t in &f.tensors {
            let data = f.tensor_data(t);
            assert_eq!(data.len(), t.n_bytes);
            let row_bytes = t.ty.row_bytes(t.row_len() as usize).unwrap();
            let mut row = vec![0f32; t.row_len() as usize];
            kernels::quant::dequantize_row(t.ty, &data[..row_bytes], &mut row).unwrap();
            assert!(row.iter().all(|x| x.is_finite()), "{}", t.name);
        }
        let mut w = vec![0f32; 576];
        kernels::quant::dequantize_row(norm.ty, f.tensor_data(norm), &mut w).unwrap();
        assert!(w.iter().any(|&x| x != 0.0) && w.iter().all(|x| x.abs() < 100.0));
    }
}
