/* Linear weights by module path, plain (F32/F16/BF16) or MLX affine-quantized
 * as mlx-community checkpoints store them, and the reference conversion of
 * one row to float32 that every CPU path (matmul, embedding lookup) uses.
 *
 * MLX affine format (ml-explore/mlx, mlx-lm `quantize_model`; see
 * docs/specs/qwen35.md section 5): a Linear or Embedding `X` of [out, in] is
 * `X.weight` U32 [out, in*bits/32] holding a little-endian bit stream per row
 * (element j in bits [bits*j, bits*(j+1)), LSB first; for 3, 5 and 6 bits an
 * element may straddle two bytes), `X.scales` and `X.biases` [out,
 * in/group_size] in the model dtype, and w = scale * q + bias per group of
 * group_size consecutive inputs. config.json carries "quantization":
 * {"group_size", "bits", ["mode"]} plus per-module overrides keyed by module
 * path: an object with its own group_size/bits, or false for a module left
 * in float. Big-endian hosts are not a target: the stream is read byte-wise
 * as it lies in the file. */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include <loom/checkpoint.h>
#include <loom/weights.h>
#include <loom/safetensors.h>

typedef struct wq_params {
    int quantized; /* 0: the module is float by config */
    int bits;
    int group_size;
} wq_params;

/* The MLX quantization section of config.json, or NULL. mlx-lm writes
 * "quantization" and a copy under "quantization_config"; other tools use
 * "quantization_config" for their own schemes, which say "quant_method". */
static json_t *wq_section(json_t *config)
{
    json_t *roots[2] = {config, json_object_get(config, "text_config")};
    for (int r = 0; r < 2; r++) {
        json_t *q = json_object_get(roots[r], "quantization");
        if (json_is_object(q))
            return q;
        q = json_object_get(roots[r], "quantization_config");
        if (json_is_object(q) && !json_object_get(q, "quant_method"))
            return q;
    }
    return NULL;
}

static int wq_starts(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* The per-module entry for `base`, trying the names MLX gives the same
 * module: mlx-lm keeps "model.", mlx-vlm renames "model.language_model." to
 * "language_model.model.", and a plugin may ask by either spelling. */
static json_t *wq_override(json_t *q, const char *base)
{
    static const char *const swaps[][2] = {
        {"model.language_model.", "language_model.model."},
        {"language_model.model.", "model.language_model."},
        {"model.", ""},
        {"language_model.", ""},
        {"", "model."},
        {"", "language_model."},
        {"", "language_model.model."},
    };
    json_t *o = json_object_get(q, base);
    if (o)
        return o;
    char name[1024];
    for (size_t i = 0; i < sizeof swaps / sizeof swaps[0]; i++) {
        if (!wq_starts(base, swaps[i][0]))
            continue;
        int n = snprintf(name, sizeof name, "%s%s", swaps[i][1],
                         base + strlen(swaps[i][0]));
        if (n < 0 || (size_t)n >= sizeof name)
            continue;
        o = json_object_get(q, name);
        if (o)
            return o;
    }
    return NULL;
}

static loom_status wq_read_params(json_t *obj, wq_params *p, const char *what,
                                  const char *where, loom_err *err)
{
    json_t *b = json_object_get(obj, "bits");
    json_t *g = json_object_get(obj, "group_size");
    json_t *m = json_object_get(obj, "mode");
    if (b) {
        if (!json_is_integer(b))
            return loom_err_set(err, LOOM_ERR_FORMAT,
                                "%s/config.json: %s: \"bits\" is not an "
                                "integer",
                                where, what);
        p->bits = (int)json_integer_value(b);
    }
    if (g) {
        if (!json_is_integer(g) || json_integer_value(g) <= 0 ||
            json_integer_value(g) > (1 << 20))
            return loom_err_set(err, LOOM_ERR_FORMAT,
                                "%s/config.json: %s: \"group_size\" is not a "
                                "positive integer",
                                where, what);
        p->group_size = (int)json_integer_value(g);
    }
    if (m &&
        (!json_is_string(m) || strcmp(json_string_value(m), "affine") != 0))
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "%s/config.json: %s: quantization mode '%s' is "
                            "not supported (only \"affine\")",
                            where, what,
                            json_is_string(m) ? json_string_value(m) : "?");
    return LOOM_OK;
}

static loom_status wq_params_for(json_t *q, const char *base, wq_params *p,
                                 const char *where, loom_err *err)
{
    p->quantized = 1;
    p->bits = 0;
    p->group_size = 0;
    loom_status s = wq_read_params(q, p, "quantization", where, err);
    if (s != LOOM_OK)
        return s;
    json_t *o = wq_override(q, base);
    if (json_is_false(o)) {
        p->quantized = 0;
        return LOOM_OK;
    }
    if (json_is_object(o)) {
        s = wq_read_params(o, p, base, where, err);
        if (s != LOOM_OK)
            return s;
    }
    if (p->bits != 2 && p->bits != 3 && p->bits != 4 && p->bits != 5 &&
        p->bits != 6 && p->bits != 8)
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "%s/config.json: %s: %d-bit quantization is not "
                            "supported (2, 3, 4, 5, 6, 8)",
                            where, base, p->bits);
    if (p->group_size <= 0)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s/config.json: %s: no \"group_size\"", where,
                            base);
    return LOOM_OK;
}

