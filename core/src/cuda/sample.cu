// The sampling chain on the device, the host rule of core/src/lane/sample.c
// step for step: bias and penalties (sparse lists) -> temperature -> top-k ->
// top-p -> min-p -> Gumbel-max keyed by (seed, position, token) with the same
// Philox, ties to the lower id, temperature 0 = argmax; logprobs and top-n of
// the raw logits; window verification. One block per row. Built with
// --fmad=false so every float step rounds as the host's does; the
// reductions run in a fixed order, so a row's draw never depends on what
// else the launch carries.
#include <math.h>
#include <stdint.h>

#include "sample_dev.h"

#define NT     LOOM__DS_THREADS
#define NWARPS (NT / 32)

// ---------------------------------------------------------------- noise

__device__ static void philox4x32(uint32_t c[4], uint32_t k0, uint32_t k1)
{
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c[0];
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c[2];
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        uint32_t n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0;
        c[1] = lo1;
        c[2] = n2;
        c[3] = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
}

// loom_sample_gumbel: 53 bits of Philox(key = seed, ctr = (position, token))
__device__ static double gumbel(uint64_t seed, int32_t position, int32_t token)
{
    uint32_t c[4] = {(uint32_t)position, (uint32_t)token, 0, 0};
    philox4x32(c, (uint32_t)seed, (uint32_t)(seed >> 32));
    uint64_t b = (((uint64_t)c[0] << 32) | c[1]) >> 11;
    double u = ((double)b + 0.5) * (1.0 / 9007199254740992.0);
    return -log(-log(u));
}

// ---------------------------------------------------------------- keys

// A total order on (value desc, id asc) as one unsigned integer: larger is
// better. -0 counts as +0, as the host's comparisons do.
__device__ static uint64_t key_of(float v, int32_t id)
{
    uint32_t b = __float_as_uint(v == 0.0f ? 0.0f : v);
    b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    return ((uint64_t)b << 32) | (uint32_t)(0xFFFFFFFFu - (uint32_t)id);
}

__device__ static int32_t id_of(uint64_t key)
{
    return (int32_t)(0xFFFFFFFFu - (uint32_t)key);
}

__device__ static float value_of(uint64_t key)
{
    uint32_t b = (uint32_t)(key >> 32);
    b = (b & 0x80000000u) ? (b & 0x7FFFFFFFu) : ~b;
    return __uint_as_float(b);
}

__device__ static bool finite_logit(float v)
{
    return v > -INFINITY; // masked and NaN logits are never drawn
}

// ---------------------------------------------------------------- reductions

struct red_shared {
    double d[NWARPS];
    uint64_t u[NWARPS];
    float f[NWARPS];
    int i[NWARPS];
};

__device__ static double block_sum(double v, red_shared *sh)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0)
        sh->d[w] = v;
    __syncthreads();
    v = l < NWARPS ? sh->d[l] : 0.0;
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
    return v; // the same in every thread
}

__device__ static uint64_t block_max_u64(uint64_t v, red_shared *sh)
{
    for (int o = 16; o > 0; o >>= 1) {
        uint64_t x = __shfl_xor_sync(0xFFFFFFFFu, v, o);
        v = x > v ? x : v;
    }
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0)
        sh->u[w] = v;
    __syncthreads();
    v = l < NWARPS ? sh->u[l] : 0;
    for (int o = 16; o > 0; o >>= 1) {
        uint64_t x = __shfl_xor_sync(0xFFFFFFFFu, v, o);
        v = x > v ? x : v;
    }
    return v;
}

__device__ static float block_max_f(float v, red_shared *sh)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0)
        sh->f[w] = v;
    __syncthreads();
    v = l < NWARPS ? sh->f[l] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
    return v;
}

__device__ static int block_count(int v, red_shared *sh)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0)
        sh->i[w] = v;
    __syncthreads();
    v = l < NWARPS ? sh->i[l] : 0;
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
    return v;
}

