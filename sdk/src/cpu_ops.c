/* The float32 CPU building blocks declared in loom/cpu_ops.h. */
#include <loom/cpu_ops.h>
#include <loom/round_plan.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The inner loops of attention and of the delta rule take the lanes of
 * cpu_lanes.h. */
#include "cpu_lanes.h"

LOOM_CPU_MULTIVERSION
float loom_cpu_dot(const float *a, const float *b, int64_t n)
{
    /* four partial sums: lets the compiler vectorise without -ffast-math */
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    int64_t i = 0;
#ifdef LOOM_CPU_LANES
    /* the four sums as the lanes of one vector */
    loom_v4 s = {0.0f, 0.0f, 0.0f, 0.0f};
    for (; i + 4 <= n; i += 4) {
        loom_v4 va, vb;
        memcpy(&va, a + i, sizeof va);
        memcpy(&vb, b + i, sizeof vb);
        s += va * vb;
    }
    s0 = s[0], s1 = s[1], s2 = s[2], s3 = s[3];
#endif
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++)
        s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

LOOM_CPU_MULTIVERSION
void loom_cpu_axpy(float *y, float a, const float *x, int64_t n)
{
    int64_t i = 0;
#ifdef LOOM_CPU_LANES
    for (; i + 8 <= n; i += 8) {
        loom_v8 vy, vx;
        memcpy(&vy, y + i, sizeof vy);
        memcpy(&vx, x + i, sizeof vx);
        vy += a * vx;
        memcpy(y + i, &vy, sizeof vy);
    }
#endif
    for (; i < n; i++)
        y[i] += a * x[i];
}

LOOM_CPU_MULTIVERSION
void loom_cpu_scale(float *x, float a, int64_t n)
{
    int64_t i = 0;
#ifdef LOOM_CPU_LANES
    for (; i + 8 <= n; i += 8) {
        loom_v8 v;
        memcpy(&v, x + i, sizeof v);
        v *= a;
        memcpy(x + i, &v, sizeof v);
    }
#endif
    for (; i < n; i++)
        x[i] *= a;
}

void loom_cpu_add(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += x[i];
}

void loom_cpu_silu_inplace(float *x, int64_t n)
{
    loom_cpu_silu_n(x, x, n);
}

void loom_cpu_gate_sigmoid(float *o, const float *gate, int64_t n)
{
    float sg[256];
    for (int64_t i0 = 0; i0 < n; i0 += 256) {
        int64_t m = n - i0 < 256 ? n - i0 : 256;
        loom_cpu_sigmoid_n(sg, gate + i0, m);
        for (int64_t i = 0; i < m; i++)
            o[i0 + i] *= sg[i];
    }
}

void loom_cpu_swiglu(float *a, const float *b, int64_t n)
{
    loom_cpu_swiglu_n(a, b, n);
}

void loom_cpu_relu2_inplace(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float r = x[i] > 0.0f ? x[i] : 0.0f;
        x[i] = r * r;
    }
}

int64_t loom_cpu_argmax(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* ---------------------------------------------------------------- norms */

/* 1 / sqrt(mean(x²) + eps), accumulated in double so long rows lose nothing */
static float inv_rms(const float *x, int64_t n, float eps)
{
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    return (float)(1.0 / sqrt((double)(float)(ss / (double)n) + eps));
}

void loom_cpu_rmsnorm(float *out, const float *x, const float *w, int64_t n,
                      float eps)
{
    float r = inv_rms(x, n, eps);
    for (int64_t i = 0; i < n; i++)
        out[i] = (x[i] * r) * (w ? w[i] : 1.0f);
}

void loom_cpu_rmsnorm_1p(float *out, const float *x, const float *w, int64_t n,
                         float eps)
{
    float r = inv_rms(x, n, eps);
    for (int64_t i = 0; i < n; i++)
        out[i] = (x[i] * r) * (1.0f + w[i]);
}

void loom_cpu_rmsnorm_gated(float *out, const float *x, const float *gate,
                            const float *w, int64_t n, float eps)
{
    float r = inv_rms(x, n, eps);
    /* the gates through the array form (the same bits as loom_cpu_silu) */
    float sg[256];
    for (int64_t i0 = 0; i0 < n; i0 += 256) {
        int64_t m = n - i0 < 256 ? n - i0 : 256;
        loom_cpu_silu_n(sg, gate + i0, m);
        for (int64_t i = 0; i < m; i++)
            out[i0 + i] = (w[i0 + i] * (x[i0 + i] * r)) * sg[i];
    }
}

void loom_cpu_l2norm(float *x, int64_t n, float eps)
{
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt((double)(float)ss + eps));
    for (int64_t i = 0; i < n; i++)
        x[i] *= r;
}

