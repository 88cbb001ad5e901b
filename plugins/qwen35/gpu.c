/* The qwen35 model's device half: the module from the embedded fatbin, its
 * kernels, every weight uploaded once into one LOOM_MEM_WEIGHTS block (BF16
 * linear weights as stored, F16/F32 ones as stored too; norms and other
 * small vectors as the float32 multipliers the CPU path uses), and the
 * activation scratch for max_rows rows. */
#include "gpu.h"

#include <loom/fatbin.h>
#include <stddef.h>
#include <stdlib.h>

loom_status q35_gpu_check(const q35_gpu *g, loom_cu_result r, const char *what,
                          loom_err *err)
{
    if (r == 0)
        return LOOM_OK;
    return loom_err_set(err, LOOM_ERR_DEVICE, "qwen35 cuda: %s: %s", what,
                        g->cu->error_name(g->cu, r));
}

/* A launch attribute letting the kernel start while the one before it
 * drains (programmatic dependent launch). */
static loom_cu_launch_attr q35_pdl_attr(void)
{
    loom_cu_launch_attr at;
    memset(&at, 0, sizeof at);
    at.id = LOOM_CU_LAUNCH_ATTR_PROGRAMMATIC_STREAM_SERIALIZATION;
    at.v.value = 1;
    return at;
}

loom_status q35_gpu_launch(const q35_gpu *g, loom_cu_function f, unsigned gx,
                           unsigned gy, unsigned bx, unsigned smem, void **args,
                           const char *what, loom_err *err)
{
    if (gx == 0 || gy == 0)
        return LOOM_OK;
    if (g->pdl) {
        loom_cu_launch_attr at = q35_pdl_attr();
        loom_cu_launch_config c = {gx,  gy, 1, bx, 1, 1, smem, g->cu->stream,
                                   &at, 1};
        return q35_gpu_check(g, g->cu->launchKernelEx(&c, f, args, NULL), what,
                             err);
    }
    return q35_gpu_check(g,
                         g->cu->launchKernel(f, gx, gy, 1, bx, 1, 1, smem,
                                             g->cu->stream, args, NULL),
                         what, err);
}

/* A launch attribute asking for clusters of n blocks along x. */
static loom_cu_launch_attr q35_cluster_attr(unsigned n)
{
    loom_cu_launch_attr at;
    memset(&at, 0, sizeof at);
    at.id = LOOM_CU_LAUNCH_ATTR_CLUSTER_DIMENSION;
    unsigned dim[3] = {n, 1, 1};
    memcpy(at.v.bytes, dim, sizeof dim);
    return at;
}

loom_status q35_gpu_launch_cluster(const q35_gpu *g, loom_cu_function f,
                                   unsigned gx, unsigned gy, unsigned bx,
                                   unsigned smem, unsigned cluster, void **args,
                                   const char *what, loom_err *err)
{
    if (gx == 0 || gy == 0)
        return LOOM_OK;
    loom_cu_launch_attr at[2] = {q35_cluster_attr(cluster), q35_pdl_attr()};
    loom_cu_launch_config c = {
        gx, gy, 1, bx, 1, 1, smem, g->cu->stream, at, g->pdl ? 2u : 1u};
    return q35_gpu_check(g, g->cu->launchKernelEx(&c, f, args, NULL), what,
                         err);
}

/* ---------------------------------------------------------------- kernels */

static loom_status q35_gpu_functions(q35_gpu *g, loom_err *err)
{
    static const char *const dt[3] = {"bf16", "f16", "f32"};
    struct {
        loom_cu_function *f;
        char name[32];
    } t[108];
    int n = 0;
    q35_gpu_fns *F = &g->fn;
    for (int i = 0; i < 3; i++) {
        t[n].f = &F->embed[i];
        snprintf(t[n++].name, 32, "q35_embed_%s", dt[i]);
        t[n].f = &F->linear[i];
        snprintf(t[n++].name, 32, "q35_linear_%s", dt[i]);
    }
    static const char *const gd[2] = {"bf16", "f16"};
    for (int i = 0; i < 2; i++)
        for (int r = 0; r < 2; r++)
            for (int u = 0; u < 2; u++) {
                t[n].f = &F->gemv[i][r][u];
                snprintf(t[n++].name, 32, "q35_gemv%d%s_%s", r ? 8 : 1,
                         u ? "_glu" : "", gd[i]);
            }
    for (int i = 0; i < 2; i++)
        for (int u = 0; u < 2; u++)
            for (int k = 0; k < 4; k++) {
                t[n].f = &F->gemvs[i][u][k];
                snprintf(t[n++].name, 32, "q35_gemvs%d%s_%s", 1 << k,
                         u ? "_glu" : "", gd[i]);
            }
    for (int r = 0; r < 2; r++)
        for (int u = 0; u < 2; u++) {
            t[n].f = &F->q4[r][u];
            snprintf(t[n++].name, 32, "q35_q4_%d%s", r ? 8 : 1,
                     u ? "_glu" : "");
        }
    for (int u = 0; u < 2; u++)
        for (int k = 0; k < Q35_MMA_TILES; k++) {
            t[n].f = &F->mma[u][k];
            snprintf(t[n++].name, 32, "q35_mma%d%s%s", q35_mma_tok(k),
                     k >= 4 ? "w" : "", u ? "_glu" : "");
        }
    for (int u = 0; u < 2; u++) {
        t[n].f = &F->mmar[u];
        snprintf(t[n++].name, 32, "q35_mma1r%s", u ? "_glu" : "");
    }
    t[n].f = &F->split;
    snprintf(t[n++].name, 32, "q35_split");
    for (int u = 0; u < 2; u++)
        for (int k = 0; k < 4; k++) {
            t[n].f = &F->q4s[u][k];
            snprintf(t[n++].name, 32, "q35_q4s%d%s", 1 << k, u ? "_glu" : "");
        }
    for (int k = 0; k < 4; k++) {
        t[n].f = &F->q4s_conv[k];
        snprintf(t[n++].name, 32, "q35_q4s%d_conv", 1 << k);
    }
    for (int u = 0; u < 2; u++) {
        t[n].f = &F->q4m[u];
        snprintf(t[n++].name, 32, "q35_q4m%s", u ? "_glu" : "");
    }
    t[n].f = &F->embed_q4;
    snprintf(t[n++].name, 32, "q35_embed_q4");
    for (int i = 0; i < 5; i++) {
        t[n].f = &F->attn_mma[i];
        snprintf(t[n++].name, 32, "q35_attn_mma%d", 16 << i);
    }
#define Q35_FN(member, nm)                                                     \
    t[n].f = &F->member;                                                       \
    snprintf(t[n++].name, 32, "%s", nm)
    Q35_FN(rmsnorm, "q35_rmsnorm");
    Q35_FN(conv, "q35_conv");
    Q35_FN(conv_restore, "q35_conv_restore");
    Q35_FN(gdn_rec, "q35_gdn_rec");
    Q35_FN(gdn_rec4, "q35_gdn_rec4");
    Q35_FN(gdn_rec4s, "q35_gdn_rec4s");
    Q35_FN(gdn_rec4cv[0][0], "q35_gdn_rec4cv1");
    Q35_FN(gdn_rec4cv[1][0], "q35_gdn_rec4cv2");
    Q35_FN(gdn_rec4cv[0][1], "q35_gdn_rec4cv1w");
    Q35_FN(gdn_rec4cv[1][1], "q35_gdn_rec4cv2w");
    Q35_FN(gdn_replay, "q35_gdn_replay");
    Q35_FN(attn_prep, "q35_attn_prep");
    Q35_FN(attention, "q35_attention");
    Q35_FN(gather, "q35_gather");
    Q35_FN(add, "q35_add");
    Q35_FN(next_split, "q35_next_split");
    Q35_FN(moe_route, "q35_moe_route");
    Q35_FN(moe_axpy, "q35_moe_axpy");
    Q35_FN(to_bf16, "q35_to_bf16");
    Q35_FN(swiglu, "q35_swiglu");
    Q35_FN(q4_bf16, "q35_q4_bf16");
    Q35_FN(conv_chunk, "q35_conv_chunk");
    Q35_FN(gdnc_prep, "q35_gdnc_prep");
    Q35_FN(gdnc_wy, "q35_gdnc_wy");
    Q35_FN(gdnc_apply, "q35_gdnc_apply");
    Q35_FN(gdnc_norm, "q35_gdnc_norm");
    Q35_FN(attn_chunk, "q35_attn_chunk");
#undef Q35_FN
    for (int i = 0; i < n; i++) {
        loom_cu_result r =
            g->cu->moduleGetFunction(t[i].f, g->module, t[i].name);
        if (r != 0)
            return loom_err_set(err, LOOM_ERR_DEVICE,
                                "qwen35 cuda: kernel %s: %s", t[i].name,
                                g->cu->error_name(g->cu, r));
    }
    return LOOM_OK;
}

