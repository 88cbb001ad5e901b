/* The sparse MoE block of Qwen3.5-MoE and Qwen3-Next (spec 2.8): binding
 * the router, the experts in either layout checkpoints use (one tensor per
 * expert, or fused 3-D gate_up_proj / down_proj) and the shared expert; and
 * the float32 forward: routing once per row, each expert once over the rows
 * routed to it, then the gated shared expert. */
#include "qwen35.h"

#include <stdio.h>
#include <stdlib.h>

#include <loom/cpu_route.h>

/* ---------------------------------------------------------------- binding */

static loom_status q35_moe_linear(const loom_host *host,
                                  const loom_checkpoint *ckpt,
                                  const char *prefix, const char *lp,
                                  const char *name, int64_t rows, int64_t cols,
                                  loom_weight *out, loom_err *err)
{
    char base[256];
    snprintf(base, sizeof base, "%s%smlp.%s", prefix, lp, name);
    out->struct_size = sizeof *out;
    return host->weight_find(ckpt, base, rows, cols, out, err);
}

static size_t q35_moe_elem(loom_dtype t)
{
    return t == LOOM_DTYPE_F32                           ? 4
           : t == LOOM_DTYPE_BF16 || t == LOOM_DTYPE_F16 ? 2
                                                         : 0;
}

/* A fused expert tensor `name` that must be [E, rows, cols] of a float
 * dtype; expert e's [rows, cols] slice becomes its weight in `which`. */
static loom_status q35_moe_fused(const loom_host *host,
                                 const loom_checkpoint *ckpt, const char *name,
                                 int64_t E, int64_t rows, int64_t cols,
                                 q35_expert *ex, int which, loom_err *err)
{
    loom_tensor t = {.struct_size = sizeof t};
    loom_status st = host->tensor_find(ckpt, name, &t, err);
    if (st != LOOM_OK)
        return st;
    if (t.ndim != 3 || t.shape[0] != E || t.shape[1] != rows ||
        t.shape[2] != cols) {
        char got[96] = "[";
        for (int i = 0; i < t.ndim; i++) {
            size_t n = strlen(got);
            snprintf(got + n, sizeof got - n, "%s%lld", i ? ", " : "",
                     (long long)t.shape[i]);
        }
        size_t n = strlen(got);
        snprintf(got + n, sizeof got - n, "]");
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "tensor %s has shape %s, expected [%lld, %lld, "
                            "%lld] (num_experts, rows, columns)",
                            name, got, (long long)E, (long long)rows,
                            (long long)cols);
    }
    size_t es = q35_moe_elem(t.dtype);
    if (es == 0)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "tensor %s has dtype %d; fused experts must be "
                            "F32, F16 or BF16",
                            name, (int)t.dtype);
    size_t slice = (size_t)(rows * cols) * es;
    if (t.nbytes < slice * (size_t)E)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "tensor %s holds %llu bytes, fewer than its shape "
                            "needs",
                            name, (unsigned long long)t.nbytes);
    for (int64_t e = 0; e < E; e++) {
        const char *at = (const char *)t.data + (size_t)e * slice;
        if (which == 0) {
            /* gate rows first, then up (chunk(2) of the projection) */
            int64_t half = rows / 2;
            ex[e].gate = (loom_weight){.struct_size = sizeof(loom_weight),
                                       .dtype = t.dtype,
                                       .rows = half,
                                       .cols = cols,
                                       .data = at};
            ex[e].up = (loom_weight){.struct_size = sizeof(loom_weight),
                                     .dtype = t.dtype,
                                     .rows = half,
                                     .cols = cols,
                                     .data = at + slice / 2};
        } else {
            ex[e].down = (loom_weight){.struct_size = sizeof(loom_weight),
                                       .dtype = t.dtype,
                                       .rows = rows,
                                       .cols = cols,
                                       .data = at};
        }
    }
    return LOOM_OK;
}