void loom_cpu_softmax(float *x, int64_t n)
{
    if (n <= 0)
        return;
    float m = x[0];
    for (int64_t i = 1; i < n; i++)
        if (x[i] > m)
            m = x[i];
    for (int64_t i = 0; i < n; i++)
        x[i] -= m;
    loom_cpu_expf_n(x, x, n);
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += x[i];
    float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++)
        x[i] *= inv;
}

/* ---------------------------------------------------------------- RoPE */

void loom_cpu_rope_inv_freq(float *inv_freq, int64_t rot_dim, double theta)
{
    for (int64_t i = 0; i < rot_dim / 2; i++) {
        /* torch: 1.0 / base ** (arange(0, dim, 2).float() / dim), float32 */
        float e = (float)(2 * i) / (float)rot_dim;
        inv_freq[i] = (float)(1.0 / (double)loom_cpu_powf((float)theta, e));
    }
}

void loom_cpu_rope_neox(float *x, int64_t n_heads, int64_t head_dim,
                        int64_t rot_dim, const float *inv_freq, int64_t pos)
{
    int64_t half = rot_dim / 2;
    for (int64_t i = 0; i < half; i++) {
        float ang = (float)pos * inv_freq[i];
        float c = loom_cpu_cosf(ang), s = loom_cpu_sinf(ang);
        for (int64_t h = 0; h < n_heads; h++) {
            float *xh = x + h * head_dim;
            float a = xh[i], b = xh[i + half];
            xh[i] = a * c - b * s;
            xh[i + half] = b * c + a * s;
        }
    }
}

void loom_cpu_rope_interleaved(float *x, int64_t n_heads, int64_t head_dim,
                               int64_t rot_dim, const float *inv_freq,
                               int64_t pos)
{
    for (int64_t i = 0; i < rot_dim / 2; i++) {
        float ang = (float)pos * inv_freq[i];
        float c = loom_cpu_cosf(ang), s = loom_cpu_sinf(ang);
        for (int64_t h = 0; h < n_heads; h++) {
            float *xh = x + h * head_dim;
            float a = xh[2 * i], b = xh[2 * i + 1];
            xh[2 * i] = a * c - b * s;
            xh[2 * i + 1] = b * c + a * s;
        }
    }
}

/* ---------------------------------------------------------------- KV store */

void loom_cpu_kv_init(loom_cpu_kv *kv, int64_t width)
{
    memset(kv, 0, sizeof *kv);
    kv->width = width;
}