/* ---------------------------------------------------------------- weights */

/* Places buffers in one device block: a first pass (dry) only counts. */
typedef struct q35_arena {
    const q35_gpu *g;
    loom_cu_ptr base;
    uint64_t off;
    int dry;
    loom_status st;
    loom_err *err;
} q35_arena;

static loom_cu_ptr q35_put(q35_arena *a, const void *src, uint64_t bytes)
{
    loom_cu_ptr p = a->base + a->off;
    a->off += (bytes + 255) / 256 * 256;
    if (a->dry || a->st != LOOM_OK || bytes == 0)
        return a->dry ? 0 : p;
    a->st = q35_gpu_check(
        a->g, a->g->cu->memcpyHtoDAsync(p, src, bytes, a->g->cu->stream),
        "uploading weights", a->err);
    return p;
}

static uint64_t q35_lin_bytes(const loom_weight *w)
{
    if (w->bits)
        return (uint64_t)w->rows * (uint64_t)w->cols * (uint64_t)w->bits / 8;
    return (uint64_t)w->rows * (uint64_t)w->cols *
           (w->dtype == LOOM_DTYPE_F32 ? 4u : 2u);
}

/* An affine weight's (scale, bias) pairs as float32 at device address p
 * (exact from BF16 and F16; each row's count padded to even, the pads 0),
 * converted through a host buffer; returns the bytes. */
static uint64_t q35_put_pairs_at(q35_arena *a, const loom_weight *w,
                                 loom_cu_ptr p)
{
    int64_t G = w->cols / w->group_size;
    int gp = q35_q4_gp((int)w->cols, w->group_size);
    uint64_t n = (uint64_t)w->rows * (uint64_t)gp * 2;
    if (a->dry || a->st != LOOM_OK)
        return n * 4;
    float *f = calloc((size_t)n, sizeof *f);
    if (!f) {
        a->st = loom_err_set(a->err, LOOM_ERR_NOMEM,
                             "qwen35 cuda: no memory for %llu group scales",
                             (unsigned long long)n / 2);
        return n * 4;
    }
    const void *src[2] = {w->scales, w->biases};
    for (int k = 0; k < 2; k++)
        for (int64_t r = 0; r < w->rows; r++)
            for (int64_t i = 0; i < G; i++) {
                int64_t at = r * G + i;
                const uint16_t *h = (const uint16_t *)src[k];
                f[(r * gp + i) * 2 + k] = w->scale_dtype == LOOM_DTYPE_F32
                                              ? ((const float *)src[k])[at]
                                          : w->scale_dtype == LOOM_DTYPE_BF16
                                              ? loom_bf16_to_f32(h[at])
                                              : loom_f16_to_f32(h[at]);
            }
    /* a pageable source is staged before the copy call returns */
    a->st = q35_gpu_check(
        a->g, a->g->cu->memcpyHtoDAsync(p, f, n * 4, a->g->cu->stream),
        "uploading weights", a->err);
    free(f);
    return n * 4;
}

static uint64_t q35_pairs_bytes(const loom_weight *w)
{
    return (uint64_t)w->rows *
           (uint64_t)q35_q4_gp((int)w->cols, w->group_size) * 8;
}

static loom_cu_ptr q35_put_pairs(q35_arena *a, const loom_weight *w)
{
    loom_cu_ptr p = a->base + a->off;
    a->off += (q35_pairs_bytes(w) + 255) / 256 * 256;
    q35_put_pairs_at(a, w, p);
    return a->dry ? 0 : p;
}

