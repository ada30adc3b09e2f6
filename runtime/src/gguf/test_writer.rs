//! A hand-written GGUF writer for tests: every byte is laid out here, by the
//! spec, independently of the parser.

use kernels::quant::GgmlType;

use super::Value;

/// Raw little-endian bytes, appended by chained calls.
#[derive(Default)]
pub struct Raw(pub Vec<u8>);

impl Raw {
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }

    pub fn u32(&mut self, x: u32) -> &mut Self {
        self.bytes(&x.to_le_bytes())
    }

    pub fn u64(&mut self, x: u64) -> &mut Self {
        self.bytes(&x.to_le_bytes())
    }

    /// A GGUF string: u64 length, then the bytes.
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64).bytes(s.as_bytes())
    }

    /// A value's payload (without its type id).
    pub fn value(&mut self, v: &Value) -> &mut Self {
        match v {
            Value::U8(x) => self.bytes(&x.to_le_bytes()),
            Value::I8(x) => self.bytes(&x.to_le_bytes()),
            Value::U16(x) => self.bytes(&x.to_le_bytes()),
            Value::I16(x) => self.bytes(&x.to_le_bytes()),
            Value::U32(x) => self.bytes(&x.to_le_bytes()),
            Value::I32(x) => self.bytes(&x.to_le_bytes()),
            Value::U64(x) => self.bytes(&x.to_le_bytes()),
            Value::I64(x) => self.bytes(&x.to_le_bytes()),
            Value::F32(x) => self.bytes(&x.to_le_bytes()),
            Value::F64(x) => self.bytes(&x.to_le_bytes()),
            Value::Bool(x) => self.bytes(&[u8::from(*x)]),
            Value::String(s) => self.str(s),
            Value::Array(items) => {
                // Empty arrays are written as arrays of U8.
                let elem_type = items.first().map_or(0, value_type_id);
                self.u32(elem_type).u64(items.len() as u64);
                for item in items {
                    self.value(item);
                }
                self
            }
        }
    }
}

/// The GGUF type id of a value (spec table: 0 U8 .. 12 F64).
pub fn value_type_id(v: &Value) -> u32 {
    match v {
        Value::U8(_) => 0,
        Value::I8(_) => 1,
        Value::U16(_) => 2,
        Value::I16(_) => 3,
        Value::U32(_) => 4,
        Value::I32(_) => 5,
        Value::F32(_) => 6,
        Value::Bool(_) => 7,
        Value::String(_) => 8,
        Value::Array(_) => 9,
        Value::U64(_) => 10,
        Value::I64(_) => 11,
        Value::F64(_) => 12,
    }
}

/// Builds a whole GGUF file: header, key-values, tensor infos, padding, data.
pub struct Builder {
    pub version: u32,
    /// Alignment used to place data by `tensor` and to pad before the data
    /// section; set `general.alignment` too when changing it.
    pub alignment: u64,
    kvs: Raw,
    n_kv: u64,
    infos: Vec<(String, Vec<u64>, u32, u64)>,
    data: Vec<u8>,
}

impl Builder {
    pub fn new() -> Self {
        Builder { version: 3, alignment: 32, kvs: Raw::default(), n_kv: 0, infos: vec![], data: vec![] }
    }

    pub fn kv(&mut self, key: &str, v: &Value) -> &mut Self {
        self.kvs.str(key).u32(value_type_id(v)).value(v);
        self.n_kv += 1;
        self
    }

    /// A tensor whose `data` is placed at the next aligned offset.
    pub fn tensor(&mut self, name: &str, dims: &[u64], ty: GgmlType, data: &[u8]) -> &mut Self {
        let offset = (self.data.len() as u64).next_multiple_of(self.alignment);
        self.data.resize(offset as usize, 0);
        self.data.extend_from_slice(data);
        self.tensor_raw(name, dims, ty.id(), offset)
    }

    /// A tensor info with any fields; its data is whatever `data` put there.
    pub fn tensor_raw(&mut self, name: &str, dims: &[u64], type_id: u32, offset: u64) -> &mut Self {
        self.infos.push((name.to_string(), dims.to_vec(), type_id, offset));
        self
    }

    /// Raw bytes appended to the data section.
    pub fn data(&mut self, bytes: &[u8]) -> &mut Self {
        self.data.extend_from_slice(bytes);
        self
    }

    pub fn build(&self) -> Vec<u8> {
        let mut r = Raw::default();
        r.bytes(b"GGUF").u32(self.version).u64(self.infos.len() as u64).u64(self.n_kv);
        r.bytes(&self.kvs.0);
        for (name, dims, type_id, offset) in &self.infos {
            r.str(name).u32(dims.len() as u32);
            for &d in dims {
                r.u64(d);
            }
            r.u32(*type_id).u64(*offset);
        }
        let data_start = (r.0.len() as u64).next_multiple_of(self.alignment);
        r.0.resize(data_start as usize, 0);
        r.bytes(&self.data);
        r.0
    }
}
