//! The Llama forward pass on a CUDA device (feature `cuda`).
//!
//! [`CudaModel`] holds the weights uploaded once (the file's block bytes as
//! they are; norms as f32) and reusable scratch buffers; a session's KV
//! cache lives on the device ([`DeviceKv`]). [`CudaModel::forward`] mirrors
//! the CPU pass in `forward.rs` step for step — embedding gather, per layer
//! RMSNorm, activation quantization (16-bit, and at [`Precision::Int8`]
//! 8-bit for the K-quant matrices, each form once per input as the CPU's
//! `Forms`), Q/K/V mat-vec, RoPE (angles
//! from the host, as the CPU), cache append, causal attention, output
//! projection, residual, RMSNorm, gate/up, SwiGLU, down, residual; final
//! norm and head on the rows that need logits — with every row computed
//! by the same kernels in the same order whatever the block width, so a
//! verify block's logits equal the one-token chain's bit for bit (the
//! block-vs-chain probe checks it at startup, as on the CPU).
//!
//! The cache keeps one entry per position, so rolling back a rejected draft
//! is only forgetting positions ([`DeviceKv::truncate`]): later appends
//! overwrite them, and earlier ones were never touched.

use super::config::ModelConfig;
use super::weights::{ModelWeights, WeightMatrix};
use super::{ForwardError, LogitRows};
use kernels::act8::Precision;
use kernels::cuda::CudaError;
use kernels::cuda::device::{CudaDevice, DevMatrix, Quant8View, QuantView};
use kernels::ops::{self, RopePairing};
use kernels::quant::{GgmlType, QK, QK_K};
use std::sync::{Arc, Mutex};

/// The quantized activation scratch of `rows` rows of `cols`, borrowing
/// only the scratch fields it reads (a macro, so the other fields stay
/// free to be written).
macro_rules! quant_view {
    ($s:expr, $rows:expr, $cols:expr) => {{
        let nb = $rows * $cols / QK;
        QuantView { q: $s.aq.slice(0..$rows * $cols), d: $s.ad.slice(0..nb), s: $s.asum.slice(0..nb) }
    }};
}

/// The 8-bit activation scratch of `rows` rows of `cols` (as `quant_view!`).
/// Where `cols` is not whole super-blocks no K-quant matrix reads it and
/// the view is never used.
macro_rules! quant8_view {
    ($s:expr, $rows:expr, $cols:expr) => {{
        let nsb = $rows * $cols / QK_K;
        Quant8View {
            qs: $s.a8q.slice(0..$rows * $cols),
            d: $s.a8d.slice(0..nsb),
            bsum16: $s.a8b16.slice(0..16 * nsb),
            bsum32: $s.a8b32.slice(0..8 * nsb),
        }
    }};
}

impl From<CudaError> for ForwardError {
    fn from(e: CudaError) -> Self {
        ForwardError::Device(e.to_string())
    }
}

/// One transformer block on the device (shapes as [`super::weights::LayerWeights`]).
struct DevLayer {
    attn_norm: cudarc::driver::CudaSlice<f32>,
    wq: DevMatrix,
    wk: DevMatrix,
    wv: DevMatrix,
    wo: DevMatrix,
    ffn_norm: cudarc::driver::CudaSlice<f32>,
    w_gate: DevMatrix,
    w_up: DevMatrix,
    w_down: DevMatrix,
}

/// A model's weights on a device, and scratch for its forward passes.
pub struct CudaModel {
    pub dev: Arc<CudaDevice>,
    /// (vocab, dim): the gather table, and the head when tied.
    embed: DevMatrix,
    layers: Vec<DevLayer>,
    out_norm: cudarc::driver::CudaSlice<f32>,
    /// (vocab, dim); `None` when tied to `embed`.
    head: Option<DevMatrix>,
    /// Device bytes of the weights.
    pub weight_bytes: usize,
    /// The activation format the K-quant matrices multiply here
    /// ([`CudaModel::set_precision`]).
    precision: Mutex<Precision>,
    scratch: Mutex<Option<Scratch>>,
}

impl std::fmt::Debug for CudaModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaModel").field("dev", &self.dev).field("weight_bytes", &self.weight_bytes).finish()
    }
}