loom_status loom_cpu_kv_reserve(loom_cpu_kv *kv, int64_t n_pos, loom_err *err)
{
    if (n_pos <= kv->cap)
        return LOOM_OK;
    int64_t cap = kv->cap ? kv->cap : 64;
    while (cap < n_pos)
        cap *= 2;
    if (kv->width > 0 &&
        (uint64_t)cap > SIZE_MAX / sizeof(float) / (uint64_t)kv->width)
        return loom_err_set(err, LOOM_ERR_NOMEM,
                            "KV cache: %lld positions of %lld floats do not "
                            "fit in memory",
                            (long long)cap, (long long)kv->width);
    size_t bytes = (size_t)cap * (size_t)kv->width * sizeof(float);
    /* both reallocs must succeed before the store changes */
    float *k = malloc(bytes);
    float *v = malloc(bytes);
    if (!k || !v) {
        free(k);
        free(v);
        return loom_err_set(err, LOOM_ERR_NOMEM,
                            "KV cache: cannot grow to %lld positions "
                            "(%zu bytes per side)",
                            (long long)cap, bytes);
    }
    size_t used = (size_t)kv->len * (size_t)kv->width * sizeof(float);
    if (used) {
        memcpy(k, kv->k, used);
        memcpy(v, kv->v, used);
    }
    free(kv->k);
    free(kv->v);
    kv->k = k;
    kv->v = v;
    kv->cap = cap;
    return LOOM_OK;
}

loom_status loom_cpu_kv_copy(loom_cpu_kv *dst, const loom_cpu_kv *src, int n,
                             loom_err *err)
{
    for (int i = 0; i < n; i++) {
        loom_status st = loom_cpu_kv_reserve(&dst[i], src[i].len, err);
        if (st != LOOM_OK)
            return st;
    }
    for (int i = 0; i < n; i++) {
        size_t bytes =
            (size_t)src[i].len * (size_t)src[i].width * sizeof(float);
        if (bytes > 0) {
            memcpy(dst[i].k, src[i].k, bytes);
            memcpy(dst[i].v, src[i].v, bytes);
        }
        dst[i].len = src[i].len;
    }
    return LOOM_OK;
}

void loom_cpu_kv_put(loom_cpu_kv *kv, int64_t pos, const float *k,
                     const float *v)
{
    memcpy(kv->k + pos * kv->width, k, (size_t)kv->width * sizeof(float));
    memcpy(kv->v + pos * kv->width, v, (size_t)kv->width * sizeof(float));
    if (pos + 1 > kv->len)
        kv->len = pos + 1;
}

void loom_cpu_kv_truncate(loom_cpu_kv *kv, int64_t len)
{
    if (len < kv->len)
        kv->len = len < 0 ? 0 : len;
}

void loom_cpu_kv_free(loom_cpu_kv *kv)
{
    free(kv->k);
    free(kv->v);
    loom_cpu_kv_init(kv, kv->width);
}

uint64_t loom_cpu_kv_bytes(const loom_cpu_kv *kv)
{
    return 2u * (uint64_t)kv->cap * (uint64_t)kv->width * sizeof(float);
}

/* ---------------------------------------------------------------- attention */

void loom_cpu_attend_head(float *out, const float *q, const float *k,
                          const float *v, int64_t n_ctx, int64_t stride,
                          int64_t head_dim, float scale, float *scores)
{
    for (int64_t p = 0; p < n_ctx; p++)
        scores[p] = scale * loom_cpu_dot(q, k + p * stride, head_dim);
    loom_cpu_softmax(scores, n_ctx);
    memset(out, 0, (size_t)head_dim * sizeof(float));
    for (int64_t p = 0; p < n_ctx; p++)
        loom_cpu_axpy(out, scores[p], v + p * stride, head_dim);
}

void loom_cpu_attend_head_blocked(float *out, const float *q, const float *k,
                                  const float *v, int64_t n_ctx, int64_t stride,
                                  int64_t head_dim, float scale)
{
    enum { BLOCK = 256 };
    float sc[BLOCK];
    float m = -INFINITY;
    double sum = 0.0;
    memset(out, 0, (size_t)head_dim * sizeof(float));
    for (int64_t p0 = 0; p0 < n_ctx; p0 += BLOCK) {
        int64_t nb = n_ctx - p0 < BLOCK ? n_ctx - p0 : BLOCK;
        float bm = -INFINITY;
        for (int64_t j = 0; j < nb; j++) {
            sc[j] = scale * loom_cpu_dot(q, k + (p0 + j) * stride, head_dim);
            if (sc[j] > bm)
                bm = sc[j];
        }
        if (bm > m) {
            /* rescale what was accumulated under the old maximum */
            float r = loom_cpu_expf(m - bm);
            sum *= r;
            loom_cpu_scale(out, r, head_dim);
            m = bm;
        }
        for (int64_t j = 0; j < nb; j++) {
            float e = loom_cpu_expf(sc[j] - m);
            sum += e;
            loom_cpu_axpy(out, e, v + (p0 + j) * stride, head_dim);
        }
    }
    if (n_ctx > 0)
        loom_cpu_scale(out, (float)(1.0 / sum), head_dim);
}