static void q35_put_lin(q35_arena *a, const loom_weight *w, q35_gpu_lin *out)
{
    memset(out, 0, sizeof *out);
    if (!w->data)
        return;
    out->p = q35_put(a, w->data, q35_lin_bytes(w));
    out->dtype = w->dtype;
    out->rows = (int32_t)w->rows;
    out->cols = (int32_t)w->cols;
    if (w->bits) {
        out->bits = w->bits;
        out->group = w->group_size;
        out->pairs = q35_put_pairs(a, w);
    }
}

/* n products of one input back to back, as one [sum rows, cols] product
 * `cat` with each out[i] a view into it (affine ones: their words, scales
 * and biases each back to back); placed one by one (cat.p = 0) when they
 * differ in type, width or quantization, or one is missing. */
static void q35_put_cat(q35_arena *a, const loom_weight *const *w, int n,
                        q35_gpu_lin *const *out, q35_gpu_lin *cat)
{
    int same = 1;
    int64_t rows = 0;
    for (int i = 0; i < n; i++) {
        same = same && w[i]->data && w[i]->bits == w[0]->bits &&
               w[i]->dtype == w[0]->dtype && w[i]->cols == w[0]->cols &&
               (!w[0]->bits || w[i]->group_size == w[0]->group_size);
        rows += w[i]->rows;
    }
    memset(cat, 0, sizeof *cat);
    if (!same || rows > INT32_MAX) {
        for (int i = 0; i < n; i++)
            q35_put_lin(a, w[i], out[i]);
        return;
    }
    uint64_t total = 0, groups = 0;
    for (int i = 0; i < n; i++) {
        total += q35_lin_bytes(w[i]);
        if (w[0]->bits)
            groups += q35_pairs_bytes(w[i]);
    }
    loom_cu_ptr p = a->base + a->off;
    a->off += (total + 255) / 256 * 256;
    loom_cu_ptr pairs = 0;
    if (w[0]->bits) {
        pairs = a->base + a->off;
        a->off += (groups + 255) / 256 * 256;
    }
    uint64_t at = 0, gat = 0;
    for (int i = 0; i < n; i++) {
        uint64_t b = q35_lin_bytes(w[i]);
        if (!a->dry && a->st == LOOM_OK)
            a->st = q35_gpu_check(a->g,
                                  a->g->cu->memcpyHtoDAsync(
                                      p + at, w[i]->data, b, a->g->cu->stream),
                                  "uploading weights", a->err);
        q35_gpu_lin *o = out[i];
        memset(o, 0, sizeof *o);
        o->p = a->dry ? 0 : p + at;
        o->dtype = w[i]->dtype;
        o->rows = (int32_t)w[i]->rows;
        o->cols = (int32_t)w[i]->cols;
        if (w[0]->bits) {
            o->bits = w[i]->bits;
            o->group = w[i]->group_size;
            o->pairs = a->dry ? 0 : pairs + gat;
            gat += q35_put_pairs_at(a, w[i], pairs + gat);
        }
        at += b;
    }
    *cat = *out[0];
    cat->p = a->dry ? 0 : p;
    cat->rows = (int32_t)rows;
    cat->pairs = a->dry || !w[0]->bits ? 0 : pairs;
}

/* n experts' weights (one of gate/up/down) back to back. */
static void q35_put_experts(q35_arena *a, const q35_expert *ex, int64_t n,
                            size_t member, q35_gpu_lin *out)
{
    const loom_weight *w0 = (const loom_weight *)((const char *)ex + member);
    uint64_t one = q35_lin_bytes(w0);
    loom_cu_ptr p = a->base + a->off;
    a->off += (one * (uint64_t)n + 255) / 256 * 256;
    for (int64_t e = 0; !a->dry && a->st == LOOM_OK && e < n; e++) {
        const loom_weight *w =
            (const loom_weight *)((const char *)&ex[e] + member);
        a->st = q35_gpu_check(a->g,
                              a->g->cu->memcpyHtoDAsync(p + (uint64_t)e * one,
                                                        w->data, one,
                                                        a->g->cu->stream),
                              "uploading experts", a->err);
    }
    out->p = a->dry ? 0 : p;
    out->dtype = w0->dtype;
    out->rows = (int32_t)w0->rows;
    out->cols = (int32_t)w0->cols;
}

static loom_cu_ptr q35_put_f(q35_arena *a, const float *v, int64_t n)
{
    return v ? q35_put(a, v, (uint64_t)n * sizeof(float)) : 0;
}

static void q35_place_weights(loom_model *m, q35_arena *a)
{
    q35_gpu *g = m->gpu;
    const q35_geometry *G = &m->g;
    q35_weights *w = &m->w;
    int64_t H = G->hidden;
    q35_put_lin(a, &w->embed, &g->embed);
    if (G->tied)
        g->lm_head = g->embed;
    else
        q35_put_lin(a, &w->lm_head, &g->lm_head);
    g->norm = q35_put_f(a, w->norm, H);
    g->inv_freq = q35_put_f(a, m->inv_freq, G->rot_dim / 2);
    for (int64_t i = 0; i < G->n_layers; i++) {
        const q35_layer *L = &w->layers[i];
        q35_gpu_layer *D = &g->layers[i];
        D->in_norm = q35_put_f(a, L->in_norm, H);
        D->post_norm = q35_put_f(a, L->post_norm, H);
        if (L->kind == 'A') {
            const loom_weight *in3[3] = {&L->q_proj, &L->k_proj, &L->v_proj};
            q35_gpu_lin *out3[3] = {&D->q, &D->k, &D->v};
            q35_put_cat(a, in3, 3, out3, &D->in);
            q35_put_lin(a, &L->o_proj, &D->o);
            D->q_norm = q35_put_f(a, L->q_norm, G->head_dim);
            D->k_norm = q35_put_f(a, L->k_norm, G->head_dim);
        } else {
            const loom_weight *in4[4] = {&L->in_qkv, &L->in_z, &L->in_b,
                                         &L->in_a};
            q35_gpu_lin *out4[4] = {&D->qkv, &D->z, &D->b, &D->a};
            q35_put_cat(a, in4, 4, out4, &D->in);
            q35_put_lin(a, &L->in_qkvz, &D->qkvz);
            q35_put_lin(a, &L->in_ba, &D->ba);
            q35_put_lin(a, &L->out_proj, &D->out);
            D->conv_w =
                q35_put_f(a, L->conv_w, q35_conv_dim(G) * G->conv_kernel);
            D->neg_a = q35_put_f(a, L->neg_a, G->lin_v_heads);
            D->dt_bias = q35_put_f(a, L->dt_bias, G->lin_v_heads);
            D->gnorm = q35_put_f(a, L->gnorm, G->lin_dv);
        }
        if (L->moe) {
            q35_put_lin(a, &L->router, &D->router);
            q35_put_experts(a, L->experts, G->n_experts,
                            offsetof(q35_expert, gate), &D->ex_gate);
            q35_put_experts(a, L->experts, G->n_experts,
                            offsetof(q35_expert, up), &D->ex_up);
            q35_put_experts(a, L->experts, G->n_experts,
                            offsetof(q35_expert, down), &D->ex_down);
            q35_put_lin(a, &L->sh_gate, &D->sh_gate);
            q35_put_lin(a, &L->sh_up, &D->sh_up);
            q35_put_lin(a, &L->sh_down, &D->sh_down);
            q35_put_lin(a, &L->sh_gate_w, &D->sh_gate_w);
        } else {
            q35_put_lin(a, &L->gate, &D->gate);
            q35_put_lin(a, &L->up, &D->up);
            q35_put_lin(a, &L->down, &D->down);
        }
    }
}