/// Per-pass buffers, grown as needed and reused (device allocation is slow).
struct Scratch {
    rows: usize,
    ctx: usize,
    tokens: cudarc::driver::CudaSlice<i32>,
    cos: cudarc::driver::CudaSlice<f32>,
    sin: cudarc::driver::CudaSlice<f32>,
    x: cudarc::driver::CudaSlice<f32>,
    xn: cudarc::driver::CudaSlice<f32>,
    q: cudarc::driver::CudaSlice<f32>,
    k: cudarc::driver::CudaSlice<f32>,
    v: cudarc::driver::CudaSlice<f32>,
    att: cudarc::driver::CudaSlice<f32>,
    proj: cudarc::driver::CudaSlice<f32>,
    gate: cudarc::driver::CudaSlice<f32>,
    up: cudarc::driver::CudaSlice<f32>,
    aq: cudarc::driver::CudaSlice<i16>,
    ad: cudarc::driver::CudaSlice<f32>,
    asum: cudarc::driver::CudaSlice<f32>,
    /// The 8-bit activation rows (`Quant8View`'s layout): quants, scales,
    /// 16- and 32-element sums.
    a8q: cudarc::driver::CudaSlice<i8>,
    a8d: cudarc::driver::CudaSlice<f32>,
    a8b16: cudarc::driver::CudaSlice<i16>,
    a8b32: cudarc::driver::CudaSlice<i16>,
    scores: cudarc::driver::CudaSlice<f32>,
    logits: cudarc::driver::CudaSlice<f32>,
}

impl Scratch {
    fn new(dev: &CudaDevice, c: &ModelConfig, rows: usize, ctx: usize) -> Result<Self, CudaError> {
        let (d, qd, kvd, f) = (c.dim, c.q_dim(), c.kv_dim(), c.ffn_dim);
        let widest = d.max(qd).max(f);
        Ok(Scratch {
            rows,
            ctx,
            tokens: dev.alloc(rows)?,
            cos: dev.alloc(rows * c.head_dim / 2)?,
            sin: dev.alloc(rows * c.head_dim / 2)?,
            x: dev.alloc(rows * d)?,
            xn: dev.alloc(rows * d)?,
            q: dev.alloc(rows * qd)?,
            k: dev.alloc(rows * kvd)?,
            v: dev.alloc(rows * kvd)?,
            att: dev.alloc(rows * qd)?,
            proj: dev.alloc(rows * d)?,
            gate: dev.alloc(rows * f)?,
            up: dev.alloc(rows * f)?,
            aq: dev.alloc(rows * widest)?,
            ad: dev.alloc(rows * widest / QK)?,
            asum: dev.alloc(rows * widest / QK)?,
            a8q: dev.alloc(rows * widest)?,
            a8d: dev.alloc(rows * widest / QK_K)?,
            a8b16: dev.alloc(rows * widest / 16)?,
            a8b32: dev.alloc(rows * widest / 32)?,
            scores: dev.alloc(rows * c.n_heads * ctx)?,
            logits: dev.alloc(rows * c.vocab)?,
        })
    }
}

/// A session's KV cache on the device: per layer (capacity,
/// n_kv_heads · head_dim) keys (rotated) and values; `len` positions valid.
pub struct DeviceKv {
    dev: Arc<CudaDevice>,
    k: Vec<cudarc::driver::CudaSlice<f32>>,
    v: Vec<cudarc::driver::CudaSlice<f32>>,
    cap: usize,
    len: usize,
    kv_dim: usize,
}

impl std::fmt::Debug for DeviceKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceKv").field("len", &self.len).field("cap", &self.cap).finish()
    }
}

impl Clone for DeviceKv {
    /// A device-side copy (sessions are cloned to start several decodes
    /// from one prefill).
    ///
    /// # Panics
    /// If the device cannot allocate or copy: `Clone` cannot report an error.
    fn clone(&self) -> Self {
        let copy = |s: &cudarc::driver::CudaSlice<f32>| {
            self.dev.stream.clone_dtod(s).unwrap_or_else(|e| panic!("CUDA: copying a KV cache failed: {e:?}"))
        };
        DeviceKv {
            dev: Arc::clone(&self.dev),
            k: self.k.iter().map(copy).collect(),
            v: self.v.iter().map(copy).collect(),
            cap: self.cap,
            len: self.len,
            kv_dim: self.kv_dim,
        }
    }
}

