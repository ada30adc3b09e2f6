//! Which CUDA mat-vec kernel a block of `W` activation rows runs: the one
//! place that decides it.
//!
//! `matvec.cu` compiles one entry point per (format, rows per pass) for
//! `1..=CUDA_ROWS_PER_PASS` rows; a block of `W` rows runs in passes of
//! [`CUDA_ROWS_PER_PASS`] rows and one pass of the remainder
//! ([`passes`]). Every pass computes each of its rows with the same per-lane
//! unit order and warp reduction as the one-row kernel, so how `W` is split
//! never changes a bit of the output, only how often the weights are read.

/// Most activation rows one mat-vec pass serves (one register accumulator
/// per row and lane; Q4_1 needs two). Eight keeps the accumulators and the
/// 32 unpacked weight quants of a unit within the register budget of a
/// 128-thread block at every compute capability we compile for. Not yet
/// tuned on a GPU (docs/cuda.md lists it as unverified): it is the value to
/// revisit with `runtime bench --verify-cost --device cuda`.
pub const CUDA_ROWS_PER_PASS: usize = 8;

/// The passes of a `w`-row block: (first activation row, rows in the pass).
pub fn passes(w: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..w).step_by(CUDA_ROWS_PER_PASS).map(move |j0| (j0, CUDA_ROWS_PER_PASS.min(w - j0)))
}

/// The kernel name for `fmt` (`q4_0`, `q4_1`, `q5_0`, `q5_1`, `q8_0`, `q4_k`,
/// `q6_k`, `f32`)
/// at `nr` rows per pass.
pub fn matvec_kernel_name(fmt: &str, nr: usize) -> String {
    debug_assert!((1..=CUDA_ROWS_PER_PASS).contains(&nr));
    format!("matvec_{fmt}_r{nr}")
}

/// The kernel name of the 8-bit activation mat-vec for the K-quant `fmt`
/// (`q4_k`, `q6_k`: the device module's `INT8_FORMATS`) at `nr` rows per pass;
/// the same widths as [`matvec_kernel_name`]'s.
pub fn matvec8_kernel_name(fmt: &str, nr: usize) -> String {
    debug_assert!((1..=CUDA_ROWS_PER_PASS).contains(&nr));
    format!("matvec_{fmt}_q8_k_r{nr}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_cover_every_row_once_in_order() {
        for w in 1..=40 {
            let p: Vec<_> = passes(w).collect();
            assert_eq!(p.iter().map(|&(_, n)| n).sum::<usize>(), w);
            assert!(p.windows(2).all(|x| x[0].0 + x[0].1 == x[1].0));
            assert!(p.iter().all(|&(_, n)| (1..=CUDA_ROWS_PER_PASS).contains(&n)));
        }
    }

    #[test]
    fn every_dispatched_kernel_exists_in_the_source() {
        let src = super::super::SOURCES[2].1;
        assert!(src.contains("MV_ENTRY(NAME, FMT, 8)") && !src.contains("MV_ENTRY(NAME, FMT, 9)"));
        assert_eq!(matvec_kernel_name("q4_1", 3), "matvec_q4_1_r3");
        assert!(src.contains("MV_WIDTHS(q5_0, FMT_Q5_0)") && src.contains("MV_WIDTHS(q5_1, FMT_Q5_1)"));
        assert_eq!(matvec_kernel_name("q5_0", 3), "matvec_q5_0_r3");
        // The 8-bit K-quant kernels: the same widths.
        assert!(src.contains("MV8_ENTRY(NAME, FMT, 8)") && !src.contains("MV8_ENTRY(NAME, FMT, 9)"));
        assert!(src.contains("MV8_WIDTHS(q4_k, FMT_Q4_K)") && src.contains("MV8_WIDTHS(q6_k, FMT_Q6_K)"));
        assert_eq!(matvec8_kernel_name("q6_k", 3), "matvec_q6_k_q8_k_r3");
    }
}
