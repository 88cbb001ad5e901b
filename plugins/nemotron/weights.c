/* Nemotron-H weight binding: every tensor under `backbone.` and `lm_head`
 * found by name and checked against the geometry. Linear weights stay in the
 * checkpoint's mapping (any dtype host->matmul reads, quantized included);
 * the small per-channel vectors (norms, conv, A, D, dt_bias, biases) are
 * copied to float32. `mtp.*` tensors are never looked up, so they are
 * ignored. */
#include "nemotron.h"

#include <stdlib.h>

typedef struct bind_ctx {
    loom_model *m;
    loom_err *err;
} bind_ctx;

static loom_status weight(bind_ctx *b, const char *base, int64_t rows,
                          int64_t cols, loom_weight *w)
{
    w->struct_size = sizeof *w;
    return b->m->host->weight_find(b->m->ckpt, base, rows, cols, w, b->err);
}

/* A float32 copy of tensor `name`, whose shape must have n elements and,
 * when lead > 0, a first dimension of `lead`. */
static loom_status vec(bind_ctx *b, const char *name, int64_t n, int64_t lead,
                       float **out)
{
    loom_tensor t = {.struct_size = sizeof t};
    loom_status rc = b->m->host->tensor_find(b->m->ckpt, name, &t, b->err);
    if (rc != LOOM_OK)
        return rc;
    if (lead > 0 && (t.ndim < 1 || t.shape[0] != lead))
        return loom_err_set(b->err, LOOM_ERR_FORMAT,
                            "tensor %s: first dimension %lld, expected %lld",
                            name, t.ndim ? (long long)t.shape[0] : 0LL,
                            (long long)lead);
    int64_t count = 1;
    for (int32_t d = 0; d < t.ndim; d++)
        count *= t.shape[d];
    if (count != n) /* before allocating what a bad config asks for */
        return loom_err_set(b->err, LOOM_ERR_FORMAT,
                            "tensor %s: %lld elements, expected %lld", name,
                            (long long)count, (long long)n);
    float *v = malloc((size_t)n * sizeof *v);
    if (!v)
        return loom_err_set(b->err, LOOM_ERR_NOMEM, "tensor %s: out of memory",
                            name);
    rc = loom_cpu_tensor_f32(&t, v, n, b->err);
    if (rc != LOOM_OK) {
        free(v);
        return rc;
    }
    *out = v;
    return LOOM_OK;
}

static int has_tensor(bind_ctx *b, const char *name)
{
    loom_tensor t = {.struct_size = sizeof t};
    loom_err e;
    return b->m->host->tensor_find(b->m->ckpt, name, &t, &e) == LOOM_OK;
}

static loom_status bind_mamba(bind_ctx *b, int i, nem_layer *L)
{
    const nem_geometry *g = &b->m->g;
    char n[256];
    loom_status rc;
#define P(suffix)                                                              \
    (snprintf(n, sizeof n, "backbone.layers.%d.mixer." suffix, i), n)
    if ((rc =
             weight(b, P("in_proj"), g->in_proj_dim, g->hidden, &L->in_proj)) ||
        (rc = weight(b, P("out_proj"), g->hidden, g->d_inner, &L->out_proj)) ||
        (rc = vec(b, P("conv1d.weight"), (int64_t)g->conv_dim * g->conv_kernel,
                  g->conv_dim, &L->conv_w)) ||
        (rc = vec(b, P("A_log"), g->m_heads, g->m_heads, &L->A)) ||
        (rc = vec(b, P("D"), g->m_heads, g->m_heads, &L->D)) ||
        (rc = vec(b, P("dt_bias"), g->m_heads, g->m_heads, &L->dt_bias)) ||
        (rc = vec(b, P("norm.weight"), g->d_inner, g->d_inner, &L->gnorm)))
        return rc;
    if (g->use_conv_bias &&
        (rc = vec(b, P("conv1d.bias"), g->conv_dim, g->conv_dim, &L->conv_b)))
        return rc;
    if (g->use_bias &&
        ((rc = vec(b, P("in_proj.bias"), g->in_proj_dim, g->in_proj_dim,
                   &L->in_bias)) ||
         (rc = vec(b, P("out_proj.bias"), g->hidden, g->hidden, &L->out_bias))))
        return rc;
#undef P
    /* A = -exp(A_log), once, in float32 as the kernels do */
    for (int h = 0; h < g->m_heads; h++)
        L->A[h] = -loom_cpu_expf(L->A[h]);
    return LOOM_OK;
}