void loom_cpu_attend_row(float *out, const float *q, const loom_cpu_kv *kv,
                         int64_t n_ctx, int64_t n_heads, int64_t n_kv_heads,
                         int64_t head_dim, float scale, float *scores)
{
    int64_t group = n_heads / n_kv_heads;
    for (int64_t h = 0; h < n_heads; h++) {
        int64_t kvh = h / group;
        loom_cpu_attend_head(out + h * head_dim, q + h * head_dim,
                             kv->k + kvh * head_dim, kv->v + kvh * head_dim,
                             n_ctx, kv->width, head_dim, scale, scores);
    }
}

/* ---------------------------------------------------------------- conv */

void loom_cpu_conv_step(float *out, const float *x, float *tail, const float *w,
                        const float *bias, int64_t channels, int64_t kernel)
{
    loom_cpu_conv_step_range(out, x, tail, w, bias, 0, channels, channels,
                             kernel);
}

void loom_cpu_conv_step_range(float *out, const float *x, float *tail,
                              const float *w, const float *bias, int64_t c0,
                              int64_t n, int64_t channels, int64_t kernel)
{
    int64_t kt = kernel - 1;
    for (int64_t c = c0; c < c0 + n; c++) {
        const float *wc = w + c * kernel;
        float xc = x[c];
        float s = bias ? bias[c] : 0.0f;
        for (int64_t j = 0; j < kt; j++)
            s += wc[j] * tail[j * channels + c];
        s += wc[kt] * xc;
        /* shift this channel's column of the tail, then append */
        for (int64_t j = 0; j + 1 < kt; j++)
            tail[j * channels + c] = tail[(j + 1) * channels + c];
        if (kt > 0)
            tail[(kt - 1) * channels + c] = xc;
        out[c] = s;
    }
}

/* o[i] += w[i] p[i]: one tap of the conv across a block of channels. */
LOOM_CPU_MULTIVERSION
static void conv_tap(float *o, const float *w, const float *p, int64_t m)
{
    int64_t i = 0;
#ifdef LOOM_CPU_LANES
    for (; i + 8 <= m; i += 8) {
        loom_v8 vo, vw, vp;
        memcpy(&vo, o + i, sizeof vo);
        memcpy(&vw, w + i, sizeof vw);
        memcpy(&vp, p + i, sizeof vp);
        vo += vw * vp;
        memcpy(o + i, &vo, sizeof vo);
    }
#endif
    for (; i < m; i++)
        o[i] += w[i] * p[i];
}

