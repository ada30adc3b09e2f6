// Quantized mat-vec, single row and multi-row.
//
// out[j * rows + r] = W[r] . x_j for activation rows j < NR (the template's
// row count) and weight rows r < rows. One warp computes one weight row for
// all NR activation rows: it reads each weight unit (32 elements: one legacy
// or Q5 block, one Q4_K sub-block, one pair of Q6_K sub-blocks) once and applies
// it to every activation row.
//
// The reduction tree is fixed and does not depend on NR, which is what makes
// a multi-row result equal the single-row one bit for bit:
//
// 1. lane l (0..32) takes the units u = l, l + 32, l + 64, ... in order;
// 2. per unit, the exact integer dot of the weight quants with the 16-bit
//    activation quants (int32; Q6_K: int64 across its two halves);
// 3. one float accumulator per (lane, activation row), updated once per
//    unit by the format's rule below, every operation rounded on its own
//    except the explicit __fmaf_rn;
// 4. warp_sum (the butterfly 16, 8, 4, 2, 1) of the 32 lane accumulators.
//
// Update rules (d, m, dmin: weight scales; dx, sx: the activation block's
// scale and dx * sum(q)):
//   Q4_0, Q5_0, Q8_0: acc = fma(d * dx, isum, acc)
//   Q4_1, Q5_1: acc = fma(d * dx, isum, acc); mt = fma(m, sx, mt); out = sum(acc) + sum(mt)
//   Q4_K:       acc = (acc + ((d * sc) * dx) * isum) - (dmin * m) * sx
//   Q6_K:       acc = acc + (d * dx) * (sc_a * isum_a + sc_b * isum_b)
//   F32:        acc = acc + w * x per element (lane l takes elements l, l + 32, ...)
// These follow the CPU scalar specification's per-unit rules (kernels/src/matvec/scalar.rs)
// up to the order of the sums (the CPU runs one serial chain per output over
// blocks and sub-blocks, min terms in the same chain, Q6_K's sixteen
// sub-blocks each with its own d * sc in ql order), so GPU and CPU agree
// within the tolerance of docs/cuda.md, not bit for bit.
//
// The K-quants against 8-bit activations (--precision int8; matvec_q4_k_q8_k_r<NR>,
// matvec_q6_k_q8_k_r<NR>, at the end of this file) run another tree, also
// fixed and independent of NR, which reproduces the CPU's 8-bit scalar
// specification (kernels/src/matvec/scalar8.rs) bit for bit: see there.

// The 32 signed quants of unit u of weight row `row` and its scales.
template <int FMT>
struct Unit {
    int q[32];
    float d;   // block scale (K-quants: see below)
    float m;   // Q4_1, Q5_1: block min; Q4_K: dmin * m
    int sc_a, sc_b;  // Q6_K: the two sub-block scales
};