// (score desc, id asc) argmax over a block; returns the id (-1: none)
__device__ static int32_t block_argmax(double s, int32_t id, red_shared *sh)
{
    for (int o = 16; o > 0; o >>= 1) {
        double s2 = __shfl_xor_sync(0xFFFFFFFFu, s, o);
        int32_t i2 = __shfl_xor_sync(0xFFFFFFFFu, id, o);
        if (i2 >= 0 && (id < 0 || s2 > s || (s2 == s && i2 < id))) {
            s = s2;
            id = i2;
        }
    }
    int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0) {
        sh->d[w] = s;
        sh->i[w] = id;
    }
    __syncthreads();
    s = l < NWARPS ? sh->d[l] : 0.0;
    id = l < NWARPS ? sh->i[l] : -1;
    for (int o = 16; o > 0; o >>= 1) {
        double s2 = __shfl_xor_sync(0xFFFFFFFFu, s, o);
        int32_t i2 = __shfl_xor_sync(0xFFFFFFFFu, id, o);
        if (i2 >= 0 && (id < 0 || s2 > s || (s2 == s && i2 < id))) {
            s = s2;
            id = i2;
        }
    }
    return id;
}

// ---------------------------------------------------------------- masks

// The k-th best key among finite logits by an 8-bit radix walk from the top
// (integer counts: exact and order-free); 0 when fewer than k are finite.
__device__ static uint64_t kth_key(const float *w, int32_t V, int32_t k,
                                   red_shared *sh, int *hist)
{
    uint64_t prefix = 0, mask = 0;
    int want = k;
    for (int shift = 56; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += NT)
            hist[b] = 0;
        __syncthreads();
        for (int32_t t = threadIdx.x; t < V; t += NT) {
            if (!finite_logit(w[t]))
                continue;
            uint64_t key = key_of(w[t], t);
            if ((key & mask) == prefix)
                atomicAdd(&hist[(key >> shift) & 255], 1);
        }
        __syncthreads();
        // one thread walks the 256 bins from the top
        if (threadIdx.x == 0) {
            int cum = 0, pick = -1;
            for (int b = 255; b >= 0; b--) {
                if (cum + hist[b] >= want) {
                    pick = b;
                    break;
                }
                cum += hist[b];
            }
            sh->i[0] = pick;
            sh->i[1] = want - cum;
        }
        __syncthreads();
        int pick = sh->i[0];
        want = sh->i[1];
        __syncthreads();
        if (pick < 0)
            return 0; // fewer than k candidates
        prefix |= (uint64_t)pick << shift;
        mask |= (uint64_t)255 << shift;
    }
    return prefix;
}

__device__ static void mask_below(float *w, int32_t V, uint64_t cut)
{
    for (int32_t t = threadIdx.x; t < V; t += NT)
        if (!(finite_logit(w[t]) && key_of(w[t], t) >= cut))
            w[t] = -INFINITY;
    __syncthreads();
}

// top-p: the best-first cut where the cumulative softmax mass first reaches
// p; the largest key whose mass at or above it reaches p * z, found bit by
// bit with deterministic block sums.
__device__ static void mask_top_p(float *w, double *mass, int32_t V, float p,
                                  red_shared *sh)
{
    float mx = -INFINITY;
    for (int32_t t = threadIdx.x; t < V; t += NT)
        if (w[t] > mx)
            mx = w[t];
    mx = block_max_f(mx, sh);
    double part = 0.0;
    for (int32_t t = threadIdx.x; t < V; t += NT) {
        double e = finite_logit(w[t]) ? exp((double)w[t] - (double)mx) : 0.0;
        mass[t] = e;
        part += e;
    }
    double z = block_sum(part, sh);
    double want = (double)p * z;
    uint64_t cut = 0;
    for (int bit = 63; bit >= 0; bit--) {
        uint64_t trial = cut | ((uint64_t)1 << bit);
        double s = 0.0;
        for (int32_t t = threadIdx.x; t < V; t += NT)
            if (mass[t] > 0.0 && key_of(w[t], t) >= trial)
                s += mass[t];
        s = block_sum(s, sh);
        if (s >= want)
            cut = trial;
    }
    __syncthreads();
    mask_below(w, V, cut);
}

__device__ static void mask_min_p(float *w, int32_t V, float min_p,
                                  red_shared *sh)
{
    float mx = -INFINITY;
    for (int32_t t = threadIdx.x; t < V; t += NT)
        if (w[t] > mx)
            mx = w[t];
    mx = block_max_f(mx, sh);
    double thr = (double)mx + log((double)min_p);
    for (int32_t t = threadIdx.x; t < V; t += NT)
        if (finite_logit(w[t]) && (double)w[t] < thr)
            w[t] = -INFINITY;
    __syncthreads();
}