loom_status q35_moe_bind(const loom_host *host, const loom_checkpoint *ckpt,
                         const char *prefix, const q35_geometry *g,
                         const char *lp, q35_layer *L, loom_err *err)
{
    int64_t H = g->hidden, F = g->moe_ffn, E = g->n_experts;
    loom_status st;
    L->moe = 1;
    if ((st = q35_moe_linear(host, ckpt, prefix, lp, "gate", E, H, &L->router,
                             err)))
        return st;
    L->experts = calloc((size_t)E, sizeof *L->experts);
    if (!L->experts)
        return loom_err_set(err, LOOM_ERR_NOMEM, "qwen35: no memory");
    char gu[256], dn[256];
    snprintf(gu, sizeof gu, "%s%smlp.experts.gate_up_proj", prefix, lp);
    snprintf(dn, sizeof dn, "%s%smlp.experts.down_proj", prefix, lp);
    size_t cur = 0;
    loom_tensor probe = {.struct_size = sizeof probe};
    if (host->tensor_next(ckpt, gu, &cur, &probe)) {
        L->layout = Q35_EXPERTS_FUSED;
        if ((st = q35_moe_fused(host, ckpt, gu, E, 2 * F, H, L->experts, 0,
                                err)) ||
            (st = q35_moe_fused(host, ckpt, dn, E, H, F, L->experts, 1, err)))
            return st;
    } else {
        L->layout = Q35_EXPERTS_PER_EXPERT;
        for (int64_t e = 0; e < E; e++) {
            q35_expert *x = &L->experts[e];
            char n[64];
            snprintf(n, sizeof n, "experts.%lld.gate_proj", (long long)e);
            if ((st = q35_moe_linear(host, ckpt, prefix, lp, n, F, H, &x->gate,
                                     err)))
                return st;
            snprintf(n, sizeof n, "experts.%lld.up_proj", (long long)e);
            if ((st = q35_moe_linear(host, ckpt, prefix, lp, n, F, H, &x->up,
                                     err)))
                return st;
            snprintf(n, sizeof n, "experts.%lld.down_proj", (long long)e);
            if ((st = q35_moe_linear(host, ckpt, prefix, lp, n, H, F, &x->down,
                                     err)))
                return st;
        }
    }
    if (g->shared_ffn == 0)
        return LOOM_OK;
    int64_t S = g->shared_ffn;
    if ((st = q35_moe_linear(host, ckpt, prefix, lp, "shared_expert.gate_proj",
                             S, H, &L->sh_gate, err)) ||
        (st = q35_moe_linear(host, ckpt, prefix, lp, "shared_expert.up_proj", S,
                             H, &L->sh_up, err)) ||
        (st = q35_moe_linear(host, ckpt, prefix, lp, "shared_expert.down_proj",
                             H, S, &L->sh_down, err)))
        return st;
    return q35_moe_linear(host, ckpt, prefix, lp, "shared_expert_gate", 1, H,
                          &L->sh_gate_w, err);
}

uint64_t q35_moe_bytes_per_token(const q35_layer *L, const q35_geometry *g)
{
    /* experts of one layer have one shape, so any top_k of them weigh the
     * same as the first top_k */
    uint64_t b = loom_weight_nbytes(&L->router);
    for (int64_t e = 0; e < g->top_k; e++)
        b += loom_weight_nbytes(&L->experts[e].gate) +
             loom_weight_nbytes(&L->experts[e].up) +
             loom_weight_nbytes(&L->experts[e].down);
    if (g->shared_ffn)
        b += loom_weight_nbytes(&L->sh_gate) + loom_weight_nbytes(&L->sh_up) +
             loom_weight_nbytes(&L->sh_down) +
             loom_weight_nbytes(&L->sh_gate_w);
    return b;
}

/* ---------------------------------------------------------------- scratch */

void q35_moe_scratch_free(q35_moe_scratch *s)
{
    free(s->prob);
    free(s->sel);
    free(s->sel_w);
    free(s->start);
    free(s->order);
    free(s->work);
    free(s->gx);
    free(s->gout);
    free(s->shg);
    memset(s, 0, sizeof *s);
}

loom_status q35_moe_reserve(q35_moe_scratch *s, const q35_geometry *g,
                            int64_t rows, loom_err *err)
{
    if (g->n_experts == 0 || rows <= s->rows)
        return LOOM_OK;
    size_t r = (size_t)rows, E = (size_t)g->n_experts, K = (size_t)g->top_k;
    size_t H = (size_t)g->hidden, f = sizeof(float), i = sizeof(int32_t);
    q35_moe_scratch n = {.rows = rows};
    n.prob = malloc(r * E * f);
    n.sel = malloc(r * K * i);
    n.sel_w = malloc(r * K * f);
    n.start = malloc((E + 1) * i);
    n.order = malloc(r * K * i);
    n.work = malloc(r * E * i);
    n.gx = malloc(r * H * f);
    n.gout = malloc(r * H * f);
    n.shg = malloc(r * f);
    if (!n.prob || !n.sel || !n.sel_w || !n.start || !n.order || !n.work ||
        !n.gx || !n.gout || !n.shg) {
        q35_moe_scratch_free(&n);
        return loom_err_set(err, LOOM_ERR_NOMEM,
                            "qwen35: no memory for the MoE routing of %lld "
                            "rows",
                            (long long)rows);
    }
    q35_moe_scratch_free(s);
    *s = n;
    return LOOM_OK;
}