template <int FMT>
__device__ __forceinline__ void load_unit(const unsigned char* row, int u, Unit<FMT>& w) {
    if (FMT == FMT_Q4_0) {
        const unsigned char* b = row + (long long)u * 18;
        w.d = load_half(b);
#pragma unroll
        for (int e = 0; e < 16; e++) {
            w.q[e] = (b[2 + e] & 0x0F) - 8;
            w.q[e + 16] = (b[2 + e] >> 4) - 8;
        }
    } else if (FMT == FMT_Q4_1) {
        const unsigned char* b = row + (long long)u * 20;
        w.d = load_half(b);
        w.m = load_half(b + 2);
#pragma unroll
        for (int e = 0; e < 16; e++) {
            w.q[e] = b[4 + e] & 0x0F;
            w.q[e + 16] = b[4 + e] >> 4;
        }
    } else if (FMT == FMT_Q8_0) {
        const unsigned char* b = row + (long long)u * 34;
        w.d = load_half(b);
#pragma unroll
        for (int e = 0; e < 32; e++) w.q[e] = (int)(signed char)b[2 + e];
    } else if (FMT == FMT_Q5_0 || FMT == FMT_Q5_1) {
        // Block: d (2), [m (2),] qh (4), qs (16); 22 or 24 bytes. Q5_0's
        // weights are the quant - 16, Q5_1's the quant (its min is w.m).
        const unsigned char* b = row + (long long)u * Q5_BLOCK_BYTES(FMT);
        w.d = load_half(b);
        if (FMT == FMT_Q5_1) w.m = load_half(b + 2);
        const int bias = FMT == FMT_Q5_0 ? 16 : 0;
#pragma unroll
        for (int e = 0; e < 32; e++) w.q[e] = q5_quant<FMT>(b, e) - bias;
    } else if (FMT == FMT_Q4_K) {
        // Super-block: d (2), dmin (2), scales (12), qs (128); 144 bytes.
        const int sub = u & 7;
        const unsigned char* b = row + (long long)(u >> 3) * 144;
        int sc, mn;
        scale_min_k4(sub, b + 4, &sc, &mn);
        // w.d = d * sc and w.m = dmin * m, as the CPU's dsc and dm.
        w.d = load_half(b) * (float)sc;
        w.m = load_half(b + 2) * (float)mn;
        const unsigned char* qs = b + 16 + (sub >> 1) * 32;
#pragma unroll
        for (int l = 0; l < 32; l++) w.q[l] = (sub & 1) ? (qs[l] >> 4) : (qs[l] & 0x0F);
    } else {  // FMT_Q6_K
        // Super-block: ql (128), qh (64), scales (16, int8), d (2); 210 bytes.
        // Unit j of 8 is quarter k = j % 4 of half j / 4.
        const int j = u & 7;
        const int half = j >> 2, k = j & 3;
        const unsigned char* b = row + (long long)(u >> 3) * 210;
        const unsigned char* ql = b + half * 64 + 32 * (k & 1);
        const unsigned char* qh = b + 128 + half * 32;
        w.d = load_half(b + 208);
        w.sc_a = (int)(signed char)b[192 + 2 * j];
        w.sc_b = (int)(signed char)b[192 + 2 * j + 1];
#pragma unroll
        for (int l = 0; l < 32; l++) {
            const int lo = (k < 2) ? (ql[l] & 0x0F) : (ql[l] >> 4);
            const int hi = (qh[l] >> (2 * k)) & 3;
            w.q[l] = (lo | (hi << 4)) - 32;
        }
    }
}

// Bytes of one weight row of `cols` elements.
template <int FMT>
__device__ __forceinline__ long long row_bytes(int cols) {
    if (FMT == FMT_Q4_0) return (long long)(cols / QK) * 18;
    if (FMT == FMT_Q4_1) return (long long)(cols / QK) * 20;
    if (FMT == FMT_Q8_0) return (long long)(cols / QK) * 34;
    if (FMT == FMT_Q5_0 || FMT == FMT_Q5_1) return (long long)(cols / QK) * Q5_BLOCK_BYTES(FMT);
    if (FMT == FMT_Q4_K) return (long long)(cols / QK_K) * 144;
    return (long long)(cols / QK_K) * 210;
}

