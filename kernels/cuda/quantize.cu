// Activation quantization: the GPU twin of kernels/src/act.rs, bit for bit.
//
// Each 32-element block of each row: d = max|x| / 32767, q = round(x * (1/d))
// with ties away from zero, clamped to +-32767 (a zero block has d = 0 and
// q = 0), s = d * sum(q). The max and the integer sum are exact whatever
// the reduction order, and the divisions are IEEE (--prec-div=true), so the
// quants, d and s equal the CPU's for the same f32 input.
//
// Layout (our own, never stored): q is (rows, cols) int16 in element order;
// d and s are (rows, cols / 32).
//
// Grid: one warp per block; MV_WARPS warps per thread block.
extern "C" __global__ void __launch_bounds__(MV_WARPS * 32)
quantize_act(const float* __restrict__ x, short* __restrict__ q, float* __restrict__ d, float* __restrict__ s,
             int n_blocks) {
    const int lane = threadIdx.x & 31;
    const int b = blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
    if (b >= n_blocks) return;  // whole warps leave together
    const float v = x[(long long)b * QK + lane];
    const float amax = warp_max(fabsf(v));
    const float dd = amax / (float)ACT_QMAX;
    const float id = dd > 0.0f ? 1.0f / dd : 0.0f;
    // roundf rounds half away from zero, as f32::round; a NaN converts to 0
    // like Rust's saturating cast.
    float r = roundf(v * id);
    if (r != r) r = 0.0f;
    r = fminf(fmaxf(r, -(float)ACT_QMAX), (float)ACT_QMAX);
    const int qi = (int)r;
    q[(long long)b * QK + lane] = (short)qi;
    const int sum = warp_sum_int(qi);
    if (lane == 0) {
        d[b] = dd;
        s[b] = dd * (float)sum;
    }
}