void loom_cpu_conv_rows(float *out, int64_t ldo, const float *x, int64_t ldx,
                        float *tail, const float *w, const float *bias,
                        int64_t c0, int64_t n, int64_t channels, int64_t kernel,
                        int64_t rows)
{
    /* the weights of a block of channels transposed, tap by tap */
    enum { CB = 64, KMAX = 8 };
    int64_t kt = kernel - 1;
    if (kernel > KMAX) {
        for (int64_t t = 0; t < rows; t++)
            loom_cpu_conv_step_range(out + t * ldo, x + t * ldx, tail, w, bias,
                                     c0, n, channels, kernel);
        return;
    }
    float wt[KMAX][CB];
    for (int64_t b = c0; b < c0 + n; b += CB) {
        int64_t m = c0 + n - b < CB ? c0 + n - b : CB;
        for (int64_t j = 0; j < kernel; j++)
            for (int64_t i = 0; i < m; i++)
                wt[j][i] = w[(b + i) * kernel + j];
        for (int64_t t = 0; t < rows; t++) {
            float *o = out + t * ldo + b;
            for (int64_t i = 0; i < m; i++)
                o[i] = bias ? bias[b + i] : 0.0f;
            /* tap j reads input t - kt + j: a row of x, or of the tail
             * (the inputs before x) */
            for (int64_t j = 0; j < kernel; j++) {
                int64_t src = t - kt + j;
                const float *p = src >= 0 ? x + src * ldx + b
                                          : tail + (src + kt) * channels + b;
                conv_tap(o, wt[j], p, m);
            }
        }
    }
    /* the tail becomes the last kt inputs; row r is read from a later row
     * of the old tail (rows + r > r) before that row is written */
    for (int64_t r = 0; r < kt; r++) {
        int64_t src = rows - kt + r;
        float *d = tail + r * channels + c0;
        const float *p =
            src >= 0 ? x + src * ldx + c0 : tail + (src + kt) * channels + c0;
        memcpy(d, p, (size_t)n * sizeof(float));
    }
}

/* ---------------------------------------------------------------- tensors */

float loom_cpu_load_f32(const void *data, loom_dtype dtype, int64_t i)
{
    switch (dtype) {
    case LOOM_DTYPE_BF16:
        return loom_bf16_to_f32(((const uint16_t *)data)[i]);
    case LOOM_DTYPE_F16:
        return loom_f16_to_f32(((const uint16_t *)data)[i]);
    default:
        return ((const float *)data)[i];
    }
}

loom_status loom_cpu_tensor_f32(const loom_tensor *t, float *out, int64_t n,
                                loom_err *err)
{
    int64_t count = 1;
    for (int32_t d = 0; d < t->ndim; d++)
        count *= t->shape[d];
    if (t->dtype != LOOM_DTYPE_F32 && t->dtype != LOOM_DTYPE_F16 &&
        t->dtype != LOOM_DTYPE_BF16)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "tensor %s: dtype %d is not F32, F16 or BF16",
                            t->name ? t->name : "?", (int)t->dtype);
    if (count != n)
        return loom_err_set(
            err, LOOM_ERR_FORMAT, "tensor %s: %lld elements, expected %lld",
            t->name ? t->name : "?", (long long)count, (long long)n);
    for (int64_t i = 0; i < n; i++)
        out[i] = loom_cpu_load_f32(t->data, t->dtype, i);
    return LOOM_OK;
}

void loom_cpu_matmul_view(const loom_host *host, const loom_weight *w,
                          const float *x, int64_t n, const loom_view *y)
{
    if (n <= 0)
        return;
    if (y->strides[0] == w->rows) {
        host->matmul(host, w, x, loom_view_row_f32(y, 0), n);
        return;
    }
    for (int64_t t = 0; t < n; t++)
        host->matmul(host, w, x + t * w->cols, loom_view_row_f32(y, t), 1);
}

/* ---------------------------------------------------------------- prompts */

void loom_cpu_prompt_rows(const loom_round_plan *plan, uint8_t *prompt)
{
    memset(prompt, 0, (size_t)plan->n_rows);
    for (int32_t i = 0; i < plan->n_streams; i++) {
        const loom_plan_stream *s = &plan->streams[i];
        if (!loom_plan_prompt_chunk(s))
            continue;
        for (int32_t k = 0; k < s->count; k++)
            prompt[loom_plan_row(plan, s, k)] = 1;
    }
}

int64_t loom_cpu_chunk_first(const loom_round_plan *plan,
                             const loom_plan_stream *s)
{
    return loom_plan_prompt_chunk(s) ? loom_cpu_rows_first(plan, s) : -1;
}

int64_t loom_cpu_rows_first(const loom_round_plan *plan,
                            const loom_plan_stream *s)
{
    if (s->count <= 0)
        return -1;
    int64_t first = loom_plan_row(plan, s, 0);
    for (int32_t k = 1; k < s->count; k++)
        if (loom_plan_row(plan, s, k) != first + k)
            return -1;
    return first;
}