template <int FMT, int NR>
__device__ __forceinline__ void matvec_body(const unsigned char* __restrict__ wt, const short* __restrict__ qx,
                                            const float* __restrict__ dx, const float* __restrict__ sx,
                                            float* __restrict__ out, int rows, int cols) {
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
    if (r >= rows) return;  // whole warps leave together
    const int nu = cols / QK;
    const unsigned char* row = wt + (long long)r * row_bytes<FMT>(cols);
    float acc[NR], mt[NR];
#pragma unroll
    for (int j = 0; j < NR; j++) acc[j] = mt[j] = 0.0f;
    Unit<FMT> w;
    for (int u = lane; u < nu; u += 32) {
        load_unit<FMT>(row, u, w);
#pragma unroll
        for (int j = 0; j < NR; j++) {
            const short* xq = qx + (long long)j * cols + (long long)u * QK;
            const float xd = dx[(long long)j * nu + u];
            if (FMT == FMT_Q6_K) {
                int ia = 0, ib = 0;
#pragma unroll
                for (int l = 0; l < 16; l++) {
                    ia += w.q[l] * (int)xq[l];
                    ib += w.q[16 + l] * (int)xq[16 + l];
                }
                // |sc * half| reaches 2^31: the combination needs 64 bits.
                const long long itot = (long long)w.sc_a * ia + (long long)w.sc_b * ib;
                acc[j] = acc[j] + (w.d * xd) * (float)itot;
            } else {
                int is = 0;
#pragma unroll
                for (int e = 0; e < 32; e++) is += w.q[e] * (int)xq[e];
                if (FMT == FMT_Q4_K) {
                    const float xs = sx[(long long)j * nu + u];
                    acc[j] = (acc[j] + (w.d * xd) * (float)is) - w.m * xs;
                } else {
                    acc[j] = __fmaf_rn(w.d * xd, (float)is, acc[j]);
                    if (FMT_HAS_MIN(FMT)) mt[j] = __fmaf_rn(w.m, sx[(long long)j * nu + u], mt[j]);
                }
            }
        }
    }
#pragma unroll
    for (int j = 0; j < NR; j++) {
        float v = warp_sum(acc[j]);
        if (FMT_HAS_MIN(FMT)) v = v + warp_sum(mt[j]);
        if (lane == 0) out[(long long)j * rows + r] = v;
    }
}

template <int NR>
__device__ __forceinline__ void matvec_f32_body(const float* __restrict__ wt, const float* __restrict__ x,
                                                float* __restrict__ out, int rows, int cols) {
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
    if (r >= rows) return;
    const float* row = wt + (long long)r * cols;
    float acc[NR];
#pragma unroll
    for (int j = 0; j < NR; j++) acc[j] = 0.0f;
    for (int e = lane; e < cols; e += 32) {
        const float wv = row[e];
#pragma unroll
        for (int j = 0; j < NR; j++) acc[j] = acc[j] + wv * x[(long long)j * cols + e];
    }
#pragma unroll
    for (int j = 0; j < NR; j++) {
        const float v = warp_sum(acc[j]);
        if (lane == 0) out[(long long)j * rows + r] = v;
    }
}

// One entry point per (format, rows per pass). The launcher names them
// matvec_<fmt>_r<NR>; the widths compiled here are CUDA_ROWS_PER_PASS in
// kernels/src/cuda/dispatch.rs, the one place that decides which runs.
#define MV_ENTRY(NAME, FMT, NR)                                                                        \
    extern "C" __global__ void __launch_bounds__(MV_WARPS * 32)                                        \
        matvec_##NAME##_r##NR(const unsigned char* __restrict__ w, const short* __restrict__ qx,          \
                              const float* __restrict__ dx, const float* __restrict__ sx,                \
                              float* __restrict__ out, int rows, int cols) {                             \
        matvec_body<FMT, NR>(w, qx, dx, sx, out, rows, cols);                                          \
    }
#define MV_F32_ENTRY(NR)                                                                               \
    extern "C" __global__ void __launch_bounds__(MV_WARPS * 32)                                        \
        matvec_f32_r##NR(const float* __restrict__ w, const float* __restrict__ x,                       \
                         float* __restrict__ out, int rows, int cols) {                                  \
        matvec_f32_body<NR>(w, x, out, rows, cols);                                                    \
    }
#define MV_WIDTHS(NAME, FMT) \
    MV_ENTRY(NAME, FMT, 1)   \
    MV_ENTRY(NAME, FMT, 2)   \
    MV_ENTRY(NAME, FMT, 3)   \
    MV_ENTRY(NAME, FMT, 4)   \
    MV_ENTRY(NAME, FMT, 5)   \
    MV_ENTRY(NAME, FMT, 6)   \
    MV_ENTRY(NAME, FMT, 7)   \
    MV_ENTRY(NAME, FMT, 8)

