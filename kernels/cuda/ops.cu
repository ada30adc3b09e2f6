// Row kernels of the transformer block: RMSNorm, RoPE, SwiGLU, the residual
// add, the embedding gather and argmax. Each row is computed by a fixed set
// of threads in a fixed order, so a row's result does not depend on which
// other rows share the launch (the verify-block exactness contract).

#define NORM_THREADS 256  // rmsnorm: threads per row (a power of two)

// The eight-lane dot product of kernels/src/matvec/scalar.rs (dot_f32), run
// sequentially by one thread: lane i sums elements i (mod 8) of the whole
// 8-element chunks, the lanes reduce as ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)),
// then the tail is added in order. Bit-identical to the CPU for equal inputs.
__device__ __forceinline__ float dot8(const float* a, const float* b, int n) {
    float l[8];
#pragma unroll
    for (int i = 0; i < 8; i++) l[i] = 0.0f;
    const int n8 = n / 8 * 8;
    for (int c = 0; c < n8; c += 8) {
#pragma unroll
        for (int i = 0; i < 8; i++) l[i] = l[i] + a[c + i] * b[c + i];
    }
    float acc = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
    for (int i = n8; i < n; i++) acc = acc + a[i] * b[i];
    return acc;
}

// RMSNorm of row blockIdx.x: out = (x * r) * w, r = 1 / sqrt(mean(x^2) + eps).
// mean(x^2): thread t sums x[t], x[t + 256], ... in order; then a shared-memory
// halving tree. Block: NORM_THREADS threads; grid: one block per row.
extern "C" __global__ void __launch_bounds__(NORM_THREADS)
rmsnorm(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ out, int n, float eps) {
    __shared__ float part[NORM_THREADS];
    const float* xr = x + (long long)blockIdx.x * n;
    float* orow = out + (long long)blockIdx.x * n;
    float acc = 0.0f;
    for (int i = threadIdx.x; i < n; i += NORM_THREADS) acc = acc + xr[i] * xr[i];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int o = NORM_THREADS / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o) part[threadIdx.x] = part[threadIdx.x] + part[threadIdx.x + o];
        __syncthreads();
    }
    const float ms = part[0] / (float)n;
    const float r = 1.0f / sqrtf(ms + eps);
    for (int i = threadIdx.x; i < n; i += NORM_THREADS) orow[i] = (xr[i] * r) * w[i];
}

// Rotary embedding, in place, of row blockIdx.y of x ((rows, n_heads * head_dim)).
// cosv/sinv: (rows, head_dim / 2), computed on the host in f64 and rounded
// once (kernels::ops::rope_angles), so GPU and CPU rotate identically.
// adjacent = 1 pairs (2i, 2i+1) (GGUF), 0 pairs (i, i + head_dim / 2) (Hugging Face).
extern "C" __global__ void rope(float* __restrict__ x, const float* __restrict__ cosv, const float* __restrict__ sinv,
                                int n_heads, int head_dim, int adjacent) {
    const int half = head_dim / 2;
    const int row = blockIdx.y;
    const int p = blockIdx.x * blockDim.x + threadIdx.x;  // (head, i) pair index
    if (p >= n_heads * half) return;
    const int head = p / half, i = p % half;
    float* h = x + (long long)row * n_heads * head_dim + (long long)head * head_dim;
    const int a = adjacent ? 2 * i : i;
    const int b = adjacent ? 2 * i + 1 : i + half;
    const float c = cosv[(long long)row * half + i], s = sinv[(long long)row * half + i];
    const float x0 = h[a], x1 = h[b];
    h[a] = x0 * c - x1 * s;
    h[b] = x0 * s + x1 * c;
}

// SwiGLU, in place over n elements: gate = (gate / (1 + exp(-gate))) * up.
extern "C" __global__ void swiglu(float* __restrict__ gate, const float* __restrict__ up, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float g = gate[i];
    const float s = g / (1.0f + expf(-g));
    gate[i] = s * up[i];
}

// Residual add over n elements: x += y.
extern "C" __global__ void add_inplace(float* __restrict__ x, const float* __restrict__ y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] + y[i];
}

