//! Rotary position embedding: the angles of a position, and the rotation
//! of a head's pairs (adjacent or split halves, [`RopePairing`]).


/// How a head's dimensions are paired for rotation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopePairing {
    /// Pairs `(2i, 2i+1)`: GGUF Llama weights, whose Q/K rows llama.cpp's
    /// converter permutes into this order ("normal" RoPE).
    Adjacent,
    /// Pairs `(i, i + d/2)`: Hugging Face Llama checkpoints (`rotate_half`).
    Halves,
}

/// The rotation of one position: `cos`/`sin` of `pos * base^(-2i/d)` for the
/// `d/2` frequencies (Su et al. 2021, RoFormer). Computed in f64 and rounded
/// once, so every row at a position rotates identically.
pub fn rope_angles(pos: usize, head_dim: usize, base: f32, cos: &mut [f32], sin: &mut [f32]) {
    let half = head_dim / 2;
    for i in 0..half {
        let inv_freq = (base as f64).powf(-2.0 * i as f64 / head_dim as f64);
        let theta = pos as f64 * inv_freq;
        cos[i] = theta.cos() as f32;
        sin[i] = theta.sin() as f32;
    }
}

/// Rotates every head of `x` (`n_heads * head_dim`) in place.
pub fn rope(x: &mut [f32], head_dim: usize, pairing: RopePairing, cos: &[f32], sin: &[f32]) {
    let half = head_dim / 2;
    for head in x.chunks_exact_mut(head_dim) {
        for i in 0..half {
            let (a, b) = match pairing {
                RopePairing::Adjacent => (2 * i, 2 * i + 1),
                RopePairing::Halves => (i, i + half),
            };
            let (x0, x1) = (head[a], head[b]);
            head[a] = x0 * cos[i] - x1 * sin[i];
            head[b] = x0 * sin[i] + x1 * cos[i];
        }
    }
}
