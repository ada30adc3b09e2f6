// Causal attention for decode (one row) and verify blocks (W rows), one
// kernel: row i of the block sits at position start + i and attends to the
// cached positions 0 ..= start + i, exactly the keys the one-token chain sees
// there. A (row, head) pair is one thread block whose threads split the
// work in a fixed way, so its output depends only on the query, the cached
// rows it reads and the context length: a verify row equals the chain's
// row bit for bit.
//
// q: (rows, n_heads * head_dim); kc, vc: the layer's cache, (positions,
// n_kv_heads * head_dim); out: like q; scores: scratch, (rows * n_heads,
// max_ctx) with max_ctx >= start + rows.
//
// Per (row, head): score_t = dot8(q, k_t) / sqrt(head_dim) (the CPU's dot
// order: equal to the CPU's scores for equal inputs); m = max; e_t =
// exp(score_t - m); sum: thread t sums e_t, e_{t+128}, ... then a halving
// tree; p_t = e_t * (1 / sum); out_j = sum over t in order of p_t * v_t[j].

#define ATT_THREADS 128  // a power of two

extern "C" __global__ void __launch_bounds__(ATT_THREADS)
attention(const float* __restrict__ q, const float* __restrict__ kc, const float* __restrict__ vc,
          float* __restrict__ out, float* __restrict__ scores, int n_heads, int n_kv_heads, int head_dim,
          int start, int max_ctx) {
    __shared__ float red[ATT_THREADS];
    const int h = blockIdx.x, i = blockIdx.y, tid = threadIdx.x;
    const int n_ctx = start + i + 1;
    const int kvd = n_kv_heads * head_dim;
    const int off = (h / (n_heads / n_kv_heads)) * head_dim;
    const float* qh = q + (long long)i * n_heads * head_dim + (long long)h * head_dim;
    float* sc = scores + ((long long)i * n_heads + h) * max_ctx;
    const float scale = 1.0f / sqrtf((float)head_dim);

    float m = NEG_INF;
    for (int t = tid; t < n_ctx; t += ATT_THREADS) {
        const float s = dot8(qh, kc + (long long)t * kvd + off, head_dim) * scale;
        sc[t] = s;
        m = fmaxf(m, s);
    }
    red[tid] = m;
    __syncthreads();
    for (int o = ATT_THREADS / 2; o > 0; o >>= 1) {
        if (tid < o) red[tid] = fmaxf(red[tid], red[tid + o]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();

    float sum = 0.0f;
    for (int t = tid; t < n_ctx; t += ATT_THREADS) {
        const float e = expf(sc[t] - m);
        sc[t] = e;
        sum = sum + e;
    }
    red[tid] = sum;
    __syncthreads();
    for (int o = ATT_THREADS / 2; o > 0; o >>= 1) {
        if (tid < o) red[tid] = red[tid] + red[tid + o];
        __syncthreads();
    }
    const float inv = 1.0f / red[0];
    // Every thread reads all of sc below: make the exponentials visible.
    __syncthreads();

    float* oh = out + (long long)i * n_heads * head_dim + (long long)h * head_dim;
    for (int j = tid; j < head_dim; j += ATT_THREADS) {
        float acc = 0.0f;
        for (int t = 0; t < n_ctx; t++) acc = acc + (sc[t] * inv) * vc[(long long)t * kvd + off + j];
        oh[j] = acc;
    }
}