// ---------------------------------------------------------------- logprobs

__device__ static void logprobs(const float *raw, int32_t V, int32_t token,
                                int32_t n, loom__ds_out *out, red_shared *sh)
{
    float mx = -INFINITY;
    for (int32_t t = threadIdx.x; t < V; t += NT)
        if (raw[t] > mx)
            mx = raw[t];
    mx = block_max_f(mx, sh);
    double part = 0.0;
    for (int32_t t = threadIdx.x; t < V; t += NT)
        part += exp((double)raw[t] - (double)mx);
    double lse = (double)mx + log(block_sum(part, sh));
    if (threadIdx.x == 0)
        out->logprob = (float)((double)raw[token] - lse);
    if (n > V)
        n = V;
    if (n > LOOM__DS_TOP)
        n = LOOM__DS_TOP;
    // the n best by repeated maxima below the last one taken
    uint64_t below = ~(uint64_t)0;
    int m = 0;
    for (int i = 0; i < n; i++) {
        uint64_t best = 0;
        for (int32_t t = threadIdx.x; t < V; t += NT) {
            if (raw[t] != raw[t])
                continue; // NaN
            uint64_t key = key_of(raw[t], t);
            if (key < below && key > best)
                best = key;
        }
        best = block_max_u64(best, sh);
        if (best == 0)
            break;
        if (threadIdx.x == 0) {
            out->top_token[i] = id_of(best);
            out->top_logprob[i] = (float)((double)value_of(best) - lse);
        }
        below = best;
        m++;
    }
    if (threadIdx.x == 0)
        out->n_top = m;
}

// ---------------------------------------------------------------- kernels

// one block cannot read the vocabulary at the memory's rate: a plain argmax
// row (loom__ds_plain_argmax) keeps each block's best in `part`
__device__ static bool plain_argmax(const loom__ds_row &r, int32_t V)
{
    return loom__ds_plain_argmax(&r, V) != 0;
}

struct part_best {
    double best;
    int32_t id, pad;
};

// Grid (rows, LOOM__DS_PARTS): block b takes the b-th slice of the row's
// logits and keeps its (value desc, id asc) best; the max of the slices'
// bests is the host's argmax whatever the slicing.
extern "C" __global__ void __launch_bounds__(NT)
    loom_sample_argmax_part(const loom__ds_row *rows, const float *logits,
                            int64_t ld, int32_t V, double *mass)
{
    __shared__ red_shared sh;
    const loom__ds_row r = rows[blockIdx.x];
    if (!plain_argmax(r, V))
        return;
    const float *raw = logits + (int64_t)r.logits_row * ld;
    int32_t per = (V + LOOM__DS_PARTS - 1) / LOOM__DS_PARTS;
    int32_t t0 = (int32_t)blockIdx.y * per;
    int32_t t1 = t0 + per < V ? t0 + per : V;
    double best = 0.0;
    int32_t id = -1;
    for (int32_t t = t0 + threadIdx.x; t < t1; t += NT)
        if (id < 0 || (double)raw[t] > best) {
            best = (double)raw[t];
            id = t;
        }
    id = block_argmax(best, id, &sh);
    // block_argmax returns the id; its value is the logit itself
    if (threadIdx.x == 0) {
        part_best *p = reinterpret_cast<part_best *>(mass + (int64_t)blockIdx.x * V);
        p[blockIdx.y].best = id >= 0 ? (double)raw[id] : 0.0;
        p[blockIdx.y].id = id;
    }
}