static int wq_float_dtype(loom_dtype t)
{
    return t == LOOM_DTYPE_F32 || t == LOOM_DTYPE_F16 || t == LOOM_DTYPE_BF16;
}

static loom_status wq_check_shape(const char *name, int64_t r, int64_t c,
                                  int64_t rows, int64_t cols, const char *where,
                                  loom_err *err)
{
    /* 0 means "any" (the ABI's); a negative size is a wrapped product,
     * refused rather than taken for "any" */
    if (rows < 0 || cols < 0)
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "%s: tensor '%s': the expected shape [%lld, %lld] "
                            "is negative (an overflowed size?)",
                            where, name, (long long)rows, (long long)cols);
    if ((rows > 0 && r != rows) || (cols > 0 && c != cols))
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s: tensor '%s' is [%lld, %lld], expected "
                            "[%lld, %lld]",
                            where, name, (long long)r, (long long)c,
                            (long long)rows, (long long)cols);
    return LOOM_OK;
}

static loom_status wq_quantized(const loom_tensor *w, const loom_tensor *sc,
                                const loom_tensor *bi, const wq_params *p,
                                int64_t rows, int64_t cols, const char *where,
                                loom_weight *out, loom_err *err)
{
    if (w->dtype != LOOM_DTYPE_U32 || w->ndim != 2)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s: tensor '%s' is %s with %d dimensions; a "
                            "quantized weight is 2-D U32",
                            where, w->name, loom_dtype_name(w->dtype),
                            (int)w->ndim);
    if (!wq_float_dtype(sc->dtype) || sc->dtype != bi->dtype)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s: tensors '%s' (%s) and '%s' (%s) must both be "
                            "F32, F16 or BF16",
                            where, sc->name, loom_dtype_name(sc->dtype),
                            bi->name, loom_dtype_name(bi->dtype));
    int64_t r = w->shape[0], packed = w->shape[1];
    if ((packed * 32) % p->bits != 0)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s: tensor '%s': %lld words per row do not hold "
                            "a whole number of %d-bit values",
                            where, w->name, (long long)packed, p->bits);
    int64_t c = packed * 32 / p->bits;
    if (c % p->group_size != 0)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s: tensor '%s': %lld inputs are not a multiple "
                            "of group_size %d",
                            where, w->name, (long long)c, p->group_size);
    int64_t groups = c / p->group_size;
    const loom_tensor *sb[2] = {sc, bi};
    for (int i = 0; i < 2; i++) {
        if (sb[i]->ndim != 2 || sb[i]->shape[0] != r ||
            sb[i]->shape[1] != groups)
            return loom_err_set(
                err, LOOM_ERR_FORMAT,
                "%s: tensor '%s' has %d dimensions [%lld, "
                "%lld], expected [%lld, %lld] for %d-bit "
                "groups of %d",
                where, sb[i]->name, (int)sb[i]->ndim,
                (long long)sb[i]->shape[0],
                (long long)(sb[i]->ndim > 1 ? sb[i]->shape[1] : 0),
                (long long)r, (long long)groups, p->bits, p->group_size);
    }
    loom_status s = wq_check_shape(w->name, r, c, rows, cols, where, err);
    if (s != LOOM_OK)
        return s;
    memset(out, 0, sizeof *out);
    out->dtype = LOOM_DTYPE_U32;
    out->rows = r;
    out->cols = c;
    out->data = w->data;
    out->bits = p->bits;
    out->group_size = p->group_size;
    out->scale_dtype = sc->dtype;
    out->scales = sc->data;
    out->biases = bi->data;
    return LOOM_OK;
}

