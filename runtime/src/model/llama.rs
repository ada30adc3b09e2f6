//! The Llama forward pass on CPU.
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

use super::config::LlamaConfig;
use super::weights::{LlamaWeights, WeightMatrix};
use kernels::act::ActRow;
use kernels::dispatch::KernelFamily;
use kernels::matvec::{Input, matmul_rows, matvec_rows};
use kernels::ops;
use rayon::prelude::*;

/// A model ready to run: shape plus weights.
#[derive(Debug)]
pub struct Model {
    pub config: LlamaConfig,
    pub weights: LlamaWeights,
}

/// Per-sequence state: the KV cache, growable and truncatable (rollback).
#[derive(Debug, Clone)]
pub struct Session {
    /// Per layer: (n_pos, n_kv_heads · head_dim) keys, rotated.
    k: Vec<Vec<f32>>,
    /// Per layer: (n_pos, n_kv_heads · head_dim) values.
    v: Vec<Vec<f32>>,
    n_pos: usize,
    kv_dim: usize,
}

impl Session {
    pub fn new(cfg: &LlamaConfig) -> Self {
        Session { k: vec![Vec::new(); cfg.n_layers], v: vec![Vec::new(); cfg.n_layers], n_pos: 0, kv_dim: cfg.kv_dim() }
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
            for layer in self.k.iter_mut().chain(self.v.iter_mut()) {
                layer.truncate(n * self.kv_dim);
            }
            self.n_pos = n;
        }
    }
}

/// Which rows of a block need logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogitRows {
    /// Only the block's last row (prefill, classic decode).
    Last,
    /// Every row (verify blocks, reference checks).
    All,
}

/// Why a forward pass was refused. Nothing was written to the session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForwardError {
    #[error("token id {id} is outside the vocabulary (size {vocab})")]
    TokenOutOfRange { id: u32, vocab: usize },
    #[error("context full: {have} cached + {adding} new positions exceed the model's context length {limit}")]
    ContextFull { have: usize, adding: usize, limit: usize },
    #[error("empty token block")]
    Empty,
}

/// Rows of one mat-vec are split into this many chunks per thread, so that
/// a thread slowed by other load leaves work for the others.
const CHUNKS_PER_THREAD: usize = 2;

/// `out[i] = W · inputs[i]` for every input row, threads over output rows.
/// `out` is (inputs.len(), W.rows).
fn par_matmul(family: KernelFamily, w: &WeightMatrix, inputs: &[Input], out: &mut [f32]) {
    let m = w.matrix();
    let (n, rows) = (inputs.len(), m.rows);
    debug_assert_eq!(out.len(), n * rows);
    let threads = rayon::current_num_threads();
    let chunk = rows.div_ceil(threads * CHUNKS_PER_THREAD).next_multiple_of(8).max(8);
    if threads == 1 || rows <= chunk {
        for (inp, o) in inputs.iter().zip(out.chunks_exact_mut(rows)) {
            matvec_rows(family, &m, *inp, 0, o);
        }
        return;
    }
    if n == 1 {
        out.par_chunks_mut(chunk).enumerate().for_each(|(c, o)| matvec_rows(family, &m, inputs[0], c * chunk, o));
        return;
    }
    // Several rows: each task computes a band of output rows for every
    // input, then scatters the band into place. Bands are disjoint.
    struct Out(*mut f32);
    // SAFETY: tasks write disjoint index sets of the buffer (their own band
    // of every row), and the buffer outlives the parallel loop.
    unsafe impl Sync for Out {}
    impl Out {
        fn ptr(&self) -> *mut f32 {
            self.0
        }
    }
    let dst = Out(out.as_mut_ptr());
    (0..rows.div_ceil(chunk)).into_par_iter().for_each(|c| {
        let r0 = c * chunk;
        let len = chunk.min(rows - r0);
        let mut band = vec![0.0f32; n * len];
        matmul_rows(family, &m, inputs, r0, &mut band);
        for i in 0..n {
            // SAFETY: rows i*rows + r0 .. + len lie inside `out` (r0 + len <=
            // rows, i < n) and belong to this band only.
            unsafe { std::ptr::copy_nonoverlapping(band.as_ptr().add(i * len), dst.ptr().add(i * rows + r0), len) };
        }
    });
}

/// Quantizes each of the `n` rows of `x` (n × width) for the integer kernels.
fn quantize_rows(x: &[f32], width: usize, q: &mut Vec<ActRow>) {
    let n = x.len() / width;
    q.resize_with(n, ActRow::default);
    for (row, qr) in x.chunks_exact(width).zip(q.iter_mut()) {
        qr.quantize(row);
    }
}

fn inputs<'a>(x: &'a [f32], width: usize, q: &'a [ActRow], quantized: bool) -> Vec<Input<'a>> {
    x.chunks_exact(width)
        .enumerate()
        .map(|(i, row)| Input { x: row, q: if quantized { &q[i].blocks } else { &[] } })
        .collect()
}

impl Model {
    pub fn new(config: LlamaConfig, weights: LlamaWeights) -> Self {
        Model { config, weights }
    }