/* The tensor maps of the mma kernels' weights: boxes of 64 columns by
 * Q35_MMA_BOX rows with the 128-byte swizzle, zeros past the edges. */
static int q35_map_lin(const loom_cuda *cu, q35_gpu_lin *l)
{
    if (!l->p || l->bits || l->dtype != LOOM_DTYPE_BF16 || l->cols % 16)
        return 1;
    q35_tmap map;
    uint64_t dims[2] = {(uint64_t)l->cols, (uint64_t)l->rows};
    uint64_t strides[1] = {(uint64_t)l->cols * 2};
    uint32_t box[2] = {64, Q35_MMA_BOX}, one[2] = {1, 1};
    /* BFLOAT16, no interleave, 128-byte swizzle, 256-byte L2 promotion,
     * zero fill */
    if (cu->tensorMapEncodeTiled(&map, 9, 2, (void *)(uintptr_t)l->p, dims,
                                 strides, box, one, 0, 3, 3, 0) != 0)
        return 0;
    memcpy(l->map, &map, sizeof l->map);
    l->mapped = 1;
    return 1;
}

/* The tensor maps of q35_q4s: the words as 32-bit elements in boxes of
 * 128 by Q35_Q4S_BOX rows, the pairs as 64-bit ones in boxes of 1024 /
 * group, no swizzle, zeros past the edges. */
static int q35_map_q4(const loom_cuda *cu, q35_gpu_lin *l)
{
    if (!l->p || !l->bits)
        return 1;
    if (q35_q4s_stages(l->cols, l->group) < 2)
        return 1;
    q35_tmap qm, pm;
    uint64_t qd[2] = {(uint64_t)l->cols / 8, (uint64_t)l->rows};
    uint64_t qs[1] = {(uint64_t)l->cols / 2};
    uint64_t pd[2] = {(uint64_t)q35_q4_gp(l->cols, l->group),
                      (uint64_t)l->rows};
    uint64_t ps[1] = {pd[0] * 8};
    uint32_t qb[2] = {128, Q35_Q4S_BOX};
    uint32_t pb[2] = {(uint32_t)(1024 / l->group), Q35_Q4S_BOX};
    uint32_t one[2] = {1, 1};
    /* UINT32 / UINT64, no interleave, no swizzle, 256-byte L2 promotion,
     * zero fill */
    if (cu->tensorMapEncodeTiled(&qm, 2, 2, (void *)(uintptr_t)l->p, qd, qs, qb,
                                 one, 0, 0, 3, 0) != 0 ||
        cu->tensorMapEncodeTiled(&pm, 4, 2, (void *)(uintptr_t)l->pairs, pd, ps,
                                 pb, one, 0, 0, 3, 0) != 0)
        return 0;
    memcpy(l->map, &qm, sizeof l->map);
    memcpy(l->pmap, &pm, sizeof l->pmap);
    l->q4mapped = 1;
    return 1;
}

/* The tensor maps of q35_q4m: the words as 32-bit elements in boxes of 32
 * by 16 rows under the 128-byte swizzle, the pairs as 32-bit ones in boxes
 * of a chunk's pairs and 4 more by 16 rows, zeros past the edges. */
static int q35_map_q4m(const loom_cuda *cu, q35_gpu_lin *l)
{
    if (!l->p || !l->bits)
        return 1;
    if (q35_q4m_rows(l->cols, l->group, 1) < 1)
        return 1;
    q35_tmap qm, pm;
    uint64_t qd[2] = {(uint64_t)l->cols / 8, (uint64_t)l->rows};
    uint64_t qs[1] = {(uint64_t)l->cols / 2};
    uint64_t pd[2] = {(uint64_t)q35_q4_gp(l->cols, l->group) * 2,
                      (uint64_t)l->rows};
    uint64_t ps[1] = {pd[0] * 4};
    uint32_t qb[2] = {32, 16};
    uint32_t pb[2] = {(uint32_t)(2 * 1024 / l->group + 4), 16};
    uint32_t one[2] = {1, 1};
    /* UINT32, no interleave, 128-byte swizzle / none, 256-byte L2
     * promotion, zero fill */
    if (cu->tensorMapEncodeTiled(&qm, 2, 2, (void *)(uintptr_t)l->p, qd, qs, qb,
                                 one, 0, 3, 3, 0) != 0 ||
        cu->tensorMapEncodeTiled(&pm, 2, 2, (void *)(uintptr_t)l->pairs, pd, ps,
                                 pb, one, 0, 0, 3, 0) != 0)
        return 0;
    memcpy(l->q4m_map, &qm, sizeof l->q4m_map);
    memcpy(l->q4m_pmap, &pm, sizeof l->q4m_pmap);
    l->q4m_mapped = 1;
    return 1;
}