static loom_status bind_attention(bind_ctx *b, int i, nem_layer *L)
{
    const nem_geometry *g = &b->m->g;
    char n[256];
    int64_t q = (int64_t)g->n_q_heads * g->head_dim;
    int64_t kv = (int64_t)g->n_kv_heads * g->head_dim;
    loom_status rc;
#define P(suffix)                                                              \
    (snprintf(n, sizeof n, "backbone.layers.%d.mixer." suffix, i), n)
    if ((rc = weight(b, P("q_proj"), q, g->hidden, &L->wq)) ||
        (rc = weight(b, P("k_proj"), kv, g->hidden, &L->wk)) ||
        (rc = weight(b, P("v_proj"), kv, g->hidden, &L->wv)) ||
        (rc = weight(b, P("o_proj"), g->hidden, q, &L->wo)))
        return rc;
#undef P
    return LOOM_OK;
}

/* Expert e's weight as a view into a stacked [E, rows, cols] tensor (the
 * layout transformers keeps in memory), for checkpoints saved that way. */
static loom_status stacked_view(bind_ctx *b, const char *name, int e,
                                int64_t rows, int64_t cols, loom_weight *w)
{
    loom_tensor t = {.struct_size = sizeof t};
    loom_status rc = b->m->host->tensor_find(b->m->ckpt, name, &t, b->err);
    if (rc != LOOM_OK)
        return rc;
    size_t es = t.dtype == LOOM_DTYPE_F32                                   ? 4
                : (t.dtype == LOOM_DTYPE_BF16 || t.dtype == LOOM_DTYPE_F16) ? 2
                                                                            : 0;
    if (!es || t.ndim != 3 || t.shape[0] != b->m->g.n_experts ||
        t.shape[1] != rows || t.shape[2] != cols)
        return loom_err_set(b->err, LOOM_ERR_FORMAT,
                            "tensor %s: expected a F32/F16/BF16 [%d, %lld, "
                            "%lld] stack of experts",
                            name, b->m->g.n_experts, (long long)rows,
                            (long long)cols);
    *w = (loom_weight){
        .struct_size = sizeof *w, .dtype = t.dtype, .rows = rows, .cols = cols};
    w->data = (const char *)t.data + (size_t)e * (size_t)(rows * cols) * es;
    return LOOM_OK;
}

static loom_status bind_moe(bind_ctx *b, int i, nem_layer *L)
{
    const nem_geometry *g = &b->m->g;
    char n[256];
    loom_status rc;
#define P(...) (snprintf(n, sizeof n, __VA_ARGS__), n)
    if ((rc = weight(b, P("backbone.layers.%d.mixer.gate", i), g->n_experts,
                     g->hidden, &L->router)) ||
        (rc = vec(b,
                  P("backbone.layers.%d.mixer.gate.e_score_correction_bias", i),
                  g->n_experts, g->n_experts, &L->score_bias)) ||
        (rc = weight(b, P("backbone.layers.%d.mixer.shared_experts.up_proj", i),
                     g->shared_inter, g->hidden, &L->up)) ||
        (rc = weight(b,
                     P("backbone.layers.%d.mixer.shared_experts.down_proj", i),
                     g->hidden, g->shared_inter, &L->down)))
        return rc;
    L->ex_up = calloc((size_t)g->n_experts, sizeof *L->ex_up);
    L->ex_down = calloc((size_t)g->n_experts, sizeof *L->ex_down);
    if (!L->ex_up || !L->ex_down)
        return loom_err_set(b->err, LOOM_ERR_NOMEM, "experts: out of memory");
    int stacked =
        !has_tensor(
            b, P("backbone.layers.%d.mixer.experts.0.up_proj.weight", i)) &&
        has_tensor(b, P("backbone.layers.%d.mixer.experts.up_proj", i));
    for (int e = 0; e < g->n_experts; e++) {
        if (stacked) {
            rc = stacked_view(b,
                              P("backbone.layers.%d.mixer.experts.up_proj", i),
                              e, g->moe_inter, g->hidden, &L->ex_up[e]);
            if (rc == LOOM_OK)
                rc = stacked_view(
                    b, P("backbone.layers.%d.mixer.experts.down_proj", i), e,
                    g->hidden, g->moe_inter, &L->ex_down[e]);
        } else {
            rc = weight(b,
                        P("backbone.layers.%d.mixer.experts.%d.up_proj", i, e),
                        g->moe_inter, g->hidden, &L->ex_up[e]);
            if (rc == LOOM_OK)
                rc = weight(
                    b, P("backbone.layers.%d.mixer.experts.%d.down_proj", i, e),
                    g->hidden, g->moe_inter, &L->ex_down[e]);
        }
        if (rc != LOOM_OK)
            return rc;
    }
#undef P
    return LOOM_OK;
}