extern "C" __global__ void __launch_bounds__(NT)
    loom_sample_rows(const loom__ds_row *rows, const float *logits, int64_t ld,
                     int32_t V, const loom__ds_bias *bias,
                     const loom__ds_pen *pen, float *work, double *mass,
                     loom__ds_out *out)
{
    __shared__ red_shared sh;
    __shared__ int hist[256];
    const loom__ds_row r = rows[blockIdx.x];
    const float *raw = logits + (int64_t)r.logits_row * ld;
    float *w = work + (int64_t)blockIdx.x * V;
    double *ms = mass + (int64_t)blockIdx.x * V;
    loom__ds_out *o = out + blockIdx.x;

    // a plain argmax reads the raw logits (loom_sample_argmax_part)
    for (int32_t t = threadIdx.x; !plain_argmax(r, V) && t < V; t += NT)
        w[t] = raw[t];
    __syncthreads();
    // bias in list order (a token listed twice adds twice, as on the host)
    if (threadIdx.x == 0)
        for (int32_t i = 0; i < r.n_bias; i++)
            w[bias[r.bias_off + i].token] += bias[r.bias_off + i].bias;
    __syncthreads();
    int rep = r.repeat_penalty != 1.0f;
    int pf = r.presence != 0.0f || r.frequency != 0.0f;
    if (rep || pf) {
        // one entry per token: no two threads write one logit
        for (int32_t i = threadIdx.x; i < r.n_pen; i += NT) {
            loom__ds_pen e = pen[r.pen_off + i];
            float v = w[e.token];
            if (rep && e.prompt_count + e.gen_count > 0)
                v = v > 0.0f ? v / r.repeat_penalty : v * r.repeat_penalty;
            if (pf && e.gen_count > 0)
                v -= r.presence + r.frequency * (float)e.gen_count;
            w[e.token] = v;
        }
    }
    __syncthreads();

    int32_t token;
    if (plain_argmax(r, V)) {
        const part_best *p = reinterpret_cast<const part_best *>(ms);
        int k = threadIdx.x;
        token = block_argmax(k < LOOM__DS_PARTS ? p[k].best : 0.0,
                             k < LOOM__DS_PARTS ? p[k].id : -1, &sh);
    } else if (r.temperature == 0.0f) {
        double best = 0.0;
        int32_t id = -1;
        for (int32_t t = threadIdx.x; t < V; t += NT)
            if (id < 0 || (double)w[t] > best) {
                best = (double)w[t];
                id = t;
            }
        token = block_argmax(best, id, &sh);
    } else {
        if (r.temperature != 1.0f) {
            float inv = 1.0f / r.temperature;
            for (int32_t t = threadIdx.x; t < V; t += NT)
                w[t] *= inv;
            __syncthreads();
        }
        if (r.top_k > 0 && r.top_k < V) {
            uint64_t cut = kth_key(w, V, r.top_k, &sh, hist);
            if (cut)
                mask_below(w, V, cut);
        }
        if (r.top_p < 1.0f)
            mask_top_p(w, ms, V, r.top_p, &sh);
        if (r.min_p > 0.0f)
            mask_min_p(w, V, r.min_p, &sh);
        double best = 0.0;
        int32_t id = -1;
        int any = 0;
        for (int32_t t = threadIdx.x; t < V; t += NT) {
            if (!finite_logit(w[t]))
                continue;
            any = 1;
            double s = (double)w[t] + gumbel(r.seed, r.position, t);
            if (id < 0 || s > best) {
                best = s;
                id = t;
            }
        }
        token = block_argmax(best, id, &sh);
        if (!block_count(any, &sh)) {
            // all masked (or NaN): the host's argmax
            best = 0.0;
            id = -1;
            for (int32_t t = threadIdx.x; t < V; t += NT)
                if (id < 0 || (double)w[t] > best) {
                    best = (double)w[t];
                    id = t;
                }
            token = block_argmax(best, id, &sh);
        }
    }
    if (threadIdx.x == 0) {
        o->token = token;
        o->logprob = 0.0f;
        o->n_top = 0;
    }
    if (r.n_logprobs >= 0)
        logprobs(raw, V, token, r.n_logprobs, o, &sh);
}

// Per window: accept drafts while each equals the row's keyed draw, then
// the draw at the first mismatch (or after the last draft) as the bonus.
extern "C" __global__ void loom_verify_windows(const loom__ds_window *win,
                                               int32_t n_win,
                                               const int32_t *drafts,
                                               const loom__ds_out *draws,
                                               int32_t *n_emit, int32_t *emit)
{
    int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_win)
        return;
    loom__ds_window wd = win[i];
    int32_t j = 0;
    while (j < wd.n_draft &&
           drafts[wd.draft_off + j] == draws[wd.first + j].token)
        j++;
    for (int32_t k = 0; k <= j; k++)
        emit[wd.emit_off + k] = draws[wd.first + k].token;
    n_emit[i] = j + 1;
}