static int q35_map_layer(const loom_cuda *cu, q35_gpu_layer *D,
                         int (*map)(const loom_cuda *, q35_gpu_lin *))
{
    q35_gpu_lin *l[] = {&D->in,      &D->q,     &D->k,       &D->v,
                        &D->o,       &D->qkv,   &D->z,       &D->b,
                        &D->a,       &D->qkvz,  &D->ba,      &D->out,
                        &D->gate,    &D->up,    &D->down,    &D->router,
                        &D->sh_gate, &D->sh_up, &D->sh_down, &D->sh_gate_w};
    int ok = 1;
    for (size_t i = 0; i < sizeof l / sizeof *l; i++)
        ok = ok && map(cu, l[i]);
    return ok;
}

/* Every weight's map of a kind, or none: those kernels then stay off. */
static int q35_map_all(loom_model *m,
                       int (*map)(const loom_cuda *, q35_gpu_lin *))
{
    q35_gpu *g = m->gpu;
    int ok = map(g->cu, &g->embed) && map(g->cu, &g->lm_head);
    for (int64_t i = 0; ok && i < m->g.n_layers; i++)
        ok = q35_map_layer(g->cu, &g->layers[i], map);
    return ok;
}

static void q35_gpu_maps(loom_model *m)
{
    q35_gpu *g = m->gpu;
    g->mma = g->mma && q35_map_all(m, q35_map_lin);
    g->q4s = g->q4s && q35_map_all(m, q35_map_q4);
    g->q4m = g->q4m && q35_map_all(m, q35_map_q4m);
}

/* Refuses what the kernels do not take: quantized weights, shapes past the
 * kernels' register tiles. */
/* An affine weight the kernels take: 4 bits, groups of a multiple of 32
 * columns, rows a multiple of 32 long. */
static loom_status q35_gpu_affine_ok(const loom_weight *w, const char *what,
                                     loom_err *err)
{
    if (!w->data || !w->bits)
        return LOOM_OK;
    if (w->bits != 4)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "qwen35: %s: affine-%d weights are not supported "
                            "on cuda yet (affine-4 is)",
                            what, w->bits);
    if (w->group_size % 32 != 0 || w->cols % 32 != 0)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "qwen35: %s: affine-4 with group size %d over %lld "
                            "columns; cuda takes groups and rows of a "
                            "multiple of 32",
                            what, w->group_size, (long long)w->cols);
    return LOOM_OK;
}

/* Refuses what the kernels do not take: affine weights other than 4-bit
 * (and quantized experts), shapes past the kernels' register tiles. */
static loom_status q35_gpu_supported(loom_model *m, loom_err *err)
{
    const q35_geometry *G = &m->g;
    q35_weights *w = &m->w;
    loom_status st = q35_gpu_affine_ok(&w->embed, "embed_tokens", err);
    if (st == LOOM_OK)
        st = q35_gpu_affine_ok(&w->lm_head, "lm_head", err);
    for (int64_t i = 0; st == LOOM_OK && i < G->n_layers; i++) {
        const q35_layer *L = &w->layers[i];
        const loom_weight *all[] = {
            &L->q_proj,   &L->k_proj, &L->v_proj,  &L->o_proj,   &L->in_qkv,
            &L->in_z,     &L->in_b,   &L->in_a,    &L->in_qkvz,  &L->in_ba,
            &L->out_proj, &L->gate,   &L->up,      &L->down,     &L->router,
            &L->sh_gate,  &L->sh_up,  &L->sh_down, &L->sh_gate_w};
        for (size_t k = 0; st == LOOM_OK && k < sizeof all / sizeof *all; k++)
            st = q35_gpu_affine_ok(all[k], "a layer's projection", err);
        /* SwiGLU reads gate and up in one launch: both quantized or neither */
        const loom_weight *pairs[2][2] = {{&L->gate, &L->up},
                                          {&L->sh_gate, &L->sh_up}};
        for (int k = 0; st == LOOM_OK && k < 2; k++)
            if (pairs[k][0]->data && pairs[k][0]->bits != pairs[k][1]->bits)
                st = loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                                  "qwen35: layer %lld: gate_proj is %d-bit "
                                  "and up_proj %d-bit; cuda takes them alike",
                                  (long long)i, pairs[k][0]->bits,
                                  pairs[k][1]->bits);
        for (int64_t e = 0; st == LOOM_OK && L->experts && e < G->n_experts;
             e++)
            if (L->experts[e].gate.bits)
                st = loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                                  "qwen35: affine-%d experts are not "
                                  "supported on cuda yet",
                                  L->experts[e].gate.bits);
    }
    if (st != LOOM_OK)
        return st;
    if (G->head_dim > 256 || G->lin_dk > 256 ||
        (G->lin_dk + 31) / 32 * ((G->lin_dv + 31) / 32 * 32) > 512 ||
        G->conv_kernel > 8 || G->conv_kernel < 1)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "qwen35 cuda: head_dim %lld, linear key/value "
                            "head dims %lld/%lld, conv kernel %lld: the "
                            "kernels take head_dim <= 256, dk <= 256, "
                            "ceil(dk/32) * dv <= 512, conv kernel <= 8",
                            (long long)G->head_dim, (long long)G->lin_dk,
                            (long long)G->lin_dv, (long long)G->conv_kernel);
    return LOOM_OK;
}

/* ---------------------------------------------------------------- scratch */