MV_WIDTHS(q4_0, FMT_Q4_0)
MV_WIDTHS(q4_1, FMT_Q4_1)
MV_WIDTHS(q8_0, FMT_Q8_0)
MV_WIDTHS(q5_0, FMT_Q5_0)
MV_WIDTHS(q5_1, FMT_Q5_1)
MV_WIDTHS(q4_k, FMT_Q4_K)
MV_WIDTHS(q6_k, FMT_Q6_K)
MV_F32_ENTRY(1)
MV_F32_ENTRY(2)
MV_F32_ENTRY(3)
MV_F32_ENTRY(4)
MV_F32_ENTRY(5)
MV_F32_ENTRY(6)
MV_F32_ENTRY(7)
MV_F32_ENTRY(8)

// ---------------------------------------------------------------------------
// K-quants against 8-bit activations: Q4_K and Q6_K (--precision int8).
// Q5_K has no CUDA kernel at any precision (a model with Q5_K matrices stays
// on the CPU), so it has none here either.
//
// out[j * rows + r] = W[r] . x_j as kernels/src/matvec/scalar8.rs specifies
// it, and bit for bit equal to it (and so to every CPU family at int8). The
// activation rows are quantize_act8's (quantize.cu): qs (n, cols) int8,
// dx (n, cols / 256), bsum16 (n, cols / 16), bsum32 (n, cols / 32).
//
// scalar8's chain, per output: y = +0; for each super-block sb in order,
//   Q4_K: S = sum_j sc_j * sum_e q * qx,  M = sum_j m_j * bsum32_j   (exact int32)
//         y = fma(float(S), d * dx, y); y = fma(-float(M), dmin * dx, y)
//   Q6_K: S = sum_k sc_k * sum_e (q - 32) * qx                       (exact int32)
//         y = fma(float(S), d * dx, y)
// (scalar8's module docs bound every partial sum below 2^31.)
//
// How a warp computes it (one weight row per warp, NR activation rows):
// 1. the warp takes the super-blocks four at a time, sb0 = 0, 4, 8, ...;
//    lane l = 8 g + k takes sub-block k (32 elements) of super-block
//    sb0 + g: it unpacks the 32 weight quants once and, per activation row,
//    forms its exact integer part with __dp4a (Q4_K: sc_k * dot and
//    m_k * bsum32_k; Q6_K: sc_a * (dot_a - 32 bsum16_a) + sc_b * (dot_b -
//    32 bsum16_b) over its two 16-element sub-blocks, the stored unsigned
//    quants q + 32 times qx less 32 times the exact quant sums: the offset
//    handled exactly);
// 2. the 8 lanes of a group add their parts (shuffle xor 4, 2, 1): integer
//    additions, exact in any order, so every lane of group g holds S (and
//    M) of super-block sb0 + g;
// 3. every lane then runs scalar8's float chain over sb0, sb0 + 1, sb0 + 2,
//    sb0 + 3 in order, reading each one's S and M from its group's first
//    lane: the same two (one) rounded FMAs, on the same f32 products
//    d * dx and dmin * dx (the halves widened exactly), in the same order as
//    the CPU (--fmad=false: nothing else is fused); lane 0 stores it.
// Nothing in this depends on NR (an activation row's integers and chain
// never meet another row's), so a row of an NR-row pass equals the one-row
// kernel bit for bit; and since the float chain is scalar8's, GPU and CPU
// agree bit for bit here too (where the 16-bit kernels above only agree
// within docs/cuda.md's tolerance).

// c + the dot product of the four signed bytes of a and b. __dp4a from
// sm_61; a plain twin below that (the pinned architectures start at
// compute_70, so it only keeps older targets compiling).
__device__ __forceinline__ int dot4_i8(int a, int b, int c) {
#if __CUDA_ARCH__ >= 610
    return __dp4a(a, b, c);
#else
#pragma unroll
    for (int i = 0; i < 4; i++) c += ((a << (24 - 8 * i)) >> 24) * ((b << (24 - 8 * i)) >> 24);
    return c;
#endif
}