static loom_status bind_mlp(bind_ctx *b, int i, nem_layer *L)
{
    const nem_geometry *g = &b->m->g;
    char n[256];
    loom_status rc;
    snprintf(n, sizeof n, "backbone.layers.%d.mixer.up_proj", i);
    if ((rc = weight(b, n, g->mlp_inter, g->hidden, &L->up)) != LOOM_OK)
        return rc;
    snprintf(n, sizeof n, "backbone.layers.%d.mixer.down_proj", i);
    return weight(b, n, g->hidden, g->mlp_inter, &L->down);
}

loom_status nem_weights_bind(loom_model *m, loom_err *err)
{
    const nem_geometry *g = &m->g;
    bind_ctx b = {m, err};
    loom_status rc;
    m->layers = calloc((size_t)g->n_layers, sizeof *m->layers);
    if (!m->layers)
        return loom_err_set(err, LOOM_ERR_NOMEM, "layers: out of memory");

    /* older checkpoints name the table `embedding` */
    const char *emb =
        has_tensor(&b, "backbone.embeddings.weight")  ? "backbone.embeddings"
        : has_tensor(&b, "backbone.embedding.weight") ? "backbone.embedding"
                                                      : "backbone.embeddings";
    if ((rc = weight(&b, emb, g->vocab, g->hidden, &m->embed)) ||
        (rc = vec(&b, "backbone.norm_f.weight", g->hidden, g->hidden,
                  &m->norm_f)))
        goto fail;
    /* lm_head.weight when stored (transformers loads it even when the config
     * says tied); the embeddings only when tied and absent */
    if (g->tie_embeddings && !has_tensor(&b, "lm_head.weight"))
        m->lm_head = m->embed;
    else if ((rc = weight(&b, "lm_head", g->vocab, g->hidden, &m->lm_head)))
        goto fail;

    int32_t slot_m = 0, slot_a = 0;
    for (int i = 0; i < g->n_layers; i++) {
        nem_layer *L = &m->layers[i];
        char n[256];
        L->kind = g->kinds[i];
        snprintf(n, sizeof n, "backbone.layers.%d.norm.weight", i);
        if ((rc = vec(&b, n, g->hidden, g->hidden, &L->norm)))
            goto fail;
        switch (L->kind) {
        case NEM_MAMBA:
            L->slot = slot_m++;
            rc = bind_mamba(&b, i, L);
            break;
        case NEM_ATTN:
            L->slot = slot_a++;
            rc = bind_attention(&b, i, L);
            break;
        case NEM_MLP:
            rc = bind_mlp(&b, i, L);
            break;
        default:
            rc = bind_moe(&b, i, L);
            break;
        }
        if (rc != LOOM_OK)
            goto fail;
    }
    return LOOM_OK;
fail:
    nem_weights_free(m);
    return rc;
}

void nem_weights_free(loom_model *m)
{
    if (m->layers) {
        for (int i = 0; i < m->g.n_layers; i++) {
            nem_layer *L = &m->layers[i];
            free(L->norm);
            free(L->in_bias);
            free(L->out_bias);
            free(L->conv_w);
            free(L->conv_b);
            free(L->A);
            free(L->D);
            free(L->dt_bias);
            free(L->gnorm);
            free(L->score_bias);
            free(L->ex_up);
            free(L->ex_down);
        }
        free(m->layers);
        m->layers = NULL;
    }
    free(m->norm_f);
    m->norm_f = NULL;
}
