//! What the 8-bit examples share: a seeded generator and random K-quant
//! matrices of a given shape, repacked as the runtime repacks them.

use kernels::matvec::r16::Repacked;
use kernels::quant::GgmlType;

/// A xorshift64 generator (the same sequence on every run).
pub struct Rng(u64);

impl Default for Rng {
    fn default() -> Self {
        Rng(0x9E37_79B9_7F4A_7C15)
    }
}

impl Rng {
    pub fn bits(&mut self) -> u64 {
        let s = &mut self.0;
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        *s
    }

    /// A uniform value in [-1, 1).
    pub fn unit(&mut self) -> f32 {
        (self.bits() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// A `rows` × `cols` matrix of `ty` with random quants and every scale
/// 0.01 (sane magnitudes), repacked; also its size in bytes.
pub fn random_matrix(rng: &mut Rng, ty: GgmlType, rows: usize, cols: usize) -> (Repacked, usize) {
    let n = ty.row_bytes(cols).expect("a K-quant shape") * rows;
    let mut bytes: Vec<u8> = (0..n).map(|_| rng.bits() as u8).collect();
    let scales: &[usize] = if ty == GgmlType::Q6K { &[208] } else { &[0, 2] };
    for blk in bytes.chunks_exact_mut(ty.block_bytes()) {
        for &o in scales {
            blk[o..o + 2].copy_from_slice(&half::f16::from_f32(0.01).to_bits().to_le_bytes());
        }
    }
    let packed = Repacked::from_native(ty, &bytes, rows, cols).expect("valid blocks").expect("a repackable format");
    (packed, n)
}