static int64_t q35_imax(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

static loom_status q35_gpu_scratch_alloc(loom_model *m, loom_err *err)
{
    q35_gpu *g = m->gpu;
    const q35_geometry *G = &m->g;
    q35_gpu_scratch *s = &g->s;
    int64_t R = m->max_rows, H = G->hidden;
    int64_t kd = q35_key_dim(G), vd = q35_value_dim(G), cd = q35_conv_dim(G);
    int64_t big = q35_imax(2 * G->n_heads * G->head_dim, cd);
    big = q35_imax(big, 2 * kd + 2 * vd);
    /* the merged input products: qkv | z | b | a, and q | k | v */
    big = q35_imax(big, cd + vd + 2 * G->lin_v_heads);
    big = q35_imax(big, 2 * G->n_heads * G->head_dim +
                            2 * G->n_kv_heads * G->head_dim);
    big = q35_imax(big, G->ffn);
    big = q35_imax(big, q35_imax(G->moe_ffn, G->shared_ffn));
    big = q35_imax(big, H);
    big = q35_imax(big, 2 * G->lin_v_heads);
    g->big = big;
    int64_t ow = q35_imax(vd, G->n_heads * G->head_dim);
    int64_t E = G->n_experts + 1, K = G->top_k + 1;
    int64_t Hv = G->lin_v_heads;
    /* as many key splits as the context can use, one at least */
    int64_t splits = (m->max_context + Q35_ATTN_CHUNK - 1) / Q35_ATTN_CHUNK;
    splits = splits < 1                 ? 1
             : splits > Q35_ATTN_SPLITS ? Q35_ATTN_SPLITS
                                        : splits;
    g->attn_splits = (int)splits;
    /* floats of each buffer, in the order of the members */
    int64_t sizes[] = {
        R * H, R * H, R * big, R * big, R * big, R * cd, R * ow, R * vd, R * Hv,
        R * Hv, R * E, R * K, R * K, R * H, R * H, R,
        R * (int64_t)(sizeof(q35_gpu_row) / 4),
        R * (int64_t)(sizeof(q35_gpu_stream) / 4),
        R * G->n_heads * splits * (G->head_dim + 2), R * G->n_heads,
        /* prompt chunks: BF16 rows, the up product, the
         * chunkwise delta rule's per-row records */
        g->gemm ? (R * big + 1) / 2 : 0, g->gemm ? R * big : 0,
        g->gdn_chunk ? R * Hv * (G->lin_dk + G->lin_dv + Q35_WY_C + 4) : 0,
        /* decode rows' split activations: two BF16 halves a float, for
         * a product and for the next */
        g->mma ? R * (big + Q35_MMA_KC) : 0,
        g->mma ? R * (big + Q35_MMA_KC) : 0,
        /* ... for a normed product, and its rows' sums of squares */
        g->mma ? R * (H + Q35_MMA_KC) : 0, g->mma ? R * q35_ss_ld((int)H) : 0};
    loom_cu_ptr *dst[] = {
        &s->h,    &s->xn,   &s->big0, &s->big1, &s->big2, &s->conv_out,
        &s->o,    &s->z,    &s->b,    &s->a,    &s->prob, &s->sel,
        &s->wsel, &s->gout, &s->proj, &s->shg,  &s->rows, &s->streams,
        &s->part, &s->cnt,  &s->xb,   &s->gup,  &s->wy,   &s->xs,
        &s->xs2,  &s->xs3,  &s->ssp};
    int n = (int)(sizeof sizes / sizeof *sizes);
    uint64_t total = 0;
    for (int i = 0; i < n; i++)
        total += ((uint64_t)sizes[i] * 4 + 255) / 256 * 256;
    loom_status st = g->cu->alloc(g->cu, LOOM_MEM_SCRATCH, total, &s->block,
                                  (struct loom_err *)err);
    if (st != LOOM_OK)
        return st;
    s->bytes = total;
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        *dst[i] = s->block + off;
        off += ((uint64_t)sizes[i] * 4 + 255) / 256 * 256;
    }
    /* attention's counters start at zero; the split that ends a row's
     * merge puts its counter back */
    st = q35_gpu_check(g,
                       g->cu->memsetD32Async(
                           s->cnt, 0, (size_t)(R * G->n_heads), g->cu->stream),
                       "clearing attention's counters", err);
    if (st != LOOM_OK)
        return st;
    int64_t host = R * (int64_t)(sizeof *g->rows + sizeof *g->dstreams +
                                 sizeof *g->dev_of + sizeof *g->pc);
    st = m->host->account(m->host, LOOM_MEM_HOST, LOOM_MEM_SCRATCH, host, err);
    if (st != LOOM_OK)
        return st;
    g->host_bytes = host;
    g->rows = malloc((size_t)R * sizeof *g->rows);
    g->dstreams = malloc((size_t)R * sizeof *g->dstreams);
    g->dev_of = malloc((size_t)R * sizeof *g->dev_of);
    g->pc = malloc((size_t)R * sizeof *g->pc);
    if (!g->rows || !g->dstreams || !g->dev_of || !g->pc)
        return loom_err_set(err, LOOM_ERR_NOMEM, "qwen35: no memory");
    return LOOM_OK;
}

/* ---------------------------------------------------------------- open */

/* The tensor-core decode products (sm_90: clusters, bulk copies): each
 * tile's ring as deep as the block's shared memory allows, and how many
 * clusters of each size fit on the device at once (a launch takes no more,
 * so none waits for a second wave). */
static void q35_gpu_mma_open(q35_gpu *g)
{
    const loom_cuda *cu = g->cu;
    g->mma = cu->cc_major >= 9 && cu->launchKernelEx != NULL &&
             LOOM_HAS_FIELD(cu->struct_size, loom_cuda, tensorMapEncodeTiled) &&
             cu->occupancyMaxActiveClusters != NULL &&
             cu->tensorMapEncodeTiled != NULL;
    /* the fatbin's sm_90a code, which the driver picks for 9.0 alone */
    g->mma_wg = cu->cc_major == 9 && cu->cc_minor == 0;
    for (int k = 0; k < Q35_MMA_TILES && g->mma; k++) {
        /* two rings: one block per SM with a deep ring (0), and two blocks
         * per SM (a block's bulk copies are served one after another, so
         * two stream faster on products with many rows) when two stages
         * each fit (1) */
        for (int r = 0; r < 2; r++)
            g->mma_ns[r][k] =
                q35_mma_ring_stages(k, r, cu->smem_per_block_optin);
        g->mma = g->mma_ns[0][k] >= 2;
        for (int u = 0; u < 2 && g->mma; u++) {
            g->mma = cu->funcSetAttribute(
                         g->fn.mma[u][k], 8,
                         (int)q35_mma_smem(k, g->mma_ns[0][k])) == 0;
            for (int r = 0; r < 2 && g->mma; r++)
                for (int c = 0; c < 2 && g->mma; c++) {
                    unsigned smem = q35_mma_smem(k, g->mma_ns[r][k]);
                    loom_cu_launch_attr at = q35_cluster_attr(1u + c);
                    loom_cu_launch_config lc = {
                        1u + c, 1, 1, 288, 1, 1, smem, cu->stream, &at, 1};
                    int n = 0;
                    g->mma = cu->occupancyMaxActiveClusters(&n, g->fn.mma[u][k],
                                                            &lc) == 0 &&
                             n > 0;
                    g->mma_clusters[r][u][k][c] = n;
                }
        }
    }
    /* the one-row form sizes its ring per launch */
    for (int u = 0; u < 2 && g->mma; u++)
        g->mma =
            cu->funcSetAttribute(g->fn.mmar[u], 8,
                                 (int)cu->smem_per_block_optin - 1024) == 0;
}

