/* Checkpoints the suites derive from the fixtures: qwen35-tiny rewritten as
 * a Qwen3-Next checkpoint, and MLX affine quantization of BF16 weights. */
#include "variants.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>
#include <loom/plugin.h>

#include "st_write.h"
#include "testmodel.h"
#include "testutil.h"

/* Halves every BF16 value (exact: an exponent step) into a new buffer. */
static uint16_t *bf16_half(const st_entry *e)
{
    size_t n = e->nbytes / 2;
    uint16_t *o = malloc(e->nbytes);
    const uint16_t *in = e->data;
    for (size_t i = 0; i < n; i++)
        o[i] = loom_f32_to_bf16(0.5f * loom_bf16_to_f32(in[i]));
    return o;
}

/* qwen35-tiny rewritten as a Qwen3-Next checkpoint (fused in_proj_qkvz and
 * in_proj_ba grouped by key head) computes the same function, so it must
 * give the same logits. With `moe`, every layer but 1 becomes a sparse MoE
 * block built to compute the dense MLP again: 4 experts, top 2, each a copy
 * of the dense MLP with its down projection halved (the renormalised top-2
 * weights sum to 1: half the MLP), plus a shared expert equal to the dense
 * MLP behind a gate of weight 0 (sigmoid 0.5: the other half). */
void fv_affine(const uint16_t *w, int64_t rows, int64_t cols, int bits,
               uint32_t *q, uint16_t *sc, uint16_t *bi, float *deq)
{
    int64_t G = cols / 64;
    int top = (1 << bits) - 1, per = 32 / bits;
    memset(q, 0, (size_t)(rows * cols / per) * 4);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t g = 0; g < G; g++) {
            float lo = INFINITY, hi = -INFINITY;
            for (int64_t j = 0; j < 64; j++) {
                float v = loom_bf16_to_f32(w[r * cols + g * 64 + j]);
                lo = v < lo ? v : lo;
                hi = v > hi ? v : hi;
            }
            uint16_t s16 = loom_f32_to_bf16((hi - lo) / (float)top);
            uint16_t b16 = loom_f32_to_bf16(lo);
            float s = loom_bf16_to_f32(s16), b = loom_bf16_to_f32(b16);
            sc[r * G + g] = s16;
            bi[r * G + g] = b16;
            for (int64_t j = 0; j < 64; j++) {
                int64_t c = g * 64 + j;
                float v = loom_bf16_to_f32(w[r * cols + c]);
                long k = s > 0 ? lroundf((v - b) / s) : 0;
                k = k < 0 ? 0 : k > top ? top : k;
                q[(r * cols + c) / per] |= (uint32_t)k << (bits * (c % per));
                if (deq)
                    deq[r * cols + c] = s * (float)k + b;
            }
        }
}

/* The renormalised top-2 weights sum to 1, so the experts give half the MLP
 * and the shared expert behind its sigmoid(0) gate the other half. */
