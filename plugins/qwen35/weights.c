/* Binds the checkpoint's tensors to q35_weights by name, under whichever
 * prefix the file uses (HF text "model.", HF multimodal
 * "model.language_model.", MLX "language_model.model."), checking every shape
 * against the geometry. mtp.* and vision tensors are never looked at. Linear
 * weights (BF16/F16/F32 or MLX affine, read by host->matmul) are copied out
 * of the mapping into one block when they fit (q35_weights_resident); small
 * vectors (norms, conv taps, decay parameters) are converted to float32. */
#include "qwen35.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct q35_binder {
    const loom_host *host;
    const loom_checkpoint *ckpt;
    const char *prefix;
    loom_err *err;
} q35_binder;

static const char *const q35_prefixes[] = {
    "model.language_model.",
    "model.",
    "language_model.model.",
};

static void q35_shape_str(char *buf, size_t size, const int64_t *shape,
                          int ndim)
{
    size_t n = 0;
    n += (size_t)snprintf(buf + n, size - n, "[");
    for (int i = 0; i < ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? ", " : "",
                              (long long)shape[i]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
}

/* A linear weight prefix + name, [rows, cols]. */
static loom_status q35_linear(const q35_binder *b, const char *name,
                              int64_t rows, int64_t cols, loom_weight *out)
{
    char base[256];
    snprintf(base, sizeof base, "%s%s", b->prefix, name);
    out->struct_size = sizeof *out;
    return b->host->weight_find(b->ckpt, base, rows, cols, out, b->err);
}

/* A small float tensor prefix + name of exactly `shape`, copied to a new
 * float array; `shape2` (ndim2 > 0) is an accepted alternative layout with
 * the same memory order. */
static loom_status q35_floats(const q35_binder *b, const char *name,
                              const int64_t *shape, int ndim,
                              const int64_t *shape2, int ndim2, float **out,
                              int *which)
{
    char full[256];
    snprintf(full, sizeof full, "%s%s", b->prefix, name);
    loom_tensor t = {.struct_size = sizeof t};
    loom_status st = b->host->tensor_find(b->ckpt, full, &t, b->err);
    if (st != LOOM_OK)
        return st;
    int match = 0;
    if (t.ndim == ndim && memcmp(t.shape, shape, sizeof *shape * ndim) == 0)
        match = 1;
    else if (ndim2 > 0 && t.ndim == ndim2 &&
             memcmp(t.shape, shape2, sizeof *shape2 * ndim2) == 0)
        match = 2;
    if (!match) {
        char got[96], want[96];
        q35_shape_str(got, sizeof got, t.shape, t.ndim);
        q35_shape_str(want, sizeof want, shape, ndim);
        return loom_err_set(b->err, LOOM_ERR_FORMAT,
                            "tensor %s has shape %s, expected %s", full, got,
                            want);
    }
    if (which)
        *which = match;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    float *f = malloc((size_t)n * sizeof(float));
    if (!f)
        return loom_err_set(b->err, LOOM_ERR_NOMEM, "tensor %s: no memory",
                            full);
    st = loom_cpu_tensor_f32(&t, f, n, b->err);
    if (st != LOOM_OK) {
        free(f);
        return st;
    }
    *out = f;
    return LOOM_OK;
}

static loom_status q35_vec(const q35_binder *b, const char *name, int64_t n,
                           float **out)
{
    return q35_floats(b, name, &n, 1, NULL, 0, out, NULL);
}

/* Zero-centred norms are stored as w and used as (1 + w); MLX files carry
 * 1 + w already. Either way the model keeps the multiplier itself. */
static void q35_shift(float *w, int64_t n, int shifted)
{
    if (!shifted)
        for (int64_t i = 0; i < n; i++)
            w[i] = 1.0f + w[i];
}

static loom_status q35_bind_gdn(const q35_binder *b, const q35_geometry *g,
                                const char *lp, q35_layer *L, int *mlx_conv)
{
    char n[192];
    loom_status st;
    int64_t kd = q35_key_dim(g), vd = q35_value_dim(g), cd = q35_conv_dim(g);
    int64_t Hv = g->lin_v_heads, H = g->hidden, K = g->conv_kernel;
    if (g->variant == Q35_VARIANT_NEXT) {
        snprintf(n, sizeof n, "%slinear_attn.in_proj_qkvz", lp);
        if ((st = q35_linear(b, n, 2 * kd + 2 * vd, H, &L->in_qkvz)))
            return st;
        snprintf(n, sizeof n, "%slinear_attn.in_proj_ba", lp);
        if ((st = q35_linear(b, n, 2 * Hv, H, &L->in_ba)))
            return st;
    } else {
        snprintf(n, sizeof n, "%slinear_attn.in_proj_qkv", lp);
        if ((st = q35_linear(b, n, cd, H, &L->in_qkv)))
            return st;
        snprintf(n, sizeof n, "%slinear_attn.in_proj_z", lp);
        if ((st = q35_linear(b, n, vd, H, &L->in_z)))
            return st;
        snprintf(n, sizeof n, "%slinear_attn.in_proj_b", lp);
        if ((st = q35_linear(b, n, Hv, H, &L->in_b)))
            return st;
        snprintf(n, sizeof n, "%slinear_attn.in_proj_a", lp);
        if ((st = q35_linear(b, n, Hv, H, &L->in_a)))
            return st;
    }
    snprintf(n, sizeof n, "%slinear_attn.out_proj", lp);
    if ((st = q35_linear(b, n, H, vd, &L->out_proj)))
        return st;
    /* PyTorch [C, 1, K]; MLX [C, K, 1]: the same memory order */
    int64_t pt[3] = {cd, 1, K}, mx[3] = {cd, K, 1};
    int which = 0;
    snprintf(n, sizeof n, "%slinear_attn.conv1d.weight", lp);
    if ((st = q35_floats(b, n, pt, 3, mx, 3, &L->conv_w, &which)))
        return st;
    if (which == 2 && K > 1)
        *mlx_conv = 1;
    snprintf(n, sizeof n, "%slinear_attn.A_log", lp);
    if ((st = q35_vec(b, n, Hv, &L->neg_a)))
        return st;
    for (int64_t i = 0; i < Hv; i++)
        L->neg_a[i] = -loom_cpu_expf(L->neg_a[i]);
    snprintf(n, sizeof n, "%slinear_attn.dt_bias", lp);
    if ((st = q35_vec(b, n, Hv, &L->dt_bias)))
        return st;
    snprintf(n, sizeof n, "%slinear_attn.norm.weight", lp);
    return q35_vec(b, n, g->lin_dv, &L->gnorm);
}

static loom_status q35_bind_attn(const q35_binder *b, const q35_geometry *g,
                                 const char *lp, q35_layer *L)
{
    char n[192];
    loom_status st;
    int64_t H = g->hidden, hd = g->head_dim;
    snprintf(n, sizeof n, "%sself_attn.q_proj", lp);
    if ((st = q35_linear(b, n, 2 * g->n_heads * hd, H, &L->q_proj)))
        return st;
    snprintf(n, sizeof n, "%sself_attn.k_proj", lp);
    if ((st = q35_linear(b, n, g->n_kv_heads * hd, H, &L->k_proj)))
        return st;
    snprintf(n, sizeof n, "%sself_attn.v_proj", lp);
    if ((st = q35_linear(b, n, g->n_kv_heads * hd, H, &L->v_proj)))
        return st;
    snprintf(n, sizeof n, "%sself_attn.o_proj", lp);
    if ((st = q35_linear(b, n, H, g->n_heads * hd, &L->o_proj)))
        return st;
    snprintf(n, sizeof n, "%sself_attn.q_norm.weight", lp);
    if ((st = q35_vec(b, n, hd, &L->q_norm)))
        return st;
    snprintf(n, sizeof n, "%sself_attn.k_norm.weight", lp);
    return q35_vec(b, n, hd, &L->k_norm);
}

static loom_status q35_bind_mlp(const q35_binder *b, const q35_geometry *g,
                                int64_t i, const char *lp, q35_layer *L)
{
    char n[192];
    loom_status st;
    int64_t H = g->hidden;
    if (g->moe_layer[i])
        return q35_moe_bind(b->host, b->ckpt, b->prefix, g, lp, L, b->err);
    snprintf(n, sizeof n, "%smlp.gate_proj", lp);
    if ((st = q35_linear(b, n, g->ffn, H, &L->gate)))
        return st;
    snprintf(n, sizeof n, "%smlp.up_proj", lp);
    if ((st = q35_linear(b, n, g->ffn, H, &L->up)))
        return st;
    snprintf(n, sizeof n, "%smlp.down_proj", lp);
    return q35_linear(b, n, H, g->ffn, &L->down);
}

/* Every linear weight of the model, embed first (lm_head only when untied),
 * into list (NULL: only counted). Returns the count. */
static int64_t q35_weight_list(q35_weights *w, const q35_geometry *g,
                               loom_weight **list)
{
    int64_t n = 0;
#define Q35_ADD(x)                                                             \
    do {                                                                       \
        if ((x)->data) {                                                       \
            if (list)                                                          \
                list[n] = (x);                                                 \
            n++;                                                               \
        }                                                                      \
    } while (0)
    Q35_ADD(&w->embed);
    if (!g->tied)
        Q35_ADD(&w->lm_head);
    for (int64_t i = 0; i < g->n_layers; i++) {
        q35_layer *L = &w->layers[i];
        loom_weight *all[] = {
            &L->q_proj,   &L->k_proj, &L->v_proj,  &L->o_proj,   &L->in_qkv,
            &L->in_z,     &L->in_b,   &L->in_a,    &L->in_qkvz,  &L->in_ba,
            &L->out_proj, &L->gate,   &L->up,      &L->down,     &L->router,
            &L->sh_gate,  &L->sh_up,  &L->sh_down, &L->sh_gate_w};
        for (size_t k = 0; k < sizeof all / sizeof *all; k++)
            Q35_ADD(all[k]);
        for (int64_t e = 0; L->experts && e < g->n_experts; e++) {
            Q35_ADD(&L->experts[e].gate);
            Q35_ADD(&L->experts[e].up);
            Q35_ADD(&L->experts[e].down);
        }
    }
#undef Q35_ADD
    return n;
}

uint64_t q35_weight_bytes_per_token(q35_weights *w, const q35_geometry *g)
{
    uint64_t total = 0;
    int64_t n = q35_weight_list(w, g, NULL);
    loom_weight **list = malloc(sizeof *list * (size_t)(n ? n : 1));
    if (!list)
        return 0;
    q35_weight_list(w, g, list);
    for (int64_t i = 0; i < n; i++)
        total += loom_weight_nbytes(list[i]);
    free(list);
    /* the table gives one row per token unless it is also the head */
    if (!g->tied)
        total -= loom_weight_nbytes(&w->embed);
    /* a token runs the router, the shared expert and top_k experts of each
     * MoE layer: count those instead of the whole layer */
    for (int64_t i = 0; i < g->n_layers; i++) {
        q35_layer *L = &w->layers[i];
        if (!L->moe)
            continue;
        uint64_t all = loom_weight_nbytes(&L->router);
        for (int64_t e = 0; e < g->n_experts; e++)
            all += loom_weight_nbytes(&L->experts[e].gate) +
                   loom_weight_nbytes(&L->experts[e].up) +
                   loom_weight_nbytes(&L->experts[e].down);
        if (g->shared_ffn)
            all += loom_weight_nbytes(&L->sh_gate) +
                   loom_weight_nbytes(&L->sh_up) +
                   loom_weight_nbytes(&L->sh_down) +
                   loom_weight_nbytes(&L->sh_gate_w);
        total = total - all + q35_moe_bytes_per_token(L, g);
    }
    return total;
}

/* The most weight bytes copied into ordinary memory (see below). */
#define Q35_RESIDENT_MAX ((size_t)8 << 30)

static size_t q35_dtype_bytes(loom_dtype t)
{
    return t == LOOM_DTYPE_F32 ? 4 : 2;
}

/* Bytes of w's data, scales and biases (each rounded up to 64). */
static size_t q35_weight_bytes(const loom_weight *w, size_t *data, size_t *sb)
{
    if (w->bits == 0) {
        *data = (size_t)(w->rows * w->cols) * q35_dtype_bytes(w->dtype);
        *sb = 0;
    } else {
        *data = (size_t)w->rows * (size_t)(w->cols * w->bits / 32) * 4u;
        *sb = (size_t)w->rows * (size_t)(w->cols / w->group_size) *
              q35_dtype_bytes(w->scale_dtype);
    }
    return (*data + 63) / 64 * 64 + 2 * ((*sb + 63) / 64 * 64);
}

/* Copies every linear weight out of the file mapping into one block of
 * ordinary memory. Decode streams all weights once per token; a mapping
 * faults its pages in on the first pass (1.3 GB/s measured on the shared
 * development VM) and, when other processes press on memory, the kernel
 * drops clean page-cache pages so later passes pay again (1-2.6 GB/s
 * measured then, against 20-26 GB/s from anonymous memory; 0.4 against 2.8
 * tok/s decode on the 0.8B geometry). The copy costs the open one pass of
 * faults (7 s for 1.5 GB there) and the memory. When the block cannot be had,
 * the weights stay in the mapping: slower, not wrong. */
static void q35_weights_resident(const loom_host *host, q35_weights *w,
                                 const q35_geometry *g)
{
    int64_t n = q35_weight_list(w, g, NULL);
    loom_weight **list = malloc(sizeof *list * (size_t)n);
    if (!list)
        return;
    q35_weight_list(w, g, list);
    size_t total = 0, d, sb;
    for (int64_t i = 0; i < n; i++)
        total += q35_weight_bytes(list[i], &d, &sb);
    if (total > Q35_RESIDENT_MAX) {
        /* without knowing the machine's memory, a big model stays mapped
         * rather than risk a copy that does not fit */
        host->log(host, LOOM_LOG_INFO,
                  "qwen35: %zu bytes of weights are read from the file "
                  "mapping (copied only up to %zu)",
                  total, Q35_RESIDENT_MAX);
        free(list);
        return;
    }
    loom_err aerr = {{0}};
    if (host->account(host, LOOM_MEM_HOST, LOOM_MEM_WEIGHTS, (int64_t)total,
                      &aerr) != LOOM_OK) {
        host->log(host, LOOM_LOG_INFO,
                  "qwen35: weights are read from the file mapping (%s)",
                  aerr.msg);
        free(list);
        return;
    }
    /* the core's resident memory (huge pages where the OS has them: the
     * faults of one pass to fill it, and TLB misses to stream it, drop by
     * 512), else malloc */
    size_t alloc = 0;
    char *arena = NULL;
    if (LOOM_HAS_FIELD(host->struct_size, loom_host, alloc_resident) &&
        host->alloc_resident && host->free_resident) {
        arena = host->alloc_resident(host, total + 64);
        alloc = arena ? total + 64 : 0;
    }
    if (!arena)
        arena = malloc(total + 64);
    if (!arena) {
        (void)host->account(host, LOOM_MEM_HOST, LOOM_MEM_WEIGHTS,
                            -(int64_t)total, NULL);
        host->log(host, LOOM_LOG_WARN,
                  "qwen35: no %zu bytes to hold the weights in memory; "
                  "reading them from the file mapping",
                  total);
        free(list);
        return;
    }
    char *p = (char *)(((uintptr_t)arena + 63) & ~(uintptr_t)63);
    for (int64_t i = 0; i < n; i++) {
        loom_weight *x = list[i];
        q35_weight_bytes(x, &d, &sb);
        memcpy(p, x->data, d);
        x->data = p;
        p += (d + 63) / 64 * 64;
        if (sb) {
            memcpy(p, x->scales, sb);
            x->scales = p;
            p += (sb + 63) / 64 * 64;
            memcpy(p, x->biases, sb);
            x->biases = p;
            p += (sb + 63) / 64 * 64;
        }
    }
    if (g->tied)
        w->lm_head = w->embed;
    w->resident = arena;
    w->resident_bytes = (int64_t)total;
    w->resident_alloc = alloc;
    w->host = host;
    free(list);
}

void q35_weights_free(q35_weights *w)
{
    if (w->resident)
        (void)w->host->account(w->host, LOOM_MEM_HOST, LOOM_MEM_WEIGHTS,
                               -w->resident_bytes, NULL);
    if (w->resident_alloc)
        w->host->free_resident(w->host, w->resident, w->resident_alloc);
    else
        free(w->resident);
    if (w->layers) {
        for (int i = 0; i < Q35_MAX_LAYERS && w->layers[i].kind; i++) {
            q35_layer *L = &w->layers[i];
            free(L->in_norm);
            free(L->post_norm);
            free(L->q_norm);
            free(L->k_norm);
            free(L->conv_w);
            free(L->neg_a);
            free(L->dt_bias);
            free(L->gnorm);
            free(L->experts);
        }
    }
    free(w->layers);
    free(w->norm);
    memset(w, 0, sizeof *w);
}

loom_status q35_weights_bind(const loom_host *host, const loom_checkpoint *ckpt,
                             const q35_geometry *g, q35_weights *w,
                             loom_err *err)
{
    memset(w, 0, sizeof *w);
    q35_binder b = {host, ckpt, NULL, err};
    for (size_t i = 0; i < sizeof q35_prefixes / sizeof *q35_prefixes; i++) {
        char probe[96];
        size_t cur = 0;
        loom_tensor t = {.struct_size = sizeof t};
        snprintf(probe, sizeof probe, "%sembed_tokens.", q35_prefixes[i]);
        if (host->tensor_next(ckpt, probe, &cur, &t)) {
            b.prefix = q35_prefixes[i];
            break;
        }
    }
    if (!b.prefix)
        return loom_err_set(err, LOOM_ERR_NOT_FOUND,
                            "%s: no embed_tokens.weight under model., "
                            "model.language_model. or language_model.model.",
                            host->checkpoint_path(ckpt));
    loom_status st;
    int64_t H = g->hidden;
    /* one extra zeroed layer marks the end for q35_weights_free */
    w->layers = calloc((size_t)g->n_layers + 1, sizeof *w->layers);
    if (!w->layers)
        return loom_err_set(err, LOOM_ERR_NOMEM, "qwen35: no memory");
    if ((st = q35_linear(&b, "embed_tokens", g->vocab, H, &w->embed)))
        goto fail;
    if (g->tied) {
        w->lm_head = w->embed;
    } else {
        /* lm_head sits outside the text model's prefix */
        const char *head = strcmp(b.prefix, "language_model.model.") == 0
                               ? "language_model.lm_head"
                               : "lm_head";
        w->lm_head.struct_size = sizeof w->lm_head;
        if ((st = host->weight_find(ckpt, head, g->vocab, H, &w->lm_head, err)))
            goto fail;
    }
    int mlx_conv = 0;
    for (int64_t i = 0; i < g->n_layers; i++) {
        q35_layer *L = &w->layers[i];
        char lp[64], n[192];
        L->kind = g->kinds[i];
        snprintf(lp, sizeof lp, "layers.%lld.", (long long)i);
        snprintf(n, sizeof n, "%sinput_layernorm.weight", lp);
        if ((st = q35_vec(&b, n, H, &L->in_norm)))
            goto fail;
        snprintf(n, sizeof n, "%spost_attention_layernorm.weight", lp);
        if ((st = q35_vec(&b, n, H, &L->post_norm)))
            goto fail;
        st = L->kind == 'L' ? q35_bind_gdn(&b, g, lp, L, &mlx_conv)
                            : q35_bind_attn(&b, g, lp, L);
        if (st != LOOM_OK)
            goto fail;
        if ((st = q35_bind_mlp(&b, g, i, lp, L)))
            goto fail;
    }
    if ((st = q35_vec(&b, "norm.weight", H, &w->norm)))
        goto fail;

    /* MLX conversions shift the zero-centred norms (and transpose conv1d,
     * which is how they are recognised) */
    w->norms_shifted =
        mlx_conv || strcmp(b.prefix, "language_model.model.") == 0;
    q35_shift(w->norm, H, w->norms_shifted);
    for (int64_t i = 0; i < g->n_layers; i++) {
        q35_layer *L = &w->layers[i];
        q35_shift(L->in_norm, H, w->norms_shifted);
        q35_shift(L->post_norm, H, w->norms_shifted);
        if (L->kind == 'A') {
            q35_shift(L->q_norm, g->head_dim, w->norms_shifted);
            q35_shift(L->k_norm, g->head_dim, w->norms_shifted);
        }
    }
    q35_weights_resident(host, w, g);
    return LOOM_OK;
fail:
    q35_weights_free(w);
    return st;
}
