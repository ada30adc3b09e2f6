//! Weight storage: matrices viewed in place in a mapped GGUF file, or owned
//! (f32, f16 or bf16 from safetensors, or a realigned copy), and the
//! per-layer set of a Llama decoder.

use crate::gguf::GgufFile;
use kernels::matvec::r16::Repacked;
use kernels::matvec::{Matrix, MatrixError};
use kernels::pages::WeightArena;
use kernels::quant::{GgmlType, dequantize_row};
use std::sync::Arc;

/// Where a model's repacked weights live ([`ModelWeights::pages`]), as the
/// `startup` and `bench` events carry it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PagesReport {
    /// The memory asked for: `huge-advised` (the default), `4k`
    /// (`DRAFTWISE_HUGE_PAGES=0`) or `heap` (no mapping), joined by `+`
    /// when the matrices are spread over several kinds.
    pub backing: String,
    /// Bytes of the repacked matrices.
    pub weight_bytes: u64,
    /// Of them, bytes on huge pages when the report was made
    /// (`/proc/self/smaps`); null where that cannot be read (not Linux,
    /// heap memory).
    pub huge_bytes: Option<u64>,
}

#[derive(Debug, Clone)]
enum Data {
    /// Bytes of tensor `index` of a mapped file.
    Gguf {
        file: Arc<GgufFile>,
        index: usize,
    },
    /// A copy of quantized bytes in 4-byte-aligned storage (for files whose
    /// tensor data is not aligned for the block structs).
    Aligned {
        words: Vec<u32>,
        len: usize,
    },
    F32(Vec<f32>),
    /// F16 or BF16 bits (`WeightMatrix::ty` says which), kept in 16 bits.
    Half(Vec<u16>),
}

/// A (rows, cols) weight matrix: row `r` holds the weights producing output `r`.
/// Cloning a mapped matrix shares the map; an owned one is copied.
#[derive(Debug, Clone)]
pub struct WeightMatrix {
    pub name: String,
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    data: Data,
    /// The row-interleaved copy the CPU kernels multiply with, once
    /// [`Self::repack`] made it (Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0); `data` stays for the
    /// embedding gather and device uploads.
    packed: Option<Arc<Repacked>>,
}

impl WeightMatrix {
    /// A matrix over tensor `index` of `file`, validated once here so that
    /// [`Self::matrix`] cannot fail later.
    pub fn from_gguf(file: &Arc<GgufFile>, index: usize, rows: usize, cols: usize) -> Result<Self, MatrixError> {
        let info = &file.tensors[index];
        let bytes = file.tensor_data(info);
        let data = match Matrix::from_bytes(info.ty, bytes, rows, cols) {
            Ok(_) => Data::Gguf { file: Arc::clone(file), index },
            Err(MatrixError::Alignment { .. }) => {
                let mut words = vec![0u32; bytes.len().div_ceil(4)];
                // SAFETY: `words` has room for `bytes.len()` bytes; the
                // regions are distinct allocations.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), words.as_mut_ptr().cast::<u8>(), bytes.len()) };
                Data::Aligned { words, len: bytes.len() }
            }
            Err(e) => return Err(e),
        };
        let m = WeightMatrix { name: info.name.clone(), ty: info.ty, rows, cols, data, packed: None };
        Matrix::from_bytes(m.ty, m.bytes(), rows, cols)?;
        Ok(m)
    }

    /// An owned f32 matrix.
    ///
    /// # Panics
    /// If `w.len() != rows * cols` (a loader bug, not input).
    pub fn from_f32(name: &str, w: Vec<f32>, rows: usize, cols: usize) -> Self {
        assert_eq!(w.len(), rows * cols);
        WeightMatrix { name: name.to_string(), ty: GgmlType::F32, rows, cols, data: Data::F32(w), packed: None }
    }

    /// An owned 16-bit float matrix: `bits` are IEEE half bits (`ty` F16)
    /// or bfloat16 bits (`ty` BF16), multiplied as they are (no f32 copy).
    ///
    /// # Panics
    /// If `bits.len() != rows * cols` or `ty` is not F16 / BF16 (a loader
    /// bug, not input).
    pub fn from_half(name: &str, ty: GgmlType, bits: Vec<u16>, rows: usize, cols: usize) -> Self {
        assert_eq!(bits.len(), rows * cols);
        assert!(matches!(ty, GgmlType::F16 | GgmlType::BF16), "{ty:?} is not a 16-bit float type");
        WeightMatrix { name: name.to_string(), ty, rows, cols, data: Data::Half(bits), packed: None }
    }