// Element e of a weight row, dequantized exactly as kernels/src/quant/dequant.rs.
template <int FMT>
__device__ __forceinline__ float dequant_elem(const unsigned char* row, int e) {
    if (FMT == FMT_Q4_0) {
        const unsigned char* b = row + (long long)(e / QK) * 18;
        const int j = e % QK;
        const int q = j < 16 ? (b[2 + j] & 0x0F) : (b[2 + j - 16] >> 4);
        return (float)(q - 8) * load_half(b);
    } else if (FMT == FMT_Q4_1) {
        const unsigned char* b = row + (long long)(e / QK) * 20;
        const int j = e % QK;
        const int q = j < 16 ? (b[4 + j] & 0x0F) : (b[4 + j - 16] >> 4);
        return (float)q * load_half(b) + load_half(b + 2);
    } else if (FMT == FMT_Q8_0) {
        const unsigned char* b = row + (long long)(e / QK) * 34;
        return (float)(signed char)b[2 + e % QK] * load_half(b);
    } else if (FMT == FMT_Q5_0) {
        const unsigned char* b = row + (long long)(e / QK) * Q5_BLOCK_BYTES(FMT);
        return (float)(q5_quant<FMT>(b, e % QK) - 16) * load_half(b);
    } else if (FMT == FMT_Q5_1) {
        const unsigned char* b = row + (long long)(e / QK) * Q5_BLOCK_BYTES(FMT);
        return (float)q5_quant<FMT>(b, e % QK) * load_half(b) + load_half(b + 2);
    } else if (FMT == FMT_Q4_K) {
        const unsigned char* b = row + (long long)(e / QK_K) * 144;
        const int k = e % QK_K, sub = k / 32, l = k % 32;
        int sc, mn;
        scale_min_k4(sub, b + 4, &sc, &mn);
        const float dl = load_half(b) * (float)sc, ml = load_half(b + 2) * (float)mn;
        const unsigned char q = b[16 + (sub >> 1) * 32 + l];
        return dl * (float)((sub & 1) ? (q >> 4) : (q & 0x0F)) - ml;
    } else {  // FMT_Q6_K
        const unsigned char* b = row + (long long)(e / QK_K) * 210;
        const int k = e % QK_K, half = k / 128, idx = k % 128, quarter = idx / 32, l = idx % 32;
        const unsigned char qlb = b[half * 64 + l + 32 * (quarter & 1)];
        const int lo = quarter < 2 ? (qlb & 0x0F) : (qlb >> 4);
        const int hi = (b[128 + half * 32 + l] >> (2 * quarter)) & 3;
        const int sc = (int)(signed char)b[192 + half * 8 + l / 16 + 2 * quarter];
        return load_half(b + 208) * (float)sc * (float)((lo | (hi << 4)) - 32);
    }
}

// Embedding gather: out row i = row tokens[i] of the (vocab, cols) table,
// dequantized. Grid: (ceil(cols / blockDim.x), n_tokens).
#define EMBED_ENTRY(NAME, FMT, ROWBYTES)                                                                    \
    extern "C" __global__ void embed_##NAME(const unsigned char* __restrict__ w, const int* __restrict__ tokens, \
                                            float* __restrict__ out, int cols) {                            \
        const int e = blockIdx.x * blockDim.x + threadIdx.x;                                               \
        if (e >= cols) return;                                                                             \
        const unsigned char* row = w + (long long)tokens[blockIdx.y] * (ROWBYTES);                         \
        out[(long long)blockIdx.y * cols + e] = dequant_elem<FMT>(row, e);                                 \
    }
EMBED_ENTRY(q4_0, FMT_Q4_0, (long long)(cols / QK) * 18)
EMBED_ENTRY(q4_1, FMT_Q4_1, (long long)(cols / QK) * 20)
EMBED_ENTRY(q8_0, FMT_Q8_0, (long long)(cols / QK) * 34)
EMBED_ENTRY(q5_0, FMT_Q5_0, (long long)(cols / QK) * 22)
EMBED_ENTRY(q5_1, FMT_Q5_1, (long long)(cols / QK) * 24)
EMBED_ENTRY(q4_k, FMT_Q4_K, (long long)(cols / QK_K) * 144)
EMBED_ENTRY(q6_k, FMT_Q6_K, (long long)(cols / QK_K) * 210)

extern "C" __global__ void embed_f32(const float* __restrict__ w, const int* __restrict__ tokens,
                                     float* __restrict__ out, int cols) {
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= cols) return;
    out[(long long)blockIdx.y * cols + e] = w[(long long)tokens[blockIdx.y] * cols + e];
}

#define ARGMAX_THREADS 1024  // a power of two

// Index of the largest of x[row * n .. row * n + n) into out[row], with the
// CPU sampler's rule (runtime/src/sampling.rs): the lowest index among equal
// maxima, NaN never chosen, 0 when nothing beats -inf. Grid: one block per row.
extern "C" __global__ void __launch_bounds__(ARGMAX_THREADS)
argmax(const float* __restrict__ x, int n, int* __restrict__ out) {
    __shared__ float bv[ARGMAX_THREADS];
    __shared__ int bi[ARGMAX_THREADS];
    const float* xr = x + (long long)blockIdx.x * n;
    float v = NEG_INF;
    int idx = 0x7fffffff;
    for (int i = threadIdx.x; i < n; i += ARGMAX_THREADS) {
        const float c = xr[i];
        if (c > v) { v = c; idx = i; }  // increasing i: a tie keeps the lower index
    }
    bv[threadIdx.x] = v;
    bi[threadIdx.x] = idx;
    __syncthreads();
    for (int o = ARGMAX_THREADS / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o) {
            const float ov = bv[threadIdx.x + o];
            const int oi = bi[threadIdx.x + o];
            if (ov > bv[threadIdx.x] || (ov == bv[threadIdx.x] && oi < bi[threadIdx.x])) {
                bv[threadIdx.x] = ov;
                bi[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = (bv[0] > NEG_INF) ? bi[0] : 0;
}
