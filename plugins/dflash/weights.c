/* Binds a DFlash checkpoint's tensors (fc, hidden_norm, layers.N.*, norm; no
 * embedding and no head: those are the target's) by name, checking every
 * shape against the geometry. Linear weights stay in the mapping (host->matmul
 * reads BF16/F16/F32 or MLX affine); norms are copied to float32. */
#include "dflash.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct binder {
    const loom_host *host;
    const loom_checkpoint *ckpt;
    loom_err *err;
} binder;

static loom_status linear(const binder *b, const char *base, int64_t rows,
                          int64_t cols, loom_weight *out)
{
    out->struct_size = sizeof *out;
    return b->host->weight_find(b->ckpt, base, rows, cols, out, b->err);
}

/* A 1-D float tensor `name` of n elements, copied to a new float32 array. */
static loom_status vec(const binder *b, const char *name, int64_t n,
                       float **out)
{
    loom_tensor t = {.struct_size = sizeof t};
    loom_status st = b->host->tensor_find(b->ckpt, name, &t, b->err);
    if (st != LOOM_OK)
        return st;
    if (t.ndim != 1 || t.shape[0] != n)
        return loom_err_set(b->err, LOOM_ERR_FORMAT,
                            "%s: tensor %s has %d dims (first %lld), expected "
                            "[%lld]",
                            b->host->checkpoint_path(b->ckpt), name, t.ndim,
                            (long long)(t.ndim > 0 ? t.shape[0] : 0),
                            (long long)n);
    float *f = malloc((size_t)n * sizeof *f);
    if (!f)
        return loom_err_set(b->err, LOOM_ERR_NOMEM, "%s: no memory for %s",
                            b->host->checkpoint_path(b->ckpt), name);
    st = loom_cpu_tensor_f32(&t, f, n, b->err);
    if (st != LOOM_OK) {
        free(f);
        if (b->err) {
            char msg[sizeof b->err->msg];
            memcpy(msg, b->err->msg, sizeof msg);
            loom_err_set(b->err, st, "%s: %s",
                         b->host->checkpoint_path(b->ckpt), msg);
        }
        return st;
    }
    *out = f;
    return LOOM_OK;
}

static loom_status bind_layer(const binder *b, const dflash_geometry *g,
                              int32_t l, dflash_layer *L)
{
    int64_t H = g->hidden, hd = g->head_dim;
    int64_t qw = (int64_t)g->n_heads * hd, kvw = (int64_t)g->n_kv_heads * hd;
    char n[128];
    loom_status st;
#define VEC(name, len, field)                                                  \
    snprintf(n, sizeof n, "layers.%d.%s.weight", l, name);                     \
    if ((st = vec(b, n, len, &L->field)) != LOOM_OK)                           \
    return st
#define LIN(name, rows, cols, field)                                           \
    snprintf(n, sizeof n, "layers.%d.%s", l, name);                            \
    if ((st = linear(b, n, rows, cols, &L->field)) != LOOM_OK)                 \
    return st
    VEC("input_layernorm", H, in_norm);
    VEC("post_attention_layernorm", H, post_norm);
    VEC("self_attn.q_norm", hd, q_norm);
    VEC("self_attn.k_norm", hd, k_norm);
    LIN("self_attn.q_proj", qw, H, q);
    LIN("self_attn.k_proj", kvw, H, k);
    LIN("self_attn.v_proj", kvw, H, v);
    LIN("self_attn.o_proj", H, qw, o);
    LIN("mlp.gate_proj", g->ffn, H, gate);
    LIN("mlp.up_proj", g->ffn, H, up);
    LIN("mlp.down_proj", H, g->ffn, down);
#undef VEC
#undef LIN
    return LOOM_OK;
}

loom_status dflash_weights_bind(const loom_host *host,
                                const loom_checkpoint *ckpt,
                                const dflash_geometry *g, dflash_weights *w,
                                loom_err *err)
{
    memset(w, 0, sizeof *w);
    binder b = {host, ckpt, err};
    int64_t in = (int64_t)g->n_taps * g->target_hidden;
    loom_status st = linear(&b, "fc", g->hidden, in, &w->fc);
    if (st == LOOM_OK)
        st = vec(&b, "hidden_norm.weight", g->hidden, &w->hidden_norm);
    if (st == LOOM_OK)
        st = vec(&b, "norm.weight", g->hidden, &w->norm);
    for (int32_t l = 0; st == LOOM_OK && l < g->n_layers; l++)
        st = bind_layer(&b, g, l, &w->layers[l]);
    if (st != LOOM_OK)
        dflash_weights_free(w, g);
    return st;
}

void dflash_weights_free(dflash_weights *w, const dflash_geometry *g)
{
    free(w->hidden_norm);
    free(w->norm);
    for (int32_t l = 0; l < g->n_layers; l++) {
        dflash_layer *L = &w->layers[l];
        free(L->in_norm);
        free(L->post_norm);
        free(L->q_norm);
        free(L->k_norm);
    }
    memset(w, 0, sizeof *w);
}
