//! The forward pass on CPU: Llama's block, and the per-architecture
//! variations [`super::config::Block`] names (Gemma 3's scaled embedding,
//! q/k norms, post-norms, GeGLU, sliding-window layers; Qwen 2's q/k/v
//! biases; Qwen 3's q/k norms; Mistral's window) and the RoPE scaling
//! [`super::config::RopeScaling`] names, in the same pass.
//!
//! [`Model::forward`] runs a block of `n` consecutive tokens through the
//! decoder in one pass, layer by layer, and returns logits for the rows
//! asked for. One token is the classic decode step; a prompt is a prefill;
//! a draft plus its bonus position is a verify block. The block form is
//! exact by construction: each row goes through the same kernels, in the
//! same order, as it would alone (mat-vec rows are independent; the row at
//! position `p` attends to exactly the cached keys `0..=p`), so a block's
//! logits equal the chain's bit for bit, at any thread count — work is
//! split over output rows and heads, never over a reduction.

use super::config::{Ffn, ModelConfig, RopeScaling};
use super::weights::{LayerWeights, ModelWeights, WeightMatrix};
pub use super::{ForwardError, LogitRows};
use crate::pool::{self, Pool};
use kernels::act::{ActRow, QRow};
use kernels::act8::{ActRow8, Precision, Q8Row};
use kernels::attn::{self, KvLayer};
use kernels::dispatch::KernelFamily;
use kernels::matvec::{Input, matmul_rows};
use kernels::ops;
use kernels::quant::F16;

/// A model ready to run: shape plus weights, and optionally a copy of the
/// weights on a CUDA device that then runs every forward pass.
#[derive(Debug)]
pub struct Model {
    pub config: ModelConfig,
    pub weights: ModelWeights,
    /// The activation format the K-quant matrices multiply
    /// ([`Model::set_precision`]; an attached CUDA model holds a copy).
    precision: Precision,
    /// Set by [`Model::attach_cuda`]: forward passes run on this device.
    #[cfg(feature = "cuda")]
    pub cuda: Option<std::sync::Arc<super::cuda::CudaModel>>,
}

/// Per-sequence state: the KV cache, growable and truncatable (rollback).
///
/// On the CPU keys and values are stored as IEEE halves ([`F16`], rounded
/// to nearest even when written): a position costs half the bytes to read
/// at long context. Every row of every pass reads the same stored bits
/// through the same exact widening, so a verify block and the one-token
/// chain still agree bit for bit.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    /// Per layer: the rotated keys of n_pos positions, (n_kv_heads ·
    /// head_dim) columns each, in tiles of 16 positions
    /// (`kernels::attn::key_index`).
    k: Vec<Vec<F16>>,
    /// Per layer: (n_pos, n_kv_heads · head_dim) values.
    v: Vec<Vec<F16>>,
    n_pos: usize,
    kv_dim: usize,
    /// The cache on the CUDA device, for sessions of a model run there
    /// (created on the first forward pass; `k`/`v` above then stay empty).
    #[cfg(feature = "cuda")]
    dev: Option<super::cuda::DeviceKv>,
}

impl Session {
    pub fn new(cfg: &ModelConfig) -> Self {
        Session {
            k: vec![Vec::new(); cfg.n_layers],
            v: vec![Vec::new(); cfg.n_layers],
            n_pos: 0,
            kv_dim: cfg.kv_dim(),
            #[cfg(feature = "cuda")]
            dev: None,
        }
    }

    /// Number of positions in the cache.
    pub fn len(&self) -> usize {
        self.n_pos
    }

    pub fn is_empty(&self) -> bool {
        self.n_pos == 0
    }

    /// Forgets positions `n..`: the cache is then exactly what it was after
    /// the first `n` positions were run (entries are per position, so
    /// dropping later ones cannot change earlier ones).
    pub fn truncate(&mut self, n: usize) {
        if n < self.n_pos {
            // The last kept tile's lanes past `n` are cleared, so that the
            // cache holds what a run of `n` positions writes, byte for byte.
            // (A session whose cache lives on a CUDA device has no host
            // keys to clear.)
            let kept = attn::key_cache_len(self.kv_dim, n);
            let tile_end = kept / self.kv_dim.max(1);
            for layer in self.k.iter_mut().filter(|l| l.len() >= kept) {
                layer.truncate(kept);
                for pos in n..tile_end {
                    for col in 0..self.kv_dim {
                        layer[attn::key_index(self.kv_dim, pos, col)] = F16::default();
                    }
                }
            }
            for layer in &mut self.v {
                layer.truncate(n * self.kv_dim);
            }
            self.n_pos = n;
            #[cfg(feature = "cuda")]
            if let Some(d) = &mut self.dev {
                d.truncate(n);
            }
        }
    }
}

/// Rows of one mat-vec are split into this many chunks per thread. One:
/// every extra chunk costs a claim, a cold start of the kernel's row loop
/// and a thread-local scratch lookup, and on this model's small matrices
/// that outweighs balancing (measured with `runtime bench`, 2 threads:
/// 1 chunk per thread decoded 9% faster than 2 and ~16% faster than 4).
/// Claiming stays dynamic, so a worker that has not started yet still
/// leaves its chunk to the caller (`pool`).
const CHUNKS_PER_THREAD: usize = 1;