/* Prompt chunks take tensor-core products when the host has them (no
 * cuBLASLt, or LOOM_CUBLASLT naming none: every row on loom's own kernels)
 * and the MLP weights are BF16 or affine-4 (read as a BF16 copy); products
 * of other weights keep their kernels. */
static void q35_gpu_gemm_open(loom_model *m)
{
    q35_gpu *g = m->gpu;
    const loom_cuda *cu = g->cu;
    if (!LOOM_HAS_FIELD(cu->struct_size, loom_cuda, gemm_bf16) ||
        !cu->gemm_bf16)
        return;
    int bf16 = 0;
    for (int64_t i = 0; i < m->g.n_layers; i++)
        bf16 |= g->layers[i].gate.bits == 4 ||
                (g->layers[i].gate.dtype == LOOM_DTYPE_BF16 &&
                 !g->layers[i].gate.bits);
    if (!bf16)
        return;
    loom_err err = {{0}};
    if (cu->gemm_bf16(cu, 0, 0, 0, 0, 0, 0, 0, 0.0f, &err) != LOOM_OK) {
        m->host->log(m->host, LOOM_LOG_INFO,
                     "qwen35 cuda: %s; prompt chunks use the decode kernels",
                     err.msg);
        return;
    }
    g->gemm = 1;
}

void q35_gpu_close(loom_model *m)
{
    q35_gpu *g = m->gpu;
    if (!g)
        return;
    const loom_cuda *cu = g->cu;
    cu->ctxSetCurrent(cu->context);
    /* nothing may still read what is freed */
    cu->streamSynchronize(cu->stream);
    q35_gpu_graphs_free(g);
    q35_gpu_pool_close(m);
    cu->free(cu, LOOM_MEM_WEIGHTS, g->weights, g->weights_bytes);
    cu->free(cu, LOOM_MEM_SCRATCH, g->s.block, g->s.bytes);
    cu->free(cu, LOOM_MEM_SCRATCH, g->s.logits, g->s.logits_bytes);
    cu->free(cu, LOOM_MEM_SCRATCH, g->s.taps, g->s.taps_bytes);
    cu->free(cu, LOOM_MEM_SCRATCH, g->s.maps, g->s.maps_bytes);
    cu->free(cu, LOOM_MEM_SCRATCH, g->s.wdq, g->s.wdq_bytes);
    /* giving bytes back is never refused */
    if (g->host_bytes)
        (void)m->host->account(m->host, LOOM_MEM_HOST, LOOM_MEM_SCRATCH,
                               -g->host_bytes, NULL);
    if (g->module)
        cu->moduleUnload(g->module);
    free(g->layers);
    free(g->rows);
    free(g->dstreams);
    free(g->dev_of);
    free(g->pc);
    free(g->maps);
    free(g);
    m->gpu = NULL;
}

/* The kernels of the fatbin embedded at build time. */
static loom_status q35_gpu_module(q35_gpu *g, loom_err *err)
{
#if LOOM_HAVE_CUDA
    return q35_gpu_check(g, g->cu->moduleLoadData(&g->module, LOOM_FATBIN),
                         "loading the qwen35 fatbin", err);
#else
    (void)g;
    return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                        "qwen35: built without CUDA kernels (no nvcc at "
                        "build time); use the CPU device");
#endif
}