int loom_cpu_chunks_consecutive(const loom_round_plan *plan)
{
    for (int32_t i = 0; i < plan->n_streams; i++) {
        const loom_plan_stream *s = &plan->streams[i];
        if (loom_plan_prompt_chunk(s) && loom_cpu_chunk_first(plan, s) < 0)
            return 0;
    }
    return 1;
}

void loom_cpu_matmul_rows(const loom_host *host, const loom_weight *w,
                          const float *x, float *y, int64_t n,
                          const uint8_t *prompt)
{
    int has = LOOM_HAS_FIELD(host->struct_size, loom_host, matmul_prompt) &&
              host->matmul_prompt;
    for (int64_t t0 = 0; t0 < n;) {
        int p = prompt && prompt[t0];
        int64_t t1 = t0 + 1;
        while (t1 < n && (prompt && prompt[t1]) == p)
            t1++;
        if (p && has)
            host->matmul_prompt(host, w, x + t0 * w->cols, y + t0 * w->rows,
                                t1 - t0);
        else
            host->matmul(host, w, x + t0 * w->cols, y + t0 * w->rows, t1 - t0);
        t0 = t1;
    }
}

typedef struct rows_job {
    float *out;
    const float *x, *w;
    int64_t n;
    float eps;
} rows_job;

static void LOOM_ABI norm_task(void *ctx, int64_t r0, int64_t r1)
{
    const rows_job *j = ctx;
    for (int64_t r = r0; r < r1; r++)
        loom_cpu_rmsnorm(j->out + r * j->n, j->x + r * j->n, j->w, j->n,
                         j->eps);
}

static void LOOM_ABI add_task(void *ctx, int64_t r0, int64_t r1)
{
    const rows_job *j = ctx;
    loom_cpu_add(j->out + r0 * j->n, j->x + r0 * j->n, (r1 - r0) * j->n);
}

/* Rows below this run on the caller: a decode round is not worth a wake-up. */
#define ROWS_PARALLEL 8

/* fn over the rows: on the pool from ROWS_PARALLEL rows, else here. */
static void rows_run(const loom_host *host, int64_t rows, loom_range_fn fn,
                     rows_job *j)
{
    if (rows < ROWS_PARALLEL)
        fn(j, 0, rows);
    else
        host->parallel_for(host, rows, fn, j);
}

void loom_cpu_rmsnorm_rows(const loom_host *host, float *out, const float *x,
                           const float *w, int64_t rows, int64_t n, float eps)
{
    rows_job j = {out, x, w, n, eps};
    rows_run(host, rows, norm_task, &j);
}

void loom_cpu_add_rows(const loom_host *host, float *y, const float *x,
                       int64_t rows, int64_t n)
{
    rows_job j = {y, x, NULL, n, 0.0f};
    rows_run(host, rows, add_task, &j);
}

static void LOOM_ABI swiglu_task(void *ctx, int64_t r0, int64_t r1)
{
    const rows_job *j = ctx;
    loom_cpu_swiglu(j->out + r0 * j->n, j->x + r0 * j->n, (r1 - r0) * j->n);
}

static void LOOM_ABI relu2_task(void *ctx, int64_t r0, int64_t r1)
{
    const rows_job *j = ctx;
    loom_cpu_relu2_inplace(j->out + r0 * j->n, (r1 - r0) * j->n);
}

void loom_cpu_swiglu_rows(const loom_host *host, float *a, const float *b,
                          int64_t rows, int64_t n)
{
    rows_job j = {a, b, NULL, n, 0.0f};
    rows_run(host, rows, swiglu_task, &j);
}

void loom_cpu_relu2_rows(const loom_host *host, float *x, int64_t rows,
                         int64_t n)
{
    rows_job j = {x, NULL, NULL, n, 0.0f};
    rows_run(host, rows, relu2_task, &j);
}