impl PartialEq for DeviceKv {
    /// Equal valid positions, compared on the host bit for bit.
    ///
    /// # Panics
    /// If the device cannot copy the caches back.
    fn eq(&self, other: &Self) -> bool {
        if self.len != other.len || self.kv_dim != other.kv_dim || self.k.len() != other.k.len() {
            return false;
        }
        let n = self.len * self.kv_dim;
        let host = |s: &cudarc::driver::CudaSlice<f32>| -> Vec<u32> {
            let v =
                self.dev.download(&s.slice(0..n)).unwrap_or_else(|e| panic!("CUDA: reading a KV cache failed: {e}"));
            v.iter().map(|f| f.to_bits()).collect()
        };
        self.k.iter().zip(&other.k).chain(self.v.iter().zip(&other.v)).all(|(a, b)| host(a) == host(b))
    }
}

impl DeviceKv {
    fn new(dev: &Arc<CudaDevice>, c: &ModelConfig) -> Self {
        DeviceKv { dev: Arc::clone(dev), k: Vec::new(), v: Vec::new(), cap: 0, len: 0, kv_dim: c.kv_dim() }
    }

    /// Room for `positions` positions, keeping the valid ones: capacity
    /// doubles (at least 256 positions, at most the context length).
    fn reserve(&mut self, c: &ModelConfig, positions: usize) -> Result<(), CudaError> {
        if positions <= self.cap {
            return Ok(());
        }
        let cap = positions.max(2 * self.cap).max(256).min(c.context_length).max(positions);
        let n = self.len * self.kv_dim;
        let grow = |old: &mut Vec<cudarc::driver::CudaSlice<f32>>| -> Result<(), CudaError> {
            let mut fresh = Vec::with_capacity(c.n_layers);
            #[allow(clippy::needless_range_loop)]
            for li in 0..c.n_layers {
                let mut s = self.dev.alloc::<f32>(cap * self.kv_dim)?;
                if n > 0 {
                    // A fresh cache (no layers yet) has n == 0.
                    self.dev.copy(&old[li].slice(0..n), &mut s.slice_mut(0..n))?;
                }
                fresh.push(s);
            }
            *old = fresh;
            Ok(())
        };
        grow(&mut self.k)?;
        grow(&mut self.v)?;
        self.cap = cap;
        Ok(())
    }

    /// Forgets positions `n..` (exact rollback: entries are per position).
    pub fn truncate(&mut self, n: usize) {
        self.len = self.len.min(n);
    }
}

fn upload_norm(dev: &CudaDevice, w: &[f32]) -> Result<cudarc::driver::CudaSlice<f32>, CudaError> {
    dev.upload(w)
}

fn upload(dev: &CudaDevice, w: &WeightMatrix) -> Result<DevMatrix, CudaError> {
    match w.ty {
        // The device has no 16-bit float kernels: F16 / BF16 matrices (a
        // Hugging Face 16-bit checkpoint's) go up widened to f32, exactly.
        GgmlType::F16 | GgmlType::BF16 => {
            let mut f = vec![0.0f32; w.rows * w.cols];
            for (r, row) in f.chunks_exact_mut(w.cols.max(1)).enumerate() {
                w.row_f32(r, row);
            }
            dev.upload_matrix(&kernels::matvec::Matrix::from_f32(&f, w.rows, w.cols))
        }
        _ => dev.upload_matrix(&w.gguf_matrix()),
    }
}

impl CudaModel {
    /// Uploads `w` to `dev`. Fails (and the caller falls back to the CPU)
    /// when a weight type has no CUDA kernel or the device is out of memory.
    pub fn upload(dev: Arc<CudaDevice>, w: &ModelWeights) -> Result<Self, CudaError> {
        let mut layers = Vec::with_capacity(w.layers.len());
        for l in &w.layers {
            layers.push(DevLayer {
                attn_norm: upload_norm(&dev, &l.attn_norm)?,
                wq: upload(&dev, &l.wq)?,
                wk: upload(&dev, &l.wk)?,
                wv: upload(&dev, &l.wv)?,
                wo: upload(&dev, &l.wo)?,
                ffn_norm: upload_norm(&dev, &l.ffn_norm)?,
                w_gate: upload(&dev, &l.w_gate)?,
                w_up: upload(&dev, &l.w_up)?,
                w_down: upload(&dev, &l.w_down)?,
            });
        }
        let embed = upload(&dev, &w.embed)?;
        let head = w.head.as_ref().map(|h| upload(&dev, h)).transpose()?;
        let out_norm = upload_norm(&dev, &w.out_norm)?;
        let mats = layers.iter().flat_map(|l| [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down]);
        let weight_bytes = mats.chain([&embed]).chain(head.as_ref()).map(DevMatrix::bytes).sum();
        dev.synchronize()?;
        Ok(CudaModel {
            dev,
            embed,
            layers,
            out_norm,
            head,
            weight_bytes,
            precision: Mutex::new(Precision::default()),
            scratch: Mutex::new(None),
        })
    }