loom_status q35_gpu_open(loom_model *m, const loom_model_options *opt,
                         loom_err *err)
{
    uint32_t osz = opt ? opt->struct_size : 0;
    int32_t max_streams = LOOM_HAS_FIELD(osz, loom_model_options, max_streams)
                              ? opt->max_streams
                              : 0;
    int no_windows =
        LOOM_HAS_FIELD(osz, loom_model_options, no_windows) && opt->no_windows;
    const loom_cuda *cu = m->host->cuda ? m->host->cuda(m->host) : NULL;
    if (!cu)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "qwen35: --device cuda, but the host has no CUDA "
                            "device");
    if (cu->struct_size < offsetof(loom_cuda, gemm_bf16))
        return loom_err_set(err, LOOM_ERR_ABI,
                            "qwen35: the host's loom.cuda/1 table is %u "
                            "bytes, older than the %zu this plugin needs",
                            cu->struct_size, sizeof(loom_cuda));
    loom_status st = q35_gpu_supported(m, err);
    if (st != LOOM_OK)
        return st;
    q35_gpu *g = calloc(1, sizeof *g);
    if (!g)
        return loom_err_set(err, LOOM_ERR_NOMEM, "qwen35: no memory");
    m->gpu = g;
    g->cu = cu;
    const q35_geometry *G = &m->g;
    g->layers = calloc((size_t)G->n_layers, sizeof *g->layers);
    if (!g->layers) {
        st = loom_err_set(err, LOOM_ERR_NOMEM, "qwen35: no memory");
        goto fail;
    }
    cu->ctxSetCurrent(cu->context);
    st = q35_gpu_module(g, err);
    if (st == LOOM_OK)
        st = q35_gpu_functions(g, err);
    if (st != LOOM_OK)
        goto fail;
    /* every kernel opens with Q35_PDL_ENTER (common.cuh) */
    g->pdl = cu->cc_major >= 9 && cu->launchKernelEx != NULL;
    /* the recurrence split over a cluster per head: 32 value columns per
     * block */
    g->gdn_rec4 = cu->cc_major >= 9 && G->lin_dv <= 32 * Q35_GDN_CTAS &&
                  G->lin_dk <= 256 && cu->launchKernelEx != NULL;
    /* q35_gdn_rec4s copies a block's 32 columns (q35_gdn_off) in and out
     * whole, in full parts of 32 rows */
    g->gdn_rec4s = g->gdn_rec4 && G->lin_dk % 32 == 0;
    g->gdn_threads =
        (unsigned)((G->lin_dk + 31) / 32 * ((G->lin_dv + 31) / 32 * 32));
    /* the chunkwise delta rule: its two kernels' tiles in shared memory,
     * its norm a warp per value head, its prep a warp per q and k head */
    int64_t dk = G->lin_dk, dv = G->lin_dv, C = Q35_WY_C;
    uint64_t wy_smem =
        (uint64_t)(2 * C * ((dk > dv ? dk : dv) + 4) + 2 * C * C + 3 * C) * 4;
    uint64_t apply_smem =
        (uint64_t)(dk * 32 + C * 32 + C * dk + dk * (C + 4) + C * C + 2 * C) *
        4;
    g->gdn_chunk =
        dk % 4 == 0 && dk <= 128 && dv % 4 == 0 && dv <= 256 &&
        2 * G->lin_k_heads <= 32 &&
        G->conv_kernel - 1 <= LOOM_PROMPT_MIN_ROWS &&
        wy_smem <= cu->smem_per_block_optin &&
        apply_smem <= cu->smem_per_block_optin &&
        cu->funcSetAttribute(g->fn.gdnc_wy, 8, (int)wy_smem) == 0 &&
        cu->funcSetAttribute(g->fn.gdnc_apply, 8, (int)apply_smem) == 0;
    g->wy_smem = (unsigned)wy_smem;
    g->apply_smem = (unsigned)apply_smem;
    /* the chunk attention: head_dim a multiple of 4 up to 256, its tiles
     * in shared memory */
    uint64_t smem = q35_attn_chunk_smem((int)G->head_dim);
    if (m->n_attn > 0 && G->head_dim <= 256 && G->head_dim % 4 == 0 &&
        smem <= cu->smem_per_block_optin &&
        cu->funcSetAttribute(g->fn.attn_chunk, 8, (int)smem) == 0) {
        g->attn_chunk = 1;
        g->attn_chunk_smem = (unsigned)smem;
    }
    /* ... on tensor cores (TF32 mma.sync, sm_80): head_dim 16 to 256, a
     * power of two */
    int hd = (int)G->head_dim, hi = -1;
    for (int i = 0; i < 5; i++)
        hi = hd == 16 << i ? i : hi;
    uint64_t msmem = q35_attn_mma_smem(hd);
    if (g->attn_chunk && hi >= 0 && cu->cc_major >= 8 &&
        msmem <= cu->smem_per_block_optin &&
        cu->funcSetAttribute(g->fn.attn_mma[hi], 8, (int)msmem) == 0) {
        g->attn_mma = g->fn.attn_mma[hi];
        g->attn_mma_smem = (unsigned)msmem;
    }
    /* one-row products through shared memory (sm_90 bulk copies) */
    g->gemvs = cu->cc_major >= 9 && Q35_GEMVS_SMEM <= cu->smem_per_block_optin;
    for (int i = 0; i < 2 && g->gemvs; i++)
        for (int u = 0; u < 2 && g->gemvs; u++)
            for (int k = 0; k < 4 && g->gemvs; k++)
                g->gemvs = cu->funcSetAttribute(g->fn.gemvs[i][u][k], 8,
                                                Q35_GEMVS_SMEM) == 0;
    /* the affine-4 one with tensor maps */
    g->q4s = g->gemvs &&
             LOOM_HAS_FIELD(cu->struct_size, loom_cuda, tensorMapEncodeTiled) &&
             cu->tensorMapEncodeTiled != NULL;
    for (int u = 0; u < 2 && g->q4s; u++)
        for (int k = 0; k < 4 && g->q4s; k++)
            g->q4s =
                cu->funcSetAttribute(g->fn.q4s[u][k], 8, Q35_GEMVS_SMEM) == 0;
    g->q4s_conv = g->q4s;
    for (int k = 0; k < 4 && g->q4s_conv; k++)
        g->q4s_conv =
            cu->funcSetAttribute(g->fn.q4s_conv[k], 8, Q35_GEMVS_SMEM) == 0;
    /* ... and the tensor-core one */
    g->q4m = g->gemvs &&
             LOOM_HAS_FIELD(cu->struct_size, loom_cuda, tensorMapEncodeTiled) &&
             cu->tensorMapEncodeTiled != NULL;
    for (int u = 0; u < 2 && g->q4m; u++)
        g->q4m = cu->funcSetAttribute(g->fn.q4m[u], 8, Q35_GEMVS_SMEM) == 0;
    q35_gpu_mma_open(g);
    /* one stream and no windows: every decode round is a one-row step,
     * which the streaming kernels run faster (the tensor-core ones pay
     * off once rows share a weight read: many streams, windows); for
     * affine-4, q35_q4s against q35_q4m on the 9B: 366 against 273 tok/s
     * at one stream, 395 against 535 at 8 */
    if (max_streams == 1 && no_windows)
        g->mma = g->q4m = 0;
    g->lay = (q35_gpu_log){(int32_t)m->log.conv, (int32_t)m->log.k,
                           (int32_t)m->log.v,    (int32_t)m->log.decay,
                           (int32_t)m->log.beta, (int32_t)m->log.size};
    q35_arena a = {g, 0, 0, 1, LOOM_OK, err};
    q35_place_weights(m, &a);
    uint64_t bytes = a.off;
    st = cu->alloc(cu, LOOM_MEM_WEIGHTS, bytes, &g->weights,
                   (struct loom_err *)err);
    if (st != LOOM_OK)
        goto fail;
    g->weights_bytes = bytes;
    a = (q35_arena){g, g->weights, 0, 0, LOOM_OK, err};
    q35_place_weights(m, &a);
    if ((st = a.st) != LOOM_OK)
        goto fail;
    q35_gpu_maps(m);
    q35_gpu_gemm_open(m);
    if ((st = q35_gpu_scratch_alloc(m, err)) != LOOM_OK)
        goto fail;
    if ((st = q35_gpu_pool_open(m, max_streams, err)) != LOOM_OK)
        goto fail;
    st = q35_gpu_check(g, cu->streamSynchronize(cu->stream),
                       "uploading weights", err);
    if (st != LOOM_OK)
        goto fail;
    m->host->log(m->host, LOOM_LOG_INFO,
                 "qwen35: %llu bytes of weights on %s; decode products on %s",
                 (unsigned long long)bytes, cu->name,
                 g->mma ? "tensor cores (q35_mma)"
                        : "the streaming kernels (q35_gemvs, q35_gemv8)");
    return LOOM_OK;
fail:
    q35_gpu_close(m);
    return st;
}