    /// Runs `tokens` at positions `session.len()..` and appends them to the
    /// cache. Returns logits, (rows, vocab), for the rows `which` names.
    /// Runs on the calling rayon pool's threads.
    pub fn forward(
        &self,
        family: KernelFamily,
        session: &mut Session,
        tokens: &[u32],
        which: LogitRows,
    ) -> Result<Vec<f32>, ForwardError> {
        let c = &self.config;
        let n = tokens.len();
        if n == 0 {
            return Err(ForwardError::Empty);
        }
        if let Some(&id) = tokens.iter().find(|&&t| t as usize >= c.vocab) {
            return Err(ForwardError::TokenOutOfRange { id, vocab: c.vocab });
        }
        let start = session.len();
        if start + n > c.context_length {
            return Err(ForwardError::ContextFull { have: start, adding: n, limit: c.context_length });
        }
        let (d, qd, kvd, hd) = (c.dim, c.q_dim(), c.kv_dim(), c.head_dim);
        let w = &self.weights;

        // (n, dim) residual stream.
        let mut x = vec![0.0f32; n * d];
        for (row, &t) in x.chunks_exact_mut(d).zip(tokens) {
            w.embed.row_f32(t as usize, row);
        }
        // Rotation of each row's position, shared by every layer and head.
        let half = hd / 2;
        let mut cos = vec![0.0f32; n * half];
        let mut sin = vec![0.0f32; n * half];
        for i in 0..n {
            ops::rope_angles(start + i, hd, c.rope_base, &mut cos[i * half..][..half], &mut sin[i * half..][..half]);
        }

        let mut xn = vec![0.0f32; n * d];
        let mut xq: Vec<ActRow> = Vec::new();
        let mut q = vec![0.0f32; n * qd];
        let mut k = vec![0.0f32; n * kvd];
        let mut v = vec![0.0f32; n * kvd];
        let mut att = vec![0.0f32; n * qd];
        let mut proj = vec![0.0f32; n * d];
        let mut gate = vec![0.0f32; n * c.ffn_dim];
        let mut up = vec![0.0f32; n * c.ffn_dim];
        let group = c.n_heads / c.n_kv_heads;

        for (li, lw) in w.layers.iter().enumerate() {
            // Attention.
            for (xr, or) in x.chunks_exact(d).zip(xn.chunks_exact_mut(d)) {
                ops::rmsnorm(family, xr, &lw.attn_norm, c.rms_eps, or);
            }
            let quantized = lw.wq.matrix().wants_quantized_input();
            if quantized {
                quantize_rows(&xn, d, &mut xq);
            }
            let ins = inputs(&xn, d, &xq, quantized);
            par_matmul(family, &lw.wq, &ins, &mut q);
            par_matmul(family, &lw.wk, &ins, &mut k);
            par_matmul(family, &lw.wv, &ins, &mut v);
            for i in 0..n {
                let (cs, sn) = (&cos[i * half..][..half], &sin[i * half..][..half]);
                ops::rope(&mut q[i * qd..(i + 1) * qd], hd, c.rope_pairing, cs, sn);
                ops::rope(&mut k[i * kvd..(i + 1) * kvd], hd, c.rope_pairing, cs, sn);
            }
            session.k[li].extend_from_slice(&k);
            session.v[li].extend_from_slice(&v);
            let (keys, values) = (&session.k[li], &session.v[li]);
            // One task per (row, head): row i sees positions 0..=start+i.
            att.par_chunks_mut(hd).enumerate().for_each_init(
                || vec![0.0f32; start + n],
                |scores, (j, out)| {
                    let (i, h) = (j / c.n_heads, j % c.n_heads);
                    let qh = &q[i * qd + h * hd..][..hd];
                    let off = (h / group) * hd;
                    ops::attend_head(family, qh, keys, values, kvd, off, start + i + 1, scores, out);
                },
            );
            let quantized = lw.wo.matrix().wants_quantized_input();
            if quantized {
                quantize_rows(&att, qd, &mut xq);
            }
            par_matmul(family, &lw.wo, &inputs(&att, qd, &xq, quantized), &mut proj);
            for (a, b) in x.iter_mut().zip(&proj) {
                *a += b;
            }

            // Feed-forward (SwiGLU).
            for (xr, or) in x.chunks_exact(d).zip(xn.chunks_exact_mut(d)) {
                ops::rmsnorm(family, xr, &lw.ffn_norm, c.rms_eps, or);
            }
            let quantized = lw.w_gate.matrix().wants_quantized_input();
            if quantized {
                quantize_rows(&xn, d, &mut xq);
            }
            let ins = inputs(&xn, d, &xq, quantized);
            par_matmul(family, &lw.w_gate, &ins, &mut gate);
            par_matmul(family, &lw.w_up, &ins, &mut up);
            for (g, u) in gate.chunks_exact_mut(c.ffn_dim).zip(up.chunks_exact(c.ffn_dim)) {
                ops::swiglu(g, u);
            }
            let quantized = lw.w_down.matrix().wants_quantized_input();
            if quantized {
                quantize_rows(&gate, c.ffn_dim, &mut xq);
            }
            par_matmul(family, &lw.w_down, &inputs(&gate, c.ffn_dim, &xq, quantized), &mut proj);
            for (a, b) in x.iter_mut().zip(&proj) {
                *a += b;
            }
        }
        session.n_pos = start + n;

        // Final norm and head on the rows that need logits.
        let first = match which {
            LogitRows::Last => n - 1,
            LogitRows::All => 0,
        };
        let rows = &x[first * d..];
        let m = rows.len() / d;
        let mut xf = vec![0.0f32; m * d];
        for (xr, or) in rows.chunks_exact(d).zip(xf.chunks_exact_mut(d)) {
            ops::rmsnorm(family, xr, &w.out_norm, c.rms_eps, or);
        }
        let head = w.head();
        let quantized = head.matrix().wants_quantized_input();
        if quantized {
            quantize_rows(&xf, d, &mut xq);
        }
        let mut logits = vec![0.0f32; m * c.vocab];
        par_matmul(family, head, &inputs(&xf, d, &xq, quantized), &mut logits);
        Ok(logits)
    }
}
