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

// 8-bit activation quantization for the K-quants: the GPU twin of
// kernels/src/act8.rs (ActRow8::quantize), bit for bit.
//
// Each 256-element super-block of each row, in act8.rs's operations:
//   amax = max |x|                 exact in any order; NaN elements ignored
//                                  (fmaxf returns the other operand, as f32::max)
//   id   = amax > 0 ? 127 / amax : 0          one IEEE division (--prec-div=true)
//   q    = round_half_even(clamp(x * id, -127, 127)), a NaN product giving 0
//   d    = amax / 127                         one IEEE division
// and the exact integer sums of each 16 quants (bsum16) and each 32
// (bsum32 = the two halves' bsum16 added, as the host). Every step is one
// rounded IEEE operation or exact, so the quants, d and the sums equal the
// CPU's for the same f32 input (denormals are kept: NVRTC's default --ftz=false).
//
// Layout (our own, never stored): qs is (rows, cols) int8 in element order;
// d is (rows, cols / 256) f32, bsum16 (rows, cols / 16) and bsum32
// (rows, cols / 32) int16. cols is a multiple of 256, so super-block b of
// the whole (rows, cols) array is row b / (cols / 256)'s and its parts sit
// at qs[256 b..], d[b], bsum16[16 b..], bsum32[8 b..].
//
// Grid: one warp per super-block, MV_WARPS warps per thread block; lane l
// takes the 8 consecutive elements 8 l .. 8 l + 8 (so lanes 2k, 2k + 1 hold
// the 16 of bsum16[k] and lanes 4j .. 4j + 3 the 32 of bsum32[j]).
#define ACT8_QMAX 127  // largest 8-bit activation quant magnitude (kernels/src/act8.rs, QMAX8)

extern "C" __global__ void __launch_bounds__(MV_WARPS * 32)
quantize_act8(const float* __restrict__ x, signed char* __restrict__ qs, float* __restrict__ d,
              short* __restrict__ bsum16, short* __restrict__ bsum32, int n_sb) {
    const int lane = threadIdx.x & 31;
    const int b = blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
    if (b >= n_sb) return;  // whole warps leave together
    const float* xb = x + (long long)b * QK_K + 8 * lane;
    float v[8];
    float m = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; e++) {
        v[e] = xb[e];
        m = fmaxf(m, fabsf(v[e]));
    }
    const float amax = warp_max(m);
    const float id = amax > 0.0f ? (float)ACT8_QMAX / amax : 0.0f;
    int packed[2] = {0, 0};
    int sum = 0;
#pragma unroll
    for (int e = 0; e < 8; e++) {
        const float p = v[e] * id;
        // Clamped as floats first (an infinite id, from a subnormal amax,
        // makes infinite products), a NaN product zeroed, then rounded to
        // nearest even (__float2int_rn): act8.rs's round_ties_even of the
        // clamped product. The clamp bounds are integers, so clamping before
        // or after rounding is the same.
        int qi = 0;
        if (p == p) qi = __float2int_rn(fminf(fmaxf(p, -(float)ACT8_QMAX), (float)ACT8_QMAX));
        sum += qi;
        packed[e >> 2] |= (qi & 0xFF) << (8 * (e & 3));
    }
    // qs + 256 b + 8 lane is 8-byte aligned (the buffer is 256-byte aligned).
    int* qw = (int*)(qs + (long long)b * QK_K + 8 * lane);
    qw[0] = packed[0];
    qw[1] = packed[1];
    // Exact integer sums (|bsum16| <= 16 * 127, |bsum32| <= 32 * 127).
    const int s16 = sum + __shfl_xor_sync(FULL_MASK, sum, 1);
    const int s32 = s16 + __shfl_xor_sync(FULL_MASK, s16, 2);
    if ((lane & 1) == 0) bsum16[(long long)b * 16 + (lane >> 1)] = (short)s16;
    if ((lane & 3) == 0) bsum32[(long long)b * 8 + (lane >> 2)] = (short)s32;
    if (lane == 0) d[b] = amax / (float)ACT8_QMAX;
}