    fn bytes(&self) -> &[u8] {
        match &self.data {
            Data::Gguf { file, index } => file.tensor_data(&file.tensors[*index]),
            // SAFETY: `words` holds at least `len` initialized bytes.
            Data::Aligned { words, len } => unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), *len) },
            Data::F32(v) => {
                // SAFETY: f32 storage viewed as its bytes, same lifetime.
                unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), v.len() * 4) }
            }
            Data::Half(v) => {
                // SAFETY: u16 storage viewed as its bytes, same lifetime
                // (little endian, the GGUF byte order `row_f32` reads).
                unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), v.len() * 2) }
            }
        }
    }

    /// Makes the row-interleaved copy the CPU kernels run fastest on
    /// ([`kernels::matvec::r16`]), for the formats that have one; returns
    /// the bytes it holds (0 when the format has none or it exists). The
    /// mapped pages read to make it are then released, so resident memory
    /// holds the weights once.
    /// The copy is carved from `arena` when it has room
    /// ([`kernels::pages`]: huge pages advised).
    pub fn repack(&mut self, arena: Option<&Arc<WeightArena>>) -> usize {
        if self.packed.is_some() {
            return 0;
        }
        let packed = Repacked::from_native_in(arena, self.ty, self.bytes(), self.rows, self.cols)
            .expect("shape and length validated at construction");
        let Some(packed) = packed else { return 0 };
        let n = packed.bytes();
        self.packed = Some(Arc::new(packed));
        if let Data::Gguf { file, index } = &self.data {
            file.release_tensor_pages(&file.tensors[*index]);
        }
        n
    }

    /// The kernel view of this matrix: the row-interleaved copy when there
    /// is one.
    pub fn matrix(&self) -> Matrix<'_> {
        match &self.packed {
            Some(p) => p.matrix(),
            None => self.gguf_matrix(),
        }
    }

    /// The view in the file's own layout (device uploads read this one).
    pub fn gguf_matrix(&self) -> Matrix<'_> {
        match &self.data {
            Data::F32(v) => Matrix::from_f32(v, self.rows, self.cols),
            Data::Half(v) => Matrix::from_f16_bits(v, self.ty == GgmlType::BF16, self.rows, self.cols),
            _ => Matrix::from_bytes(self.ty, self.bytes(), self.rows, self.cols)
                .expect("shape, length and alignment validated at construction"),
        }
    }

    /// Row `r` dequantized into `out` (`cols` floats): the embedding gather.
    pub fn row_f32(&self, r: usize, out: &mut [f32]) {
        let rb = self.ty.row_bytes(self.cols).expect("validated at construction");
        dequantize_row(self.ty, &self.bytes()[r * rb..(r + 1) * rb], out).expect("validated at construction");
    }
}

/// One transformer block. Shapes: `wq` (n_heads·head_dim, dim), `wk`/`wv`
/// (n_kv_heads·head_dim, dim), `wo` (dim, n_heads·head_dim), `w_gate`/`w_up`
/// (ffn_dim, dim), `w_down` (dim, ffn_dim); norms (dim).
#[derive(Debug, Clone)]
pub struct LayerWeights {
    pub attn_norm: Vec<f32>,
    pub wq: WeightMatrix,
    pub wk: WeightMatrix,
    pub wv: WeightMatrix,
    pub wo: WeightMatrix,
    pub ffn_norm: Vec<f32>,
    pub w_gate: WeightMatrix,
    pub w_up: WeightMatrix,
    pub w_down: WeightMatrix,
    pub extra: ExtraNorms,
}

/// The norms and biases some architectures add to the block
/// ([`super::config::Block`]: Gemma 3's norms, Qwen 3's q/k norms, Qwen 2's
/// biases); all `None` for Llama.
#[derive(Debug, Clone, Default)]
pub struct ExtraNorms {
    /// (head_dim) each, applied to every query / key head before RoPE.
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    /// (dim): the attention output's norm before the residual add.
    pub post_attn: Option<Vec<f32>>,
    /// (dim): the FFN output's norm before the residual add.
    pub post_ffn: Option<Vec<f32>>,
    /// (n_heads·head_dim), (n_kv_heads·head_dim) twice: added to the q, k
    /// and v projections.
    pub q_bias: Option<Vec<f32>>,
    pub k_bias: Option<Vec<f32>>,
    pub v_bias: Option<Vec<f32>>,
}

/// All weights of a Llama decoder.
#[derive(Debug, Clone)]
pub struct ModelWeights {
    /// (vocab, dim)
    pub embed: WeightMatrix,
    pub layers: Vec<LayerWeights>,
    /// (dim)
    pub out_norm: Vec<f32>,
    /// (vocab, dim); `None` when the head is tied to `embed`.
    pub head: Option<WeightMatrix>,
}

impl ModelWeights {
    pub fn head(&self) -> &WeightMatrix {
        self.head.as_ref().unwrap_or(&self.embed)
    }