    /// Chooses the activation format of the K-quant matrices for every later
    /// pass on the device. The model's own precision is the one to set:
    /// `Model::attach_cuda` copies it here and `Model::set_precision` sets
    /// both (`Model::forward_batch` does not pass it down). The default is
    /// [`Precision::default`], as the model's.
    pub fn set_precision(&self, precision: Precision) {
        *self.precision.lock().unwrap_or_else(|p| p.into_inner()) = precision;
    }

    /// The activation precision device passes run at.
    pub fn precision(&self) -> Precision {
        *self.precision.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new, empty device cache for a session of this model.
    pub fn new_kv(&self, c: &ModelConfig) -> DeviceKv {
        DeviceKv::new(&self.dev, c)
    }

    /// Runs `tokens` at positions `start..` (validated by the caller: ids in
    /// the vocabulary, within the context) and appends them to `kv`, the
    /// K-quant matrices multiplying activations of [`Self::precision`] (as
    /// the CPU's passes). Returns the logits of the rows `which` names,
    /// (rows, vocab).
    pub fn forward(
        &self,
        c: &ModelConfig,
        kv: &mut DeviceKv,
        start: usize,
        tokens: &[u32],
        which: LogitRows,
    ) -> Result<Vec<f32>, ForwardError> {
        let precision = self.precision();
        if kv.len != start {
            return Err(ForwardError::Device(format!(
                "device KV cache holds {} positions but the session {start}",
                kv.len
            )));
        }
        let dev = &*self.dev;
        let n = tokens.len();
        let (d, hd) = (c.dim, c.head_dim);
        let half = hd / 2;
        let ctx = start + n;
        kv.reserve(c, ctx)?;

        let mut guard = self.scratch.lock().unwrap_or_else(|p| p.into_inner());
        if guard.as_ref().is_none_or(|s| s.rows < n || s.ctx < ctx) {
            let (rows, cap) = guard.as_ref().map_or((1, 0), |s| (s.rows, s.ctx));
            // Grow geometrically so a growing context reallocates rarely.
            let ctx_cap = ctx.max(2 * cap).max(256).min(c.context_length).max(ctx);
            *guard = None;
            *guard = Some(Scratch::new(dev, c, n.max(rows), ctx_cap)?);
        }
        let s = guard.as_mut().expect("allocated above");

        // Token ids and the rotation of each row's position (host f64, rounded once: as the CPU).
        let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
        dev.upload_into(&ids, &mut s.tokens.slice_mut(0..n))?;
        let (mut cos, mut sin) = (vec![0.0f32; n * half], vec![0.0f32; n * half]);
        for i in 0..n {
            ops::rope_angles(start + i, hd, c.rope_base, &mut cos[i * half..][..half], &mut sin[i * half..][..half]);
        }
        dev.upload_into(&cos, &mut s.cos.slice_mut(0..n * half))?;
        dev.upload_into(&sin, &mut s.sin.slice_mut(0..n * half))?;

        dev.embed(&self.embed, &s.tokens.slice(0..n), n, &mut s.x.slice_mut(0..n * d))?;

        let rows = Rows { n, start, adjacent: c.rope_pairing == RopePairing::Adjacent };
        for (li, lw) in self.layers.iter().enumerate() {
            Self::attention(dev, c, lw, &rows, s, &mut kv.k[li], &mut kv.v[li], precision)?;
            Self::feed_forward(dev, c, lw, n, s, precision)?;
        }
        kv.len = ctx;

        // Final norm and head on the rows that need logits.
        let first = match which {
            LogitRows::Last => n - 1,
            LogitRows::All => 0,
        };
        let m = n - first;
        dev.rmsnorm(
            &s.x.slice(first * d..n * d),
            &self.out_norm.slice(0..d),
            &mut s.xn.slice_mut(0..m * d),
            m,
            d,
            c.rms_eps,
        )?;
        let head = self.head.as_ref().unwrap_or(&self.embed);
        quantize_for(dev, s, m, d, [head, head, head], Src::Xn, precision)?;
        {
            let (qv, q8) = (quant_view!(s, m, d), quant8_view!(s, m, d));
            let xn = s.xn.slice(0..m * d);
            matmul(dev, precision, head, m, &xn, &qv, &q8, &mut s.logits.slice_mut(0..m * c.vocab))?;
        }
        Ok(dev.download(&s.logits.slice(0..m * c.vocab))?)
    }

    /// One layer's attention block on the device: norm, Q/K/V, RoPE, the
    /// rows' keys and values into the cache (`k`, `v`), attention, the
    /// output projection, added to the residual stream.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        dev: &CudaDevice,
        c: &ModelConfig,
        lw: &DevLayer,
        rows: &Rows,
        s: &mut Scratch,
        k: &mut cudarc::driver::CudaSlice<f32>,
        v: &mut cudarc::driver::CudaSlice<f32>,
        p: Precision,
    ) -> Result<(), CudaError> {
        let (n, start) = (rows.n, rows.start);
        let (d, qd, kvd, hd) = (c.dim, c.q_dim(), c.kv_dim(), c.head_dim);
        let (half, ctx) = (hd / 2, start + n);
        norm_for(dev, c, s, n, &lw.attn_norm, [&lw.wq, &lw.wk, &lw.wv], p)?;
        {
            let (qv, q8) = (quant_view!(s, n, d), quant8_view!(s, n, d));
            let xn = s.xn.slice(0..n * d);
            matmul(dev, p, &lw.wq, n, &xn, &qv, &q8, &mut s.q.slice_mut(0..n * qd))?;
            matmul(dev, p, &lw.wk, n, &xn, &qv, &q8, &mut s.k.slice_mut(0..n * kvd))?;
            matmul(dev, p, &lw.wv, n, &xn, &qv, &q8, &mut s.v.slice_mut(0..n * kvd))?;
        }
        let (cs, sn) = (s.cos.slice(0..n * half), s.sin.slice(0..n * half));
        dev.rope(&mut s.q.slice_mut(0..n * qd), &cs, &sn, n, c.n_heads, hd, rows.adjacent)?;
        dev.rope(&mut s.k.slice_mut(0..n * kvd), &cs, &sn, n, c.n_kv_heads, hd, rows.adjacent)?;
        dev.copy(&s.k.slice(0..n * kvd), &mut k.slice_mut(start * kvd..ctx * kvd))?;
        dev.copy(&s.v.slice(0..n * kvd), &mut v.slice_mut(start * kvd..ctx * kvd))?;
        dev.attention(
            &s.q.slice(0..n * qd),
            &k.slice(0..ctx * kvd),
            &v.slice(0..ctx * kvd),
            &mut s.att.slice_mut(0..n * qd),
            &mut s.scores.slice_mut(0..n * c.n_heads * ctx),
            n,
            start,
            c.n_heads,
            c.n_kv_heads,
            hd,
        )?;
        project_into_residual(dev, s, n, qd, d, &lw.wo, Src::Att, p)
    }