/// Rows of a block attended together (`kernels::attn::attend`): a
/// verify block of up to 15 drafts is one block, and a prefill reads each
/// cache tile once per this many rows instead of once per row.
const ATTEND_ROWS: usize = 16;

/// How the (row, query head) pairs of one layer's attention are split into
/// pool chunks. The pairs are listed by (block of [`ATTEND_ROWS`] rows,
/// KV head), within one by row, then head. With enough (block, KV head)
/// groups for the pool to balance ([`GROUPS_PER_THREAD`] per thread), a
/// chunk is one group; with fewer (a decode step or a verify block: one
/// block, a handful of KV heads), the list is cut into one run of equal
/// length per thread, so a thread never waits on another's extra group
/// (three KV heads on two threads would otherwise take two rounds).
/// The split changes no result (`kernels::attn`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct AttendPlan {
    n: usize,
    n_kv: usize,
    group: usize,
    /// Pool chunks.
    chunks: usize,
    /// Whether a chunk is one whole group (else an equal run of pairs).
    whole: bool,
}

/// (Block, KV head) groups per thread below which chunks are equal runs.
const GROUPS_PER_THREAD: usize = 4;

/// One call of [`kernels::attn::attend`]: pairs `lo..hi` of a group.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AttendCall {
    pub(crate) kv_head: usize,
    /// First row of the group's block.
    row0: usize,
    group: usize,
    lo: usize,
    hi: usize,
}

impl AttendCall {
    /// The (row, query head) of each pair, in order.
    pub(crate) fn pairs(self) -> impl Iterator<Item = (usize, usize)> {
        (self.lo..self.hi).map(move |l| (self.row0 + l / self.group, self.kv_head * self.group + l % self.group))
    }
}

impl AttendPlan {
    pub(crate) fn new(n: usize, n_kv: usize, group: usize, threads: usize) -> Self {
        let groups = n.div_ceil(ATTEND_ROWS) * n_kv;
        let whole = threads <= 1 || groups >= GROUPS_PER_THREAD * threads;
        let chunks = if whole { groups } else { threads.min(n * n_kv * group) };
        AttendPlan { n, n_kv, group, chunks, whole }
    }

    pub(crate) fn chunks(&self) -> usize {
        self.chunks
    }

    /// Rows of block `b`.
    fn rows(&self, b: usize) -> std::ops::Range<usize> {
        b * ATTEND_ROWS..(b * ATTEND_ROWS + ATTEND_ROWS).min(self.n)
    }

    /// Pairs of group `g` (block `g / n_kv`, KV head `g % n_kv`).
    fn call(&self, g: usize, lo: usize, hi: usize) -> AttendCall {
        AttendCall { kv_head: g % self.n_kv, row0: self.rows(g / self.n_kv).start, group: self.group, lo, hi }
    }

    /// The calls of chunk `j`, in pair order.
    pub(crate) fn calls(&self, j: usize) -> impl Iterator<Item = AttendCall> {
        let plan = *self;
        let size = move |g: usize| plan.rows(g / plan.n_kv).len() * plan.group;
        let groups = self.n.div_ceil(ATTEND_ROWS) * self.n_kv;
        // The run of the pair list this chunk owns (global pair indices).
        let total = self.n * self.n_kv * self.group;
        let (lo, hi) = if self.whole { (0, 0) } else { (j * total / self.chunks, (j + 1) * total / self.chunks) };
        let range = if self.whole { j..j + 1 } else { 0..groups };
        let mut first = 0usize;
        range.filter_map(move |g| {
            let len = size(g);
            if plan.whole {
                return Some(plan.call(g, 0, len));
            }
            let (g0, g1) = (first, first + len);
            first = g1;
            let (a, b) = (lo.max(g0), hi.min(g1));
            (a < b).then(|| plan.call(g, a - g0, b - g0))
        })
    }
}

thread_local! {
    /// Per-thread buffers of attention calls.
    static ATTEND_SCRATCH: std::cell::RefCell<AttendScratch> = std::cell::RefCell::new(AttendScratch::default());
}

#[derive(Default)]
struct AttendScratch {
    qs: Vec<f32>,
    ranges: Vec<(usize, usize)>,
    outs: Vec<f32>,
    scores: Vec<f32>,
}

/// Chunks are whole multiples of this many rows (the kernels' weight-row
/// tile, so no chunk splits one).
const CHUNK_ALIGN: usize = kernels::dispatch::ROW_TILE;

/// A raw output pointer shared by the chunks of one parallel section
/// (output floats, or the quantized rows of [`quantize_rows`]).
struct Out<T>(*mut T);
// Not derived: a derive would ask `T: Copy`, and the pointer is copyable
// whatever it points to.
impl<T> Clone for Out<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Out<T> {}
// SAFETY: every use writes an index set owned by one chunk (documented at
// each use), and the buffer outlives the section (`Pool::for_each` returns
// after every chunk). `T: Send` because a chunk's thread writes the values.
unsafe impl<T: Send> Send for Out<T> {}
unsafe impl<T: Send> Sync for Out<T> {}

impl<T> Out<T> {
    /// The pointer (a method, so closures capture the `Sync` wrapper rather
    /// than its raw field).
    fn ptr(self) -> *mut T {
        self.0
    }
}

