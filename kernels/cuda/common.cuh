// draftwise CUDA kernels: shared definitions.
//
// The launcher (kernels/src/cuda/) concatenates the sources in the order
// common.cuh, quantize.cu, matvec.cu, ops.cu, attention.cu into one NVRTC
// program, so no file #includes another and none needs a system header.
// Every kernel is compiled with --fmad=false: each multiply and add is
// rounded on its own unless the source says __fmaf_rn, so the arithmetic is
// exactly what the source spells, whatever the compiler version or the
// number of rows a kernel serves at once.

#define QK 32          // elements per legacy block (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) and per activation block
#define QK_K 256       // elements per K-quant super-block
#define ACT_QMAX 32767 // largest 16-bit activation quant magnitude (kernels/src/act.rs)
#define MV_WARPS 4     // warps per thread block in the mat-vec kernels: one output row per warp
#define FULL_MASK 0xffffffffu
#define NEG_INF __int_as_float(0xff800000) // -infinity without math.h

// A little-endian IEEE half stored at p (GGUF scales are unaligned u16).
__device__ __forceinline__ float load_half(const unsigned char* p) {
    unsigned short bits = (unsigned short)p[0] | ((unsigned short)p[1] << 8);
    float f;
    // Exact conversion (every half is a float).
    asm("{ .reg .b16 h; mov.b16 h, %1; cvt.f32.f16 %0, h; }" : "=f"(f) : "h"(bits));
    return f;
}

// Sum over the 32 lanes of a warp by the fixed butterfly 16, 8, 4, 2, 1.
// Float addition is commutative, so after each step the partner lanes hold
// equal values and every lane ends with the same bits.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = v + __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ int warp_sum_int(int v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

// The 6-bit scale and min of sub-block j of a Q4_K super-block
// (get_scale_min_k4 in kernels/src/quant/dequant.rs).
__device__ __forceinline__ void scale_min_k4(int j, const unsigned char* q, int* sc, int* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// Storage formats, numbered for the templates (not ggml's type ids).
#define FMT_Q4_0 0
#define FMT_Q4_1 1
#define FMT_Q8_0 2
#define FMT_Q4_K 3
#define FMT_Q6_K 4
#define FMT_Q5_0 5
#define FMT_Q5_1 6

// Formats whose blocks carry a min (w = d * q + m), summed in an accumulator of its own.
#define FMT_HAS_MIN(FMT) ((FMT) == FMT_Q4_1 || (FMT) == FMT_Q5_1)

// Bytes of one Q5_0 / Q5_1 block (block_q5_0, block_q5_1 of ggml-common.h:
// d, [m,] qh (4), qs (16)) and the offset of its qh.
#define Q5_BLOCK_BYTES(FMT) ((FMT) == FMT_Q5_1 ? 24 : 22)
#define Q5_QH_OFFSET(FMT) ((FMT) == FMT_Q5_1 ? 4 : 2)

// The 5-bit quant (0..32) of element j (0..32) of a Q5_0 / Q5_1 block at b:
// the low nibble of qs[j] (j < 16) or the high nibble of qs[j - 16], plus
// 16 times bit j of qh read as a little-endian u32
// (kernels/src/quant/dequant.rs, q5_quants).
template <int FMT>
__device__ __forceinline__ int q5_quant(const unsigned char* b, int j) {
    const unsigned char* qh = b + Q5_QH_OFFSET(FMT);
    const unsigned char byte = qh[4 + (j & 15)];
    const int lo = j < 16 ? (byte & 0x0F) : (byte >> 4);
    return lo | (((qh[j >> 3] >> (j & 7)) & 1) << 4);
}