    /// One layer's feed-forward block (SwiGLU) on the device, added to the
    /// residual stream.
    fn feed_forward(
        dev: &CudaDevice,
        c: &ModelConfig,
        lw: &DevLayer,
        n: usize,
        s: &mut Scratch,
        p: Precision,
    ) -> Result<(), CudaError> {
        let (d, f) = (c.dim, c.ffn_dim);
        norm_for(dev, c, s, n, &lw.ffn_norm, [&lw.w_gate, &lw.w_up, &lw.w_up], p)?;
        {
            let (qv, q8) = (quant_view!(s, n, d), quant8_view!(s, n, d));
            let xn = s.xn.slice(0..n * d);
            matmul(dev, p, &lw.w_gate, n, &xn, &qv, &q8, &mut s.gate.slice_mut(0..n * f))?;
            matmul(dev, p, &lw.w_up, n, &xn, &qv, &q8, &mut s.up.slice_mut(0..n * f))?;
        }
        dev.swiglu(&mut s.gate.slice_mut(0..n * f), &s.up.slice(0..n * f), n * f)?;
        project_into_residual(dev, s, n, f, d, &lw.w_down, Src::Gate, p)
    }
}

/// The rows of one device pass: `n` of them at positions `start..`, and
/// how RoPE pairs a head's elements.
struct Rows {
    n: usize,
    start: usize,
    adjacent: bool,
}

/// Which scratch buffer a quantization reads.
#[derive(Clone, Copy)]
enum Src {
    Xn,
    Att,
    Gate,
}

/// A block's first step: RMSNorm (weights `norm`) of `n` rows of the
/// residual stream into `xn`, quantized into the forms `mats` read at
/// precision `p`.
fn norm_for(
    dev: &CudaDevice,
    c: &ModelConfig,
    s: &mut Scratch,
    n: usize,
    norm: &cudarc::driver::CudaSlice<f32>,
    mats: [&DevMatrix; 3],
    p: Precision,
) -> Result<(), CudaError> {
    let d = c.dim;
    dev.rmsnorm(&s.x.slice(0..n * d), &norm.slice(0..d), &mut s.xn.slice_mut(0..n * d), n, d, c.rms_eps)?;
    quantize_for(dev, s, n, d, mats, Src::Xn, p)
}