    /// Every matrix the CPU multiplies with (the layers' and the head,
    /// which is the embedding when tied), for [`WeightMatrix::repack`].
    pub fn product_matrices_mut(&mut self) -> impl Iterator<Item = &mut WeightMatrix> {
        let head = match &mut self.head {
            Some(h) => h,
            None => &mut self.embed,
        };
        self.layers
            .iter_mut()
            .flat_map(|l| [&mut l.wq, &mut l.wk, &mut l.wv, &mut l.wo, &mut l.w_gate, &mut l.w_up, &mut l.w_down])
            .chain(std::iter::once(head))
    }

    /// Bytes of weight matrices one decode step streams: every layer's
    /// matrices and the head, as stored (the embedding row a step looks up
    /// is not counted). A one-row step is bound by reading them, so the
    /// ratio of two models' values is about the ratio of their step times
    /// on one device ([`crate::speculative::drafter::Drafter::step_cost`]).
    pub fn step_bytes(&self) -> u64 {
        let layers: u64 = self
            .layers
            .iter()
            .flat_map(|l| [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down])
            .map(|w| w.bytes().len() as u64)
            .sum();
        layers + self.head().bytes().len() as u64
    }

    /// Elements of every weight: the embedding, each layer's matrices,
    /// norms and biases, the output norm and an untied head (a tied head
    /// counted once). A Hugging Face checkpoint's parameter count in its
    /// policy key (a GGUF file's is its tensor infos',
    /// [`super::gguf_load::parameters`]; the two agree on every file the
    /// loader takes whole).
    pub fn parameters(&self) -> u64 {
        let m = |w: &WeightMatrix| (w.rows * w.cols) as u64;
        let v = |x: &[f32]| x.len() as u64;
        let o = |x: &Option<Vec<f32>>| x.as_deref().map_or(0, v);
        let layers: u64 = self
            .layers
            .iter()
            .map(|l| {
                let e = &l.extra;
                [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down].into_iter().map(m).sum::<u64>()
                    + v(&l.attn_norm)
                    + v(&l.ffn_norm)
                    + [&e.q_norm, &e.k_norm, &e.post_attn, &e.post_ffn, &e.q_bias, &e.k_bias, &e.v_bias]
                        .into_iter()
                        .map(o)
                        .sum::<u64>()
            })
            .sum();
        m(&self.embed) + layers + v(&self.out_norm) + self.head.as_ref().map_or(0, m)
    }

    /// The storage formats of the embedding and every product matrix,
    /// lowercase ggml names, sorted, each once.
    pub fn formats(&self) -> Vec<String> {
        let mut f: Vec<String> = self
            .layers
            .iter()
            .flat_map(|l| [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down])
            .chain([&self.embed, self.head()])
            .map(|m| m.ty.name().to_ascii_lowercase())
            .collect();
        f.sort();
        f.dedup();
        f
    }

    /// Repacks every product matrix for the CPU kernels, into one
    /// [`WeightArena`] sized for all of them (huge pages advised unless
    /// `DRAFTWISE_HUGE_PAGES=0`); returns the bytes of the copies.
    pub fn repack(&mut self) -> usize {
        let need: usize = self
            .product_matrices_mut()
            .filter(|m| m.packed.is_none())
            .filter_map(|m| Repacked::packed_bytes(m.ty, m.rows, m.cols))
            .map(|n| n.next_multiple_of(4096))
            .sum();
        let arena = (need > 0).then(|| Arc::new(WeightArena::new(need)));
        self.product_matrices_mut().map(|m| m.repack(arena.as_ref())).sum()
    }

    /// Where the repacked matrices live: the pages asked for and, where the
    /// system says, how many of their bytes sit on huge pages now; `None`
    /// when no matrix has a repacked copy.
    pub fn pages(&self) -> Option<PagesReport> {
        let head = self.head.as_ref().unwrap_or(&self.embed);
        let packed = self
            .layers
            .iter()
            .flat_map(|l| [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down])
            .chain(std::iter::once(head))
            .filter_map(|m| m.packed.as_deref());
        let mut arenas: Vec<&Arc<WeightArena>> = Vec::new();
        let (mut bytes, mut in_arenas) = (0u64, 0u64);
        for p in packed {
            bytes += p.bytes() as u64;
            if let Some(a) = p.arena() {
                in_arenas += p.bytes() as u64;
                if !arenas.iter().any(|b| Arc::ptr_eq(a, b)) {
                    arenas.push(a);
                }
            }
        }
        if bytes == 0 {
            return None;
        }
        let mut kinds: Vec<&str> = arenas.iter().map(|a| a.backing().name()).collect();
        if in_arenas < bytes {
            kinds.push(kernels::pages::Backing::Heap.name());
        }
        kinds.sort_unstable();
        kinds.dedup();
        let huge_bytes = arenas.iter().map(|a| a.huge_bytes()).sum::<Option<u64>>().map(|h| h.min(bytes));
        Some(PagesReport { backing: kinds.join("+"), weight_bytes: bytes, huge_bytes })
    }
}
