/* Helpers shared by the matmul suites: see matmul_util.h. */
#include "matmul_util.h"

#include <stdlib.h>
#include <string.h>

uint32_t mm_next(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

float mm_rnd(uint32_t *s)
{
    return (float)(mm_next(s) & 0xffff) / 32768.0f - 1.0f;
}

void tw_make(tw *t, loom_dtype dt, int bits, int64_t rows, int64_t cols,
             uint32_t *s)
{
    memset(t, 0, sizeof *t);
    t->w.struct_size = sizeof t->w;
    t->w.rows = rows;
    t->w.cols = cols;
    size_t n = (size_t)(rows * cols);
    t->ref = malloc(n * sizeof(float));
    if (bits) {
        int64_t gs = 32, groups = cols / gs;
        uint32_t *q = malloc(n / 8 * sizeof(uint32_t));
        float *sc = malloc((size_t)(rows * groups) * sizeof(float));
        float *bi = malloc((size_t)(rows * groups) * sizeof(float));
        for (size_t i = 0; i < n / 8; i++)
            q[i] = mm_next(s) ^ (mm_next(s) << 16);
        for (int64_t i = 0; i < rows * groups; i++) {
            sc[i] = mm_rnd(s) * 0.1f;
            bi[i] = mm_rnd(s) * 0.5f;
        }
        t->w.dtype = LOOM_DTYPE_U32;
        t->w.bits = bits;
        t->w.group_size = (int32_t)gs;
        t->w.scale_dtype = LOOM_DTYPE_F32;
        t->w.data = t->data = q;
        t->w.scales = t->scales = sc;
        t->w.biases = t->biases = bi;
        for (int64_t r = 0; r < rows; r++)
            loom_weight_row(&t->w, r, t->ref + r * cols);
        return;
    }
    t->w.dtype = dt;
    if (dt == LOOM_DTYPE_F32) {
        float *f = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++)
            t->ref[i] = f[i] = mm_rnd(s);
        t->w.data = t->data = f;
        return;
    }
    uint16_t *h = malloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) {
        float v = mm_rnd(s);
        h[i] = dt == LOOM_DTYPE_BF16 ? loom_f32_to_bf16(v) : loom_f32_to_f16(v);
        t->ref[i] = dt == LOOM_DTYPE_BF16 ? loom_bf16_to_f32(h[i])
                                          : loom_f16_to_f32(h[i]);
    }
    t->w.data = t->data = h;
}

void tw_free(tw *t)
{
    free(t->ref);
    free(t->data);
    free(t->scales);
    free(t->biases);
}