/// A block's last step: `w` applied to `n` rows of `cols` from `src`
/// (quantized first into the form `w` reads at precision `p`) into `proj`,
/// `d` wide, added to the residual stream.
#[allow(clippy::too_many_arguments)]
fn project_into_residual(
    dev: &CudaDevice,
    s: &mut Scratch,
    n: usize,
    cols: usize,
    d: usize,
    w: &DevMatrix,
    src: Src,
    p: Precision,
) -> Result<(), CudaError> {
    quantize_for(dev, s, n, cols, [w, w, w], src, p)?;
    {
        let (qv, q8) = (quant_view!(s, n, cols), quant8_view!(s, n, cols));
        let input = match src {
            Src::Xn => s.xn.slice(0..n * cols),
            Src::Att => s.att.slice(0..n * cols),
            Src::Gate => s.gate.slice(0..n * cols),
        };
        matmul(dev, p, w, n, &input, &qv, &q8, &mut s.proj.slice_mut(0..n * d))?;
    }
    dev.add(&mut s.x.slice_mut(0..n * d), &s.proj.slice(0..n * d), n * d)
}

/// Whether `m` multiplies the 8-bit rows at precision `p`: a K-quant
/// matrix at [`Precision::Int8`] (the CPU's rule, `Matrix::takes_int8`).
fn int8(p: Precision, m: &DevMatrix) -> bool {
    p == Precision::Int8 && m.takes_int8()
}

/// `m` applied to `n` rows: the 8-bit kernel where `m` reads the 8-bit
/// rows at `p` ([`int8`]), else the f32 or 16-bit one.
#[allow(clippy::too_many_arguments)]
fn matmul(
    dev: &CudaDevice,
    p: Precision,
    m: &DevMatrix,
    n: usize,
    x: &cudarc::driver::CudaView<f32>,
    q16: &QuantView,
    q8: &Quant8View,
    out: &mut cudarc::driver::CudaViewMut<f32>,
) -> Result<(), CudaError> {
    if int8(p, m) { dev.matmul8(m, n, q8, out) } else { dev.matmul(m, n, x, Some(q16), out) }
}

/// Which quantized forms of one input the matrices reading it need at
/// precision `p` (the CPU's `Forms` in forward.rs): the 16-bit rows for
/// every quantized matrix that does not take 8 bits, the 8-bit rows for
/// the K-quants at [`Precision::Int8`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Forms {
    q16: bool,
    q8: bool,
}

impl Forms {
    fn of(p: Precision, mats: &[&DevMatrix]) -> Self {
        let q8 = mats.iter().any(|m| int8(p, m));
        let q16 = mats.iter().any(|m| !int8(p, m) && m.wants_quantized_input());
        Forms { q16, q8 }
    }
}

/// Quantizes `rows` rows of `cols` from `src` into the activation scratch,
/// each form that any of `mats` reads at precision `p` once ([`Forms`]).
fn quantize_for(
    dev: &CudaDevice,
    s: &mut Scratch,
    rows: usize,
    cols: usize,
    mats: [&DevMatrix; 3],
    src: Src,
    p: Precision,
) -> Result<(), CudaError> {
    let forms = Forms::of(p, &mats);
    let x = match src {
        Src::Xn => s.xn.slice(0..rows * cols),
        Src::Att => s.att.slice(0..rows * cols),
        Src::Gate => s.gate.slice(0..rows * cols),
    };
    if forms.q16 {
        let nb = rows * cols / QK;
        dev.quantize(
            &x,
            rows,
            cols,
            &mut s.aq.slice_mut(0..rows * cols),
            &mut s.ad.slice_mut(0..nb),
            &mut s.asum.slice_mut(0..nb),
        )?;
    }
    if forms.q8 {
        let nsb = rows * cols / QK_K;
        dev.quantize8(
            &x,
            rows,
            cols,
            &mut s.a8q.slice_mut(0..rows * cols),
            &mut s.a8d.slice_mut(0..nsb),
            &mut s.a8b16.slice_mut(0..16 * nsb),
            &mut s.a8b32.slice_mut(0..8 * nsb),
        )?;
    }
    Ok(())
}