loom_status loom_weight_find(const loom_checkpoint *ckpt, const char *base,
                             int64_t rows, int64_t cols, loom_weight *out,
                             loom_err *err)
{
    const char *where = loom_checkpoint_dir(ckpt);
    const loom_st *st = loom_checkpoint_tensors(ckpt);
    if (!st)
        return loom_err_set(err, LOOM_ERR_STATE,
                            "%s: tensors are not loaded (looking for '%s')",
                            where, base);
    char wn[1024], sn[1024], bn[1024];
    int n1 = snprintf(wn, sizeof wn, "%s.weight", base);
    int n2 = snprintf(sn, sizeof sn, "%s.scales", base);
    int n3 = snprintf(bn, sizeof bn, "%s.biases", base);
    if (n1 < 0 || n2 < 0 || n3 < 0 || (size_t)n3 >= sizeof bn ||
        (size_t)n2 >= sizeof sn || (size_t)n1 >= sizeof wn)
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "%s: module path too long: %.200s...", where, base);
    const loom_tensor *w = loom_st_find(st, wn);
    if (!w)
        return loom_err_set(err, LOOM_ERR_NOT_FOUND,
                            "%s: no tensor '%s' in the checkpoint", where, wn);
    const loom_tensor *sc = loom_st_find(st, sn);
    const loom_tensor *bi = loom_st_find(st, bn);

    if (sc) {
        json_t *q = wq_section(loom_checkpoint_config(ckpt));
        if (!q)
            return loom_err_set(err, LOOM_ERR_FORMAT,
                                "%s: tensor '%s' exists but config.json has "
                                "no MLX \"quantization\" section",
                                where, sn);
        wq_params p;
        loom_status s = wq_params_for(q, base, &p, where, err);
        if (s != LOOM_OK)
            return s;
        if (p.quantized) {
            if (!bi)
                return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                                    "%s: tensor '%s' has scales but no '%s': "
                                    "only MLX affine quantization is "
                                    "supported",
                                    where, wn, bn);
            return wq_quantized(w, sc, bi, &p, rows, cols, where, out, err);
        }
        /* config.json says this module stayed float: fall through */
    }

    if (!wq_float_dtype(w->dtype))
        return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                            "%s: tensor '%s' is %s; a linear weight must be "
                            "F32, F16 or BF16, or MLX-quantized U32 with "
                            ".scales and .biases",
                            where, wn, loom_dtype_name(w->dtype));
    if (w->ndim != 2)
        return loom_err_set(err, LOOM_ERR_FORMAT,
                            "%s: tensor '%s' has %d dimensions, a linear "
                            "weight has 2",
                            where, wn, (int)w->ndim);
    loom_status s =
        wq_check_shape(wn, w->shape[0], w->shape[1], rows, cols, where, err);
    if (s != LOOM_OK)
        return s;
    memset(out, 0, sizeof *out);
    out->dtype = w->dtype;
    out->rows = w->shape[0];
    out->cols = w->shape[1];
    out->data = w->data;
    return LOOM_OK;
}

/* Element i of a float array of dtype t. Loads go through memcpy: tensor
 * data sits wherever the file put it and need not be aligned. */
static float wq_load(const void *data, loom_dtype t, int64_t i)
{
    const uint8_t *p = data;
    if (t == LOOM_DTYPE_F32) {
        float f;
        memcpy(&f, p + i * 4, sizeof f);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + i * 2, sizeof h);
    return t == LOOM_DTYPE_BF16 ? loom_bf16_to_f32(h) : loom_f16_to_f32(h);
}

void loom_weight_row(const loom_weight *w, int64_t row, float *out)
{
    const int64_t cols = w->cols;
    if (w->bits == 0) {
        if (!wq_float_dtype(w->dtype)) {
            memset(out, 0, (size_t)cols * sizeof *out);
            return;
        }
        if (w->dtype == LOOM_DTYPE_F32) {
            memcpy(out, (const uint8_t *)w->data + row * cols * 4,
                   (size_t)cols * sizeof *out);
            return;
        }
        const uint8_t *src = (const uint8_t *)w->data + row * cols * 2;
        if (w->dtype == LOOM_DTYPE_BF16) {
            /* a shift per element, which the compiler vectorises: prefill
             * converts every weight row once per tile of tokens */
            for (int64_t c = 0; c < cols; c++) {
                uint16_t h;
                memcpy(&h, src + c * 2, sizeof h);
                uint32_t u = (uint32_t)h << 16;
                memcpy(&out[c], &u, sizeof u);
            }
            return;
        }
        for (int64_t c = 0; c < cols; c++)
            out[c] = wq_load(w->data, w->dtype, row * cols + c);
        return;
    }

    const int bits = w->bits;
    const uint32_t mask = (1u << bits) - 1;
    const int64_t gs = w->group_size, groups = cols / gs;
    /* a row is cols*bits/32 whole words: cols*bits/8 bytes */
    const uint8_t *q = (const uint8_t *)w->data + row * (cols * bits / 8);
    for (int64_t g = 0; g < groups; g++) {
        /* computed in float32; MLX computes in the scales' dtype, which
         * can differ in the last bit of a BF16 result */
        float s = wq_load(w->scales, w->scale_dtype, row * groups + g);
        float b = wq_load(w->biases, w->scale_dtype, row * groups + g);
        int64_t c0 = g * gs, c1 = c0 + gs;
        if (bits == 4) {
            for (int64_t c = c0; c < c1; c++)
                out[c] = s * (float)((q[c >> 1] >> ((c & 1) * 4)) & 15u) + b;
        } else if (bits == 8) {
            for (int64_t c = c0; c < c1; c++)
                out[c] = s * (float)q[c] + b;
        } else {
            for (int64_t c = c0; c < c1; c++) {
                int64_t bit = c * bits;
                int64_t byte = bit >> 3;
                int sh = (int)(bit & 7);
                uint32_t v = (uint32_t)q[byte] >> sh;
                /* the value straddles into the next byte, which then
                 * exists within the row */
                if (sh + bits > 8)
                    v |= (uint32_t)q[byte + 1] << (8 - sh);
                out[c] = s * (float)(v & mask) + b;
            }
        }
    }
}