// Four bytes at a 2-byte aligned address, little-endian (Q6_K super-blocks
// are 210 bytes, so its quants are only 2-byte aligned).
__device__ __forceinline__ unsigned int load_u32_a2(const unsigned char* p) {
    const unsigned short* h = (const unsigned short*)p;
    return (unsigned int)h[0] | ((unsigned int)h[1] << 16);
}

template <int FMT, int NR>
__device__ __forceinline__ void matvec8_body(const unsigned char* __restrict__ wt, const signed char* __restrict__ qs,
                                             const float* __restrict__ dx, const short* __restrict__ bsum16,
                                             const short* __restrict__ bsum32, float* __restrict__ out, int rows,
                                             int cols) {
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
    if (r >= rows) return;  // whole warps leave together
    const int g = lane >> 3, k = lane & 7;
    const int nsb = cols / QK_K;
    // Q4_K: d (2), dmin (2), scales (12), qs (128); Q6_K: ql (128), qh (64),
    // scales (16, int8), d (2) (block_q4_K, block_q6_K of ggml-common.h).
    const long long sb_bytes = FMT == FMT_Q4_K ? 144 : 210;
    const unsigned char* row = wt + (long long)r * nsb * sb_bytes;
    float acc[NR];
#pragma unroll
    for (int j = 0; j < NR; j++) acc[j] = 0.0f;
    for (int sb0 = 0; sb0 < nsb; sb0 += 4) {
        const int sb = sb0 + g;
        int s[NR], m[NR];
#pragma unroll
        for (int j = 0; j < NR; j++) s[j] = m[j] = 0;
        if (sb < nsb) {
            const unsigned char* b = row + (long long)sb * sb_bytes;
            // The 32 weight quants of sub-block k, four to a word in element
            // order (Q4_K 0..15, Q6_K the stored 0..63), and its scales.
            int wq[8];
            int sc_a, sc_b;  // Q4_K: scale and min; Q6_K: the two 16-element sub-blocks' scales
            if (FMT == FMT_Q4_K) {
                scale_min_k4(k, b + 4, &sc_a, &sc_b);
                // Sub-block k is the low (even k) or high nibbles of the 32
                // bytes at 16 + 32 (k / 2): 16-byte aligned (a super-block is
                // 144 bytes, rows start at multiples of it, the buffer at 256).
                const unsigned int* q4 = (const unsigned int*)(b + 16 + (k >> 1) * 32);
#pragma unroll
                for (int i = 0; i < 8; i++) wq[i] = (int)((q4[i] >> (4 * (k & 1))) & 0x0F0F0F0Fu);
            } else {
                // Sub-block k is quarter q = k % 4 of half k / 4 (as load_unit above).
                const int half = k >> 2, q = k & 3;
                const unsigned char* ql = b + half * 64 + 32 * (q & 1);
                const unsigned char* qh = b + 128 + half * 32;
                sc_a = (int)(signed char)b[192 + 2 * k];
                sc_b = (int)(signed char)b[192 + 2 * k + 1];
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    const unsigned int lo = (load_u32_a2(ql + 4 * i) >> (q < 2 ? 0 : 4)) & 0x0F0F0F0Fu;
                    const unsigned int hi = (load_u32_a2(qh + 4 * i) >> (2 * q)) & 0x03030303u;
                    wq[i] = (int)(lo | (hi << 4));
                }
            }
#pragma unroll
            for (int j = 0; j < NR; j++) {
                const long long xb = (long long)j * nsb + sb;  // the activation super-block
                const int* xq = (const int*)(qs + xb * QK_K + 32 * k);
                if (FMT == FMT_Q4_K) {
                    int dot = 0;
#pragma unroll
                    for (int i = 0; i < 8; i++) dot = dot4_i8(wq[i], xq[i], dot);
                    s[j] = sc_a * dot;
                    m[j] = sc_b * (int)bsum32[xb * 8 + k];
                } else {
                    int da = 0, db = 0;
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        da = dot4_i8(wq[i], xq[i], da);
                        db = dot4_i8(wq[4 + i], xq[4 + i], db);
                    }
                    da -= 32 * (int)bsum16[xb * 16 + 2 * k];
                    db -= 32 * (int)bsum16[xb * 16 + 2 * k + 1];
                    s[j] = sc_a * da + sc_b * db;
                }
            }
        }
        // Each group's S (and M): exact integer sums over its 8 lanes.