/* ---------------------------------------------------------------- forward */

typedef struct q35_route_job {
    const q35_geometry *g;
    q35_moe_scratch *s;
} q35_route_job;

/* Rows [begin, end): softmax over the router logits in float32, the top_k
 * (ties to the lower id), renormalised when norm_topk_prob (always for
 * Qwen3.5-MoE). */
static void LOOM_ABI q35_route_task(void *ctx, int64_t begin, int64_t end)
{
    const q35_route_job *j = ctx;
    int64_t E = j->g->n_experts, K = j->g->top_k;
    q35_moe_scratch *s = j->s;
    for (int64_t t = begin; t < end; t++) {
        float *p = s->prob + t * E;
        int32_t *id = s->sel + t * K;
        float *w = s->sel_w + t * K;
        loom_cpu_softmax(p, E);
        loom_cpu_topk(p, E, K, id, s->work + t * E);
        float sum = 0.0f;
        for (int64_t k = 0; k < K; k++) {
            w[k] = p[id[k]];
            sum += w[k];
        }
        if (j->g->norm_topk)
            for (int64_t k = 0; k < K; k++)
                w[k] /= sum;
    }
}

/* Each expert runs once over the rows routed to it (gathered in row order),
 * and a row adds its experts in id order, as transformers accumulates them,
 * so a row's result does not depend on the other rows of the round. Then the
 * shared expert, gated by a sigmoid. */
void q35_moe_forward(loom_model *m, const q35_layer *L, const float *xn,
                     float *proj, int64_t T)
{
    const loom_host *host = m->host;
    const q35_geometry *g = &m->g;
    q35_scratch *sc = &m->s;
    q35_moe_scratch *s = &sc->moe;
    int64_t E = g->n_experts, K = g->top_k, H = g->hidden, F = g->moe_ffn;
    size_t hb = (size_t)H * sizeof(float);
    host->matmul(host, &L->router, xn, s->prob, T);
    q35_route_job job = {g, s};
    host->parallel_for(host, T, q35_route_task, &job);
    loom_cpu_group_by_expert(s->sel, T * K, E, s->start, s->order);

    memset(proj, 0, (size_t)T * hb);
    for (int64_t e = 0; e < E; e++) {
        int64_t b = s->start[e], n = s->start[e + 1] - b;
        if (n == 0)
            continue;
        const int32_t *ch = s->order + b; /* choices t * K + k */
        for (int64_t j = 0; j < n; j++)
            memcpy(s->gx + j * H, xn + (ch[j] / K) * H, hb);
        const q35_expert *x = &L->experts[e];
        host->matmul(host, &x->gate, s->gx, sc->big0, n);
        host->matmul(host, &x->up, s->gx, sc->big1, n);
        loom_cpu_swiglu_rows(host, sc->big0, sc->big1, n, F);
        host->matmul(host, &x->down, sc->big0, s->gout, n);
        for (int64_t j = 0; j < n; j++)
            loom_cpu_axpy(proj + (ch[j] / K) * H, s->sel_w[ch[j]],
                          s->gout + j * H, H);
    }
    if (g->shared_ffn == 0)
        return;
    host->matmul(host, &L->sh_gate, xn, sc->big0, T);
    host->matmul(host, &L->sh_up, xn, sc->big1, T);
    loom_cpu_swiglu_rows(host, sc->big0, sc->big1, T, g->shared_ffn);
    host->matmul(host, &L->sh_down, sc->big0, s->gout, T);
    host->matmul(host, &L->sh_gate_w, xn, s->shg, T);
    for (int64_t t = 0; t < T; t++)
        loom_cpu_axpy(proj + t * H, loom_cpu_sigmoid(s->shg[t]),
                      s->gout + t * H, H);
}