const char *fv_qwen3_next(int moe)
{
    const char *t = "models/qwen35-tiny";
    st_entry ents[128], out[256];
    loom_st *st = NULL;
    int n = st_read(t, &st, ents, 128), m = 0;
    const int64_t Hk = 2, Hv = 4, dk = 16, dv = 16, H = 64, r = Hv / Hk;
    const int64_t kd = Hk * dk, vd = Hv * dv;
    const int64_t E = 4;
    int emb = st_index(ents, n, "model.embed_tokens.weight");
    ck_assert_int_ge(emb, 0);
    for (int i = 0; i < n; i++) {
        const char *nm = ents[i].name;
        int layer = -1;
        char proj[16] = "";
        if (moe &&
            sscanf(nm, "model.layers.%d.mlp.%15[a-z]_proj", &layer, proj) ==
                2 &&
            layer != 1) {
            /* the dense MLP of this layer becomes experts */
            if (strcmp(proj, "gate") != 0)
                continue; /* handled with gate */
            char gn[160], un[160], dn[160];
            snprintf(gn, sizeof gn, "model.layers.%d.mlp.gate_proj.weight",
                     layer);
            snprintf(un, sizeof un, "model.layers.%d.mlp.up_proj.weight",
                     layer);
            snprintf(dn, sizeof dn, "model.layers.%d.mlp.down_proj.weight",
                     layer);
            const st_entry *ge = &ents[st_index(ents, n, gn)];
            const st_entry *ue = &ents[st_index(ents, n, un)];
            const st_entry *de = &ents[st_index(ents, n, dn)];
            st_entry router = ents[emb]; /* any BF16 values will do */
            snprintf(router.name, sizeof router.name,
                     "model.layers.%d.mlp.gate.weight", layer);
            router.shape[0] = E;
            router.data = (const uint16_t *)router.data + layer * 997;
            router.nbytes = (uint64_t)(E * H) * 2;
            out[m++] = router;
            for (int64_t e = 0; e < E; e++) {
                st_entry x = *ge;
                snprintf(x.name, sizeof x.name,
                         "model.layers.%d.mlp.experts.%d.gate_proj.weight",
                         layer, (int)e);
                out[m++] = x;
                x = *ue;
                snprintf(x.name, sizeof x.name,
                         "model.layers.%d.mlp.experts.%d.up_proj.weight", layer,
                         (int)e);
                out[m++] = x;
                x = *de;
                snprintf(x.name, sizeof x.name,
                         "model.layers.%d.mlp.experts.%d.down_proj.weight",
                         layer, (int)e);
                x.data = x.owned = bf16_half(de);
                out[m++] = x;
            }
            const st_entry *src[3] = {ge, ue, de};
            const char *nms[3] = {"gate", "up", "down"};
            for (int k = 0; k < 3; k++) {
                st_entry x = *src[k];
                x.owned = NULL;
                snprintf(x.name, sizeof x.name,
                         "model.layers.%d.mlp.shared_expert.%s_proj.weight",
                         layer, nms[k]);
                out[m++] = x;
            }
            st_entry sg = *ge;
            snprintf(sg.name, sizeof sg.name,
                     "model.layers.%d.mlp.shared_expert_gate.weight", layer);
            sg.shape[0] = 1;
            sg.nbytes = (uint64_t)H * 2;
            sg.data = sg.owned = calloc((size_t)H, 2);
            out[m++] = sg;
            continue;
        }
        if (strstr(nm, "in_proj_z") || strstr(nm, "in_proj_b.") ||
            strstr(nm, "in_proj_a."))
            continue; /* folded into the fused tensors below */
        if (!strstr(nm, "in_proj_qkv.")) {
            out[m++] = ents[i];
            continue;
        }
        char base[120];
        snprintf(base, sizeof base, "%.*s",
                 (int)(strstr(nm, "in_proj_qkv") - nm), nm);
        char zn[200], bn[200], an[200];
        snprintf(zn, sizeof zn, "%sin_proj_z.weight", base);
        snprintf(bn, sizeof bn, "%sin_proj_b.weight", base);
        snprintf(an, sizeof an, "%sin_proj_a.weight", base);
        const uint16_t *qkv = ents[i].data;
        const uint16_t *z = ents[st_index(ents, n, zn)].data;
        const uint16_t *b = ents[st_index(ents, n, bn)].data;
        const uint16_t *a = ents[st_index(ents, n, an)].data;
        /* qkvz rows: per key head gi: q(dk) k(dk) v(r*dv) z(r*dv) */
        int64_t rows = 2 * kd + 2 * vd, gw = 2 * dk + 2 * r * dv;
        uint16_t *f = malloc((size_t)(rows * H) * 2);
        for (int64_t gi = 0; gi < Hk; gi++) {
            uint16_t *g0 = f + gi * gw * H;
            memcpy(g0, qkv + gi * dk * H, (size_t)(dk * H) * 2);
            memcpy(g0 + dk * H, qkv + (kd + gi * dk) * H, (size_t)(dk * H) * 2);
            memcpy(g0 + 2 * dk * H, qkv + (2 * kd + gi * r * dv) * H,
                   (size_t)(r * dv * H) * 2);
            memcpy(g0 + (2 * dk + r * dv) * H, z + gi * r * dv * H,
                   (size_t)(r * dv * H) * 2);
        }
        uint16_t *ba = malloc((size_t)(2 * Hv * H) * 2);
        for (int64_t gi = 0; gi < Hk; gi++) {
            memcpy(ba + gi * 2 * r * H, b + gi * r * H, (size_t)(r * H) * 2);
            memcpy(ba + (gi * 2 * r + r) * H, a + gi * r * H,
                   (size_t)(r * H) * 2);
        }
        st_entry q = ents[i];
        snprintf(q.name, sizeof q.name, "%sin_proj_qkvz.weight", base);
        q.shape[0] = rows;
        q.data = q.owned = f;
        q.nbytes = (uint64_t)(rows * H) * 2;
        out[m++] = q;
        st_entry e2 = ents[i];
        snprintf(e2.name, sizeof e2.name, "%sin_proj_ba.weight", base);
        e2.shape[0] = 2 * Hv;
        e2.data = e2.owned = ba;
        e2.nbytes = (uint64_t)(2 * Hv * H) * 2;
        out[m++] = e2;
    }
    ck_assert_int_le(m, 256);
    const char *dir = tm_edited_copy(
        t,
        moe ? "{\"model_type\": \"qwen3_next\", \"architectures\": "
              "[\"Qwen3NextForCausalLM\"], \"num_experts\": 4, "
              "\"num_experts_per_tok\": 2, \"moe_intermediate_size\": 160, "
              "\"shared_expert_intermediate_size\": 160, "
              "\"norm_topk_prob\": true, \"decoder_sparse_step\": 1, "
              "\"mlp_only_layers\": [1]}"
            : "{\"model_type\": \"qwen3_next\", \"architectures\": "
              "[\"Qwen3NextForCausalLM\"], \"num_experts\": 0}",
        0);
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st_write(path, out, m);
    for (int i = 0; i < m; i++)
        free(out[i].owned);
    loom_st_close(st);
    return dir;
}