thread_local! {
    /// Per-thread scratch: a band of multi-row outputs, attention scores.
    static SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `outs[k][i] = W_k · inputs[i]` for every matrix `k` and input row `i`,
/// in one parallel section whose chunks are bands of output rows. Each
/// `outs[k]` is (inputs.len(), W_k.rows).
fn par_matmul(pool: &Pool, family: KernelFamily, jobs: &mut [(&WeightMatrix, &mut [f32])], inputs: &[Input]) {
    let n = inputs.len();
    let threads = pool.threads();
    // (matrix, first row, rows) of every chunk.
    let mut chunks: Vec<(usize, usize, usize)> = Vec::new();
    let total: usize = jobs.iter().map(|(w, _)| w.rows).sum();
    let target = total.div_ceil(threads * CHUNKS_PER_THREAD).next_multiple_of(CHUNK_ALIGN);
    for (k, (w, out)) in jobs.iter().enumerate() {
        debug_assert_eq!(out.len(), n * w.rows);
        let chunk = if threads == 1 { w.rows } else { target.min(w.rows) };
        chunks.extend((0..w.rows).step_by(chunk.max(1)).map(|r0| (k, r0, chunk.min(w.rows - r0))));
    }
    let mats: Vec<_> = jobs.iter().map(|(w, _)| w.matrix()).collect();
    let outs: Vec<(Out<f32>, usize)> = jobs.iter_mut().map(|(w, o)| (Out(o.as_mut_ptr()), w.rows)).collect();
    pool.for_each(chunks.len(), &|c| {
        let (k, r0, len) = chunks[c];
        let (dst, rows) = (outs[k].0.ptr(), outs[k].1);
        if n == 1 {
            // SAFETY: rows r0..r0 + len of matrix k's output belong to this
            // chunk alone and lie inside it (r0 + len <= rows).
            let o = unsafe { std::slice::from_raw_parts_mut(dst.add(r0), len) };
            matmul_rows(family, &mats[k], inputs, r0, o);
            return;
        }
        SCRATCH.with_borrow_mut(|band| {
            let band = grown(band, n * len);
            matmul_rows(family, &mats[k], inputs, r0, band);
            for i in 0..n {
                // SAFETY: positions i * rows + r0 .. + len (i < n, r0 + len
                // <= rows) lie inside matrix k's output and belong to this
                // chunk alone.
                unsafe { std::ptr::copy_nonoverlapping(band.as_ptr().add(i * len), dst.add(i * rows + r0), len) };
            }
        });
    });
}

/// `out = glu(W_gate · x, W_up · x)` for every input row (`out`: rows ×
/// `W_gate.rows`), in one parallel section whose chunks are bands of the
/// hidden rows: a chunk computes its band of both products, then the gate
/// (elementwise, `ops::swiglu` or `ops::geglu_tanh`), so the gate needs no
/// section of its own. Each output element is the same product and the same
/// gate, whatever the band.
#[allow(clippy::too_many_arguments)]
fn par_glu(
    pool: &Pool,
    family: KernelFamily,
    ffn: Ffn,
    w_gate: &WeightMatrix,
    w_up: &WeightMatrix,
    inputs: &[Input],
    out: &mut [f32],
) {
    let (n, rows) = (inputs.len(), w_gate.rows);
    debug_assert_eq!(w_up.rows, rows);
    debug_assert_eq!(out.len(), n * rows);
    let threads = pool.threads();
    let chunk = if threads == 1 {
        rows
    } else {
        rows.div_ceil(threads * CHUNKS_PER_THREAD).next_multiple_of(CHUNK_ALIGN).min(rows)
    }
    .max(1);
    let (gm, um) = (w_gate.matrix(), w_up.matrix());
    let dst = Out(out.as_mut_ptr());
    pool.for_each(rows.div_ceil(chunk), &|c| {
        let r0 = c * chunk;
        let len = chunk.min(rows - r0);
        GLU_SCRATCH.with_borrow_mut(|(g, u)| {
            let (g, u) = (grown(g, n * len), grown(u, n * len));
            matmul_rows(family, &gm, inputs, r0, g);
            matmul_rows(family, &um, inputs, r0, u);
            for i in 0..n {
                let (gi, ui) = (&mut g[i * len..(i + 1) * len], &u[i * len..(i + 1) * len]);
                match ffn {
                    Ffn::SwiGlu => ops::swiglu(family, gi, ui),
                    Ffn::GeGluTanh => ops::geglu_tanh(family, gi, ui),
                }
                // SAFETY: positions i * rows + r0 .. + len (i < n, r0 + len
                // <= rows) lie inside `out` and belong to this chunk alone.
                unsafe { std::ptr::copy_nonoverlapping(gi.as_ptr(), dst.ptr().add(i * rows + r0), len) };
            }
        })
    });
}

thread_local! {
    /// Per-thread bands of the gate and up products.
    static GLU_SCRATCH: std::cell::RefCell<(Vec<f32>, Vec<f32>)> = const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// RMSNorm of each row of `x` (rows × `w.len()`) in place, when the block
/// has this norm (`tmp`: scratch of at least one row).
fn post_norm(family: KernelFamily, w: Option<&[f32]>, eps: f32, x: &mut [f32], tmp: &mut [f32]) {
    let Some(w) = w else { return };
    let d = w.len();
    for row in x.chunks_exact_mut(d) {
        ops::rmsnorm(family, row, w, eps, &mut tmp[..d]);
        row.copy_from_slice(&tmp[..d]);
    }
}

/// cos/sin of the rotation at `pos` for each of a head's `head_dim / 2`
/// frequencies, under the config's RoPE scaling. Unscaled, this is
/// [`ops::rope_angles`]; scaled, the same float64 formula with the
/// position divided by the linear factor (Hugging Face divides the
/// frequencies, llama.cpp multiplies the position by `1/factor`: the same
/// angle) or each frequency divided by its factor (llama3).
fn rope_angles(c: &ModelConfig, pos: usize, base: f32, cos: &mut [f32], sin: &mut [f32]) {
    let hd = c.head_dim;
    let scaled = |p: f64, divisor: &dyn Fn(usize) -> f64, cos: &mut [f32], sin: &mut [f32]| {
        for i in 0..hd / 2 {
            let inv_freq = (base as f64).powf(-2.0 * i as f64 / hd as f64) / divisor(i);
            let theta = p * inv_freq;
            cos[i] = theta.cos() as f32;
            sin[i] = theta.sin() as f32;
        }
    };
    match &c.rope_scaling {
        RopeScaling::None => ops::rope_angles(pos, hd, base, cos, sin),
        RopeScaling::Linear { factor } => scaled(pos as f64 / *factor as f64, &|_| 1.0, cos, sin),
        RopeScaling::FreqFactors(f) => scaled(pos as f64, &|i| f[i] as f64, cos, sin),
    }
}

/// Adds `bias` (one row's width) to every row of `x`, when the block has it.
fn add_bias(bias: Option<&[f32]>, x: &mut [f32]) {
    let Some(b) = bias else { return };
    for row in x.chunks_exact_mut(b.len()) {
        for (v, b) in row.iter_mut().zip(b) {
            *v += b;
        }
    }
}

/// The first `len` elements of a scratch buffer, grown (never cleared) to
/// hold them: every user overwrites all of them (the kernels write every
/// output), so stale values are never read.
fn grown(v: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if v.len() < len {
        v.resize(len, 0.0);
    }
    &mut v[..len]
}

/// Quantizes each row of `x` (rows × `width`) into `q[row]`: one row per
/// pool chunk when there are several rows (a verify block or a prefill),
/// since quantization is otherwise serial work between two sections. Each
/// row's quants are a function of that row alone.
fn quantize_rows<T: Default + Send>(pool: &Pool, x: &[f32], width: usize, q: &mut Vec<T>, f: fn(&mut T, &[f32])) {
    let n = x.len() / width;
    q.resize_with(n, T::default);
    if n == 1 || pool.threads() == 1 {
        for (row, qr) in x.chunks_exact(width).zip(q.iter_mut()) {
            f(qr, row);
        }
        return;
    }
    let rows = Out(q.as_mut_ptr());
    pool.for_each(n, &|i| {
        // SAFETY: chunk i alone touches q[i] (i < n = q.len()), and `q`
        // outlives the section.
        let qr = unsafe { &mut *rows.ptr().add(i) };
        f(qr, &x[i * width..(i + 1) * width]);
    });
}

/// Which quantized forms of one input the matrices reading it need: the
/// 16-bit rows for every quantized matrix that does not take 8 bits at this
/// precision, the 8-bit rows for the K-quants at [`Precision::Int8`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Forms {
    q16: bool,
    q8: bool,
}

impl Forms {
    fn of(precision: Precision, mats: &[&WeightMatrix]) -> Self {
        let int8 = precision == Precision::Int8;
        let (mut q16, mut q8) = (false, false);
        for m in mats.iter().map(|w| w.matrix()) {
            if int8 && m.takes_int8() {
                q8 = true;
            } else if m.wants_quantized_input() {
                q16 = true;
            }
        }
        Forms { q16, q8 }
    }
}

/// Quantizes each row of `x` (rows × `width`) into the forms `forms` asks
/// for, each once ([`quantize_rows`]).
fn quantize_input(pool: &Pool, x: &[f32], width: usize, forms: Forms, xq: &mut QuantRows) {
    if forms.q16 {
        quantize_rows(pool, x, width, &mut xq.q16, ActRow::quantize);
    }
    if forms.q8 {
        quantize_rows(pool, x, width, &mut xq.q8, ActRow8::quantize);
    }
}

fn inputs<'a>(x: &'a [f32], width: usize, xq: &'a QuantRows, forms: Forms) -> Vec<Input<'a>> {
    x.chunks_exact(width)
        .enumerate()
        .map(|(i, row)| Input {
            x: row,
            q: if forms.q16 { xq.q16[i].view() } else { QRow::EMPTY },
            q8: if forms.q8 { xq.q8[i].view() } else { Q8Row::EMPTY },
        })
        .collect()
}

/// The quantized rows of the current matrices' input, reused by every layer.
#[derive(Default)]
struct QuantRows {
    q16: Vec<ActRow>,
    q8: Vec<ActRow8>,
}

impl Model {
    pub fn new(config: ModelConfig, weights: ModelWeights) -> Self {
        Model {
            config,
            weights,
            precision: Precision::default(),
            #[cfg(feature = "cuda")]
            cuda: None,
        }
    }

    /// Chooses the activation format of the K-quant matrices for every
    /// later pass, on the CPU and on an attached CUDA device alike: set it
    /// before the first forward pass of a session (a session whose cache was
    /// filled at one precision and continued at the other holds keys and
    /// values of both).
    pub fn set_precision(&mut self, precision: Precision) {
        self.precision = precision;
        #[cfg(feature = "cuda")]
        if let Some(g) = &self.cuda {
            g.set_precision(precision);
        }
    }

    /// The activation precision passes run at.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Whether the precision changes any product: some matrix the passes
    /// read is a K-quant that takes 8-bit activations at
    /// [`Precision::Int8`]. Otherwise both precisions run the same numbers.
    pub fn precision_matters(&self) -> bool {
        let w = &self.weights;
        let layers = w.layers.iter().flat_map(|l| [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down]);
        layers.chain([w.head()]).any(|m| m.matrix().takes_int8())
    }

    /// Uploads the weights to `dev`; every later forward pass runs there.
    #[cfg(feature = "cuda")]
    pub fn attach_cuda(
        &mut self,
        dev: std::sync::Arc<kernels::cuda::device::CudaDevice>,
    ) -> Result<(), kernels::cuda::CudaError> {
        let g = super::cuda::CudaModel::upload(dev, &self.weights)?;
        g.set_precision(self.precision);
        self.cuda = Some(std::sync::Arc::new(g));
        Ok(())
    }

    /// The device this model's forward passes run on, as the policy table
    /// keys it: `cuda:sm_XY` on a CUDA device, else the CPU family's class.
    pub fn device_class(&self, family: KernelFamily) -> String {
        #[cfg(feature = "cuda")]
        if let Some(g) = &self.cuda {
            return g.dev.info.device_class();
        }
        family.device_class()
    }

    /// The kernel family that runs: `cuda` on a CUDA device, else the CPU family's name.
    pub fn kernel_family_name(&self, family: KernelFamily) -> &'static str {
        #[cfg(feature = "cuda")]
        if self.cuda.is_some() {
            return "cuda";
        }
        family.name()
    }

    /// Runs `tokens` at positions `session.len()..` and appends them to the
    /// cache. Returns logits, (rows, vocab), for the rows `which` names.
    /// Runs on the current thread pool ([`pool::current`]: the engine's
    /// inside `Engine::install`). A batch of one [`Segment`]
    /// ([`Model::forward_batch`]).
    pub fn forward(
        &self,
        family: KernelFamily,
        session: &mut Session,
        tokens: &[u32],
        which: LogitRows,
    ) -> Result<Vec<f32>, ForwardError> {
        let mut seg = [Segment { session, tokens, which }];
        let mut out = self.forward_batch(family, &mut seg)?;
        Ok(out.pop().unwrap_or_default())
    }

    /// Runs several sequences' rows in one pass (continuous batching): each
    /// segment's `tokens` at positions `session.len()..` of its own cache,
    /// every matrix read once for the rows of all of them. Returns each
    /// segment's logits, (rows, vocab), for the rows its `which` names, in
    /// segment order.
    ///
    /// A segment's logits are the ones [`Model::forward`] gives it alone,
    /// bit for bit, whatever the other segments are: mat-vec rows are
    /// independent (the kernels' multi-row passes equal single-row calls),
    /// norms, RoPE and quantization are per row, and a row attends to its
    /// own segment's cache only, through the same attention calls as alone.
    /// Every segment is checked before anything runs: a refused batch
    /// writes to no session.
    pub fn forward_batch(&self, family: KernelFamily, segs: &mut [Segment<'_>]) -> Result<Vec<Vec<f32>>, ForwardError> {
        let c = &self.config;
        for seg in segs.iter() {
            let n = seg.tokens.len();
            if n == 0 {
                return Err(ForwardError::Empty);
            }
            if let Some(&id) = seg.tokens.iter().find(|&&t| t as usize >= c.vocab) {
                return Err(ForwardError::TokenOutOfRange { id, vocab: c.vocab });
            }
            let start = seg.session.len();
            if start + n > c.context_length {
                return Err(ForwardError::ContextFull { have: start, adding: n, limit: c.context_length });
            }
        }
        if segs.is_empty() {
            return Ok(Vec::new());
        }
        #[cfg(feature = "cuda")]
        if let Some(g) = &self.cuda {
            // One pass per segment, one after the other: the device has no
            // batched pass yet.
            let mut out = Vec::with_capacity(segs.len());
            for seg in segs.iter_mut() {
                let start = seg.session.len();
                let session = &mut *seg.session;
                if session.dev.is_none() && start == 0 {
                    session.dev = Some(g.new_kv(c));
                }
                let Some(kv) = session.dev.as_mut() else {
                    return Err(ForwardError::Device("this session's cache was filled on the CPU".into()));
                };
                out.push(g.forward(c, kv, start, seg.tokens, seg.which)?);
                session.n_pos = start + seg.tokens.len();
            }
            return Ok(out);
        }
        let pool = pool::current();
        let pool = &*pool;
        let tokens: Vec<u32> = segs.iter().flat_map(|s| s.tokens.iter().copied()).collect();
        let spans = Spans::new(segs);
        let mut x = self.embed(&tokens);
        let rope = RopeTables::new(c, &spans.positions());
        let mut buf = PassBuffers::new(c, tokens.len());
        for (li, lw) in self.weights.layers.iter().enumerate() {
            let layer = PassLayer { li, lw, local: c.block.is_local(li) };
            self.attention(family, pool, &layer, &rope, &spans, segs, &mut x, &mut buf);
            self.feed_forward(family, pool, lw, &mut x, &mut buf);
        }
        for (seg, span) in segs.iter_mut().zip(&spans.0) {
            seg.session.n_pos = span.start + span.n;
        }
        Ok(self.logits(family, pool, &x, &spans, segs, &mut buf.xq))
    }

    /// The residual stream's first value: each token's embedding row (scaled
    /// where the architecture scales it), `(n, dim)`.
    fn embed(&self, tokens: &[u32]) -> Vec<f32> {
        let d = self.config.dim;
        let mut x = vec![0.0f32; tokens.len() * d];
        for (row, &t) in x.chunks_exact_mut(d).zip(tokens) {
            self.weights.embed.row_f32(t as usize, row);
            if let Some(scale) = self.config.block.embed_scale {
                row.iter_mut().for_each(|v| *v *= scale);
            }
        }
        x
    }

    /// One layer's attention block: norm, the Q/K/V projections (biases,
    /// per-head norms, RoPE), the rows' keys and values into the cache,
    /// attention, the output projection, added to the residual stream.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        family: KernelFamily,
        pool: &Pool,
        layer: &PassLayer,
        rope: &RopeTables,
        spans: &Spans,
        segs: &mut [Segment<'_>],
        x: &mut [f32],
        buf: &mut PassBuffers,
    ) {
        let c = &self.config;
        let (d, qd, kvd, hd) = (c.dim, c.q_dim(), c.kv_dim(), c.head_dim);
        let (lw, n) = (layer.lw, spans.rows());
        let PassBuffers { xn, xq, q, k, v, att, proj, head_tmp, .. } = buf;
        for (xr, or) in x.chunks_exact(d).zip(xn.chunks_exact_mut(d)) {
            ops::rmsnorm(family, xr, &lw.attn_norm, c.rms_eps, or);
        }
        // A group of matrices reading one input may mix formats (Gemma
        // files: Q5_0 queries, Q8_0 values); f32 ones ignore the quants.
        let forms = Forms::of(self.precision, &[&lw.wq, &lw.wk, &lw.wv]);
        quantize_input(pool, xn, d, forms, xq);
        let ins = inputs(xn, d, xq, forms);
        par_matmul(
            pool,
            family,
            &mut [(&lw.wq, q.as_mut_slice()), (&lw.wk, k.as_mut_slice()), (&lw.wv, v.as_mut_slice())],
            &ins,
        );
        add_bias(lw.extra.q_bias.as_deref(), q);
        add_bias(lw.extra.k_bias.as_deref(), k);
        add_bias(lw.extra.v_bias.as_deref(), v);
        for (norm, t) in [(&lw.extra.q_norm, &mut *q), (&lw.extra.k_norm, &mut *k)] {
            if let Some(nw) = norm {
                for head in t.chunks_exact_mut(hd) {
                    ops::rmsnorm(family, head, nw, c.rms_eps, head_tmp);
                    head.copy_from_slice(head_tmp);
                }
            }
        }
        let (cos, sin) = rope.for_layer(layer.local);
        let half = hd / 2;
        for i in 0..n {
            let (cs, sn) = (&cos[i * half..][..half], &sin[i * half..][..half]);
            ops::rope(&mut q[i * qd..(i + 1) * qd], hd, c.rope_pairing, cs, sn);
            ops::rope(&mut k[i * kvd..(i + 1) * kvd], hd, c.rope_pairing, cs, sn);
        }
        let li = layer.li;
        // Each segment's rows into its own cache.
        for (seg, sp) in segs.iter_mut().zip(&spans.0) {
            let session = &mut *seg.session;
            let rows = sp.row0 * kvd..(sp.row0 + sp.n) * kvd;
            let keys = &mut session.k[li];
            keys.resize(attn::key_cache_len(kvd, sp.start + sp.n), F16::default());
            for (i, row) in k[rows.clone()].chunks_exact(kvd).enumerate() {
                for (col, &x) in row.iter().enumerate() {
                    keys[attn::key_index(kvd, sp.start + i, col)] = F16::from_f32(x);
                }
            }
            session.v[li].extend(v[rows].iter().map(|&x| F16::from_f32(x)));
        }
        let caches: Vec<KvLayer> = segs
            .iter()
            .zip(&spans.0)
            .map(|(seg, sp)| KvLayer {
                keys: &seg.session.k[li],
                values: &seg.session.v[li],
                kvd,
                n_pos: sp.start + sp.n,
            })
            .collect();
        let window = if layer.local { c.block.sliding.map(|sl| sl.window) } else { None };
        self.attend(family, pool, &caches, spans, window, q, att);
        let forms = Forms::of(self.precision, &[&lw.wo]);
        quantize_input(pool, att, qd, forms, xq);
        par_matmul(pool, family, &mut [(&lw.wo, proj.as_mut_slice())], &inputs(att, qd, xq, forms));
        post_norm(family, lw.extra.post_attn.as_deref(), c.rms_eps, proj, xn);
        for (a, b) in x.iter_mut().zip(proj.iter()) {
            *a += b;
        }
    }

    /// Attention of the pass's rows (queries `q`, `(rows, q_dim)`), each
    /// segment's rows over its own cache (`caches[s]`) into `att`. Per
    /// segment, the pairs (row, query head) in order of (block of up to
    /// ATTEND_ROWS rows, KV head, row, head): the segment's row i sees
    /// positions 0..=start+i (on a local layer, the last `window` of them).
    /// A chunk is a contiguous run of one segment's list ([`AttendPlan`],
    /// the same chunks as that segment alone), attended in one call per
    /// (block, KV head) it touches, so each call reads a key tile and value
    /// row once for all its pairs; every segment's chunks share one
    /// parallel section. Every pair's result is a function of its query,
    /// its range and its cache alone (`kernels::attn`), so how pairs are
    /// grouped, which depends on the thread count and the batch, cannot
    /// change it.
    #[allow(clippy::too_many_arguments)]
    fn attend(
        &self,
        family: KernelFamily,
        pool: &Pool,
        caches: &[KvLayer],
        spans: &Spans,
        window: Option<usize>,
        q: &[f32],
        att: &mut [f32],
    ) {
        let c = &self.config;
        let (qd, hd) = (c.q_dim(), c.head_dim);
        let plans: Vec<AttendPlan> = spans
            .0
            .iter()
            .map(|sp| AttendPlan::new(sp.n, c.n_kv_heads, c.n_heads / c.n_kv_heads, pool.threads()))
            .collect();
        // The first pool chunk of each segment, and the total.
        let mut firsts = Vec::with_capacity(plans.len());
        let mut total = 0;
        for p in &plans {
            firsts.push(total);
            total += p.chunks();
        }
        let att_out = Out(att.as_mut_ptr());
        pool.for_each(total, &|j| {
            let s = firsts.partition_point(|&f| f <= j) - 1;
            let (plan, sp, cache) = (&plans[s], &spans.0[s], caches[s]);
            ATTEND_SCRATCH.with_borrow_mut(|sc| {
                for call in plan.calls(j - firsts[s]) {
                    sc.qs.clear();
                    sc.ranges.clear();
                    for (i, h) in call.pairs() {
                        sc.qs.extend_from_slice(&q[(sp.row0 + i) * qd + h * hd..][..hd]);
                        let end = sp.start + i + 1;
                        sc.ranges.push((window.map_or(0, |w| end.saturating_sub(w)), end));
                    }
                    let outs = grown(&mut sc.outs, sc.ranges.len() * hd);
                    attn::attend(family, cache, call.kv_head, hd, &sc.qs, &sc.ranges, &mut sc.scores, outs);
                    for (r, (i, h)) in call.pairs().enumerate() {
                        // SAFETY: head h of the pass's row sp.row0 + i owns
                        // att[(sp.row0 + i) * qd + h * hd ..][..hd], and the
                        // pair belongs to this chunk alone (a segment's
                        // chunks are disjoint runs of its pair list, and
                        // segments own disjoint rows).
                        let out = unsafe {
                            std::slice::from_raw_parts_mut(att_out.ptr().add((sp.row0 + i) * qd + h * hd), hd)
                        };
                        out.copy_from_slice(&outs[r * hd..(r + 1) * hd]);
                    }
                }
            })
        });
    }

    /// One layer's feed-forward block (SwiGLU, or GeGLU): norm, gate and up,
    /// down, added to the residual stream.
    fn feed_forward(&self, family: KernelFamily, pool: &Pool, lw: &LayerWeights, x: &mut [f32], buf: &mut PassBuffers) {
        let c = &self.config;
        let d = c.dim;
        let PassBuffers { xn, xq, proj, gate, .. } = buf;
        for (xr, or) in x.chunks_exact(d).zip(xn.chunks_exact_mut(d)) {
            ops::rmsnorm(family, xr, &lw.ffn_norm, c.rms_eps, or);
        }
        let forms = Forms::of(self.precision, &[&lw.w_gate, &lw.w_up]);
        quantize_input(pool, xn, d, forms, xq);
        let ins = inputs(xn, d, xq, forms);
        par_glu(pool, family, c.block.ffn, &lw.w_gate, &lw.w_up, &ins, gate);
        let forms = Forms::of(self.precision, &[&lw.w_down]);
        quantize_input(pool, gate, c.ffn_dim, forms, xq);
        par_matmul(pool, family, &mut [(&lw.w_down, proj.as_mut_slice())], &inputs(gate, c.ffn_dim, xq, forms));
        post_norm(family, lw.extra.post_ffn.as_deref(), c.rms_eps, proj, xn);
        for (a, b) in x.iter_mut().zip(proj.iter()) {
            *a += b;
        }
    }

    /// Final norm and head on the rows each segment's `which` names, one
    /// head pass for all of them; the logits split back per segment.
    fn logits(
        &self,
        family: KernelFamily,
        pool: &Pool,
        x: &[f32],
        spans: &Spans,
        segs: &[Segment<'_>],
        xq: &mut QuantRows,
    ) -> Vec<Vec<f32>> {
        let (c, w) = (&self.config, &self.weights);
        let d = c.dim;
        // The pass's rows that get logits, and how many per segment.
        let mut rows = Vec::new();
        let mut counts = Vec::with_capacity(segs.len());
        for (seg, sp) in segs.iter().zip(&spans.0) {
            let first = match seg.which {
                LogitRows::Last => sp.n - 1,
                LogitRows::All => 0,
            };
            rows.extend(sp.row0 + first..sp.row0 + sp.n);
            counts.push(sp.n - first);
        }
        let m = rows.len();
        let mut xf = vec![0.0f32; m * d];
        for (&r, or) in rows.iter().zip(xf.chunks_exact_mut(d)) {
            ops::rmsnorm(family, &x[r * d..(r + 1) * d], &w.out_norm, c.rms_eps, or);
        }
        let head = w.head();
        let forms = Forms::of(self.precision, &[head]);
        quantize_input(pool, &xf, d, forms, xq);
        let mut logits = vec![0.0f32; m * c.vocab];
        par_matmul(pool, family, &mut [(head, logits.as_mut_slice())], &inputs(&xf, d, xq, forms));
        if counts.len() == 1 {
            return vec![logits];
        }
        let mut out = Vec::with_capacity(counts.len());
        let mut at = 0;
        for k in counts {
            out.push(logits[at * c.vocab..(at + k) * c.vocab].to_vec());
            at += k;
        }
        out
    }
}

/// One sequence's part of a batched pass ([`Model::forward_batch`]): its
/// cache, the tokens it runs next, and which of their rows get logits.
pub struct Segment<'a> {
    pub session: &'a mut Session,
    pub tokens: &'a [u32],
    pub which: LogitRows,
}

/// Where each segment's rows are in a pass.
#[derive(Clone, Copy, Debug)]
struct Span {
    /// The segment's first row in the pass.
    row0: usize,
    /// The cache position of that row (the session's length before the pass).
    start: usize,
    /// The segment's rows.
    n: usize,
}

/// The spans of a pass's segments, in order.
struct Spans(Vec<Span>);

impl Spans {
    fn new(segs: &[Segment<'_>]) -> Self {
        let mut row0 = 0;
        Spans(
            segs.iter()
                .map(|s| {
                    let sp = Span { row0, start: s.session.len(), n: s.tokens.len() };
                    row0 += sp.n;
                    sp
                })
                .collect(),
        )
    }

    /// Rows in the pass.
    fn rows(&self) -> usize {
        self.0.last().map_or(0, |sp| sp.row0 + sp.n)
    }

    /// The cache position of every row of the pass.
    fn positions(&self) -> Vec<usize> {
        self.0.iter().flat_map(|sp| sp.start..sp.start + sp.n).collect()
    }
}

/// Where one layer of a CPU pass is: its index and weights, and whether it
/// is a local (sliding-window) layer.
struct PassLayer<'a> {
    li: usize,
    lw: &'a LayerWeights,
    local: bool,
}

/// The buffers of one CPU pass of `n` rows, reused by every layer.
struct PassBuffers {
    /// A normed copy of the residual stream, `(n, dim)`.
    xn: Vec<f32>,
    /// The quantized rows of the current matrices' input.
    xq: QuantRows,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    /// Attention's output, `(n, q_dim)`.
    att: Vec<f32>,
    /// A block's output projection, `(n, dim)`.
    proj: Vec<f32>,
    /// The gated feed-forward activation, `(n, ffn_dim)`.
    gate: Vec<f32>,
    head_tmp: Vec<f32>,
}

impl PassBuffers {
    fn new(c: &ModelConfig, n: usize) -> Self {
        let (d, qd, kvd) = (c.dim, c.q_dim(), c.kv_dim());
        PassBuffers {
            xn: vec![0.0; n * d],
            xq: QuantRows::default(),
            q: vec![0.0; n * qd],
            k: vec![0.0; n * kvd],
            v: vec![0.0; n * kvd],
            att: vec![0.0; n * qd],
            proj: vec![0.0; n * d],
            gate: vec![0.0; n * c.ffn_dim],
            head_tmp: vec![0.0; c.head_dim],
        }
    }
}

/// The rotation of each row's position, shared by every layer and head of
/// one kind: global layers, and local ones where they have their own base.
struct RopeTables {
    global: (Vec<f32>, Vec<f32>),
    local: Option<(Vec<f32>, Vec<f32>)>,
}

impl RopeTables {
    /// The rotations of a pass whose row i sits at cache position `positions[i]`.
    fn new(c: &ModelConfig, positions: &[usize]) -> Self {
        let half = c.head_dim / 2;
        let n = positions.len();
        let angles = |base: f32| {
            let mut cos = vec![0.0f32; n * half];
            let mut sin = vec![0.0f32; n * half];
            for (i, &pos) in positions.iter().enumerate() {
                rope_angles(c, pos, base, &mut cos[i * half..][..half], &mut sin[i * half..][..half]);
            }
            (cos, sin)
        };
        RopeTables { global: angles(c.rope_base), local: c.block.sliding.and_then(|sl| sl.rope_base).map(angles) }
    }

    /// `(cos, sin)`, `(n, head_dim / 2)`, for a local or a global layer.
    fn for_layer(&self, local: bool) -> (&[f32], &[f32]) {
        let (cos, sin) = match (&self.local, local) {
            (Some(a), true) => a,
            _ => &self.global,
        };
        (cos, sin)
    }
}