#pragma unroll
        for (int j = 0; j < NR; j++) {
#pragma unroll
            for (int o = 4; o > 0; o >>= 1) {
                s[j] += __shfl_xor_sync(FULL_MASK, s[j], o);
                if (FMT == FMT_Q4_K) m[j] += __shfl_xor_sync(FULL_MASK, m[j], o);
            }
        }
        // scalar8's float chain over the four super-blocks, in order (the
        // condition is the same for the whole warp).
#pragma unroll
        for (int g2 = 0; g2 < 4; g2++) {
            const int sb2 = sb0 + g2;
            if (sb2 < nsb) {
                const unsigned char* b = row + (long long)sb2 * sb_bytes;
                const float d = load_half(b + (FMT == FMT_Q4_K ? 0 : 208));
                const float dmin = FMT == FMT_Q4_K ? load_half(b + 2) : 0.0f;
#pragma unroll
                for (int j = 0; j < NR; j++) {
                    const float xd = dx[(long long)j * nsb + sb2];
                    const int S = __shfl_sync(FULL_MASK, s[j], 8 * g2);
                    acc[j] = __fmaf_rn((float)S, __fmul_rn(d, xd), acc[j]);
                    if (FMT == FMT_Q4_K) {
                        const int M = __shfl_sync(FULL_MASK, m[j], 8 * g2);
                        acc[j] = __fmaf_rn(-(float)M, __fmul_rn(dmin, xd), acc[j]);
                    }
                }
            }
        }
    }
    if (lane == 0) {
#pragma unroll
        for (int j = 0; j < NR; j++) out[(long long)j * rows + r] = acc[j];
    }
}

// One entry point per (format, rows per pass): matvec_<fmt>_q8_k_r<NR>, the
// same widths as the 16-bit kernels (CUDA_ROWS_PER_PASS). Every entry takes
// both sum arrays (Q4_K reads bsum32, Q6_K bsum16) so the launcher passes
// one argument list.
#define MV8_ENTRY(NAME, FMT, NR)                                                                        \
    extern "C" __global__ void __launch_bounds__(MV_WARPS * 32) matvec_##NAME##_q8_k_r##NR(               \
        const unsigned char* __restrict__ w, const signed char* __restrict__ qs, const float* __restrict__ dx, \
        const short* __restrict__ bsum16, const short* __restrict__ bsum32, float* __restrict__ out, int rows, \
        int cols) {                                                                                      \
        matvec8_body<FMT, NR>(w, qs, dx, bsum16, bsum32, out, rows, cols);                                \
    }
#define MV8_WIDTHS(NAME, FMT) \
    MV8_ENTRY(NAME, FMT, 1)   \
    MV8_ENTRY(NAME, FMT, 2)   \
    MV8_ENTRY(NAME, FMT, 3)   \
    MV8_ENTRY(NAME, FMT, 4)   \
    MV8_ENTRY(NAME, FMT, 5)   \
    MV8_ENTRY(NAME, FMT, 6)   \
    MV8_ENTRY(NAME, FMT, 7)   \
    MV8_ENTRY(NAME, FMT, 8)

MV8_WIDTHS(q4_k, FMT_Q4_K)
MV8_WIDTHS(q6_k, FMT_Q6_K)
