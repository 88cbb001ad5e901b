/* Linear weights: MLX affine dequantization of hand-packed tensors against
 * hand-computed values (with per-module overrides), plain rows, the error
 * paths of loom_weight_find, and the exact bf16/f16 conversions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <loom/checkpoint.h>
#include <loom/weights.h>
#include <loom/safetensors.h>

#include "st_write.h"
#include "testutil.h"

/* ---------------------------------------------------------------- writer */

typedef struct tw {
    const char *name;
    const char *dtype;
    int nd;
    int64_t shape[3];
    const void *data;
    size_t n;
} tw;

/* dir/model.safetensors holding `t` back to back, in order. */
static void write_model(const char *dir, const tw *t, int n)
{
    st_entry e[64];
    ck_assert_int_le(n, 64);
    for (int i = 0; i < n; i++) {
        memset(&e[i], 0, sizeof e[i]);
        snprintf(e[i].name, sizeof e[i].name, "%s", t[i].name);
        snprintf(e[i].dtype, sizeof e[i].dtype, "%s", t[i].dtype);
        e[i].ndim = t[i].nd;
        for (int d = 0; d < t[i].nd; d++)
            e[i].shape[d] = t[i].shape[d];
        e[i].data = t[i].data;
        e[i].nbytes = t[i].n;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st_write(path, e, n);
}

static loom_checkpoint *open_ckpt(const char *dir)
{
    loom_checkpoint *c = NULL;
    loom_err err;
    ck_assert_msg(loom_checkpoint_open(dir, &c, &err) == LOOM_OK, "%s",
                  err.msg);
    ck_assert_msg(loom_checkpoint_load_tensors(c, &err) == LOOM_OK, "%s",
                  err.msg);
    return c;
}

static void expect_row(const loom_weight *w, int64_t row, const float *want,
                       int64_t n)
{
    ck_assert_int_eq(w->cols, n);
    float got[64];
    ck_assert_int_le(n, 64);
    loom_weight_row(w, row, got);
    for (int64_t c = 0; c < n; c++)
        ck_assert_msg(got[c] == want[c], "row %lld col %lld: %g, want %g",
                      (long long)row, (long long)c, (double)got[c],
                      (double)want[c]);
}

/* ---------------------------------------------------------------- fixture */

/* Overrides: an exact key (3-bit), the mlx-vlm spelling of a module the
 * plugin asks for by its Hugging Face name (8-bit), bits 2/5/6, a module kept
 * in float (false) and one with unsupported bits. */
static const char quant_config[] =
    "{\"architectures\": [\"TestForCausalLM\"], \"model_type\": \"test\","
    " \"quantization\": {\"group_size\": 8, \"bits\": 4,"
    "  \"language_model.model.layers.0.mlp.gate\": {\"group_size\": 4,"
    "   \"bits\": 8},"
    "  \"model.layers.0.mlp.down_proj\": {\"group_size\": 16, \"bits\": 3},"
    "  \"model.layers.0.mlp.two\": {\"group_size\": 16, \"bits\": 2},"
    "  \"layers.0.mlp.five\": {\"group_size\": 32, \"bits\": 5},"
    "  \"model.layers.0.mlp.six\": {\"group_size\": 16, \"bits\": 6},"
    "  \"model.layers.0.mlp.keep\": false,"
    "  \"bad.seven\": {\"bits\": 7}},"
    " \"quantization_config\": {\"group_size\": 8, \"bits\": 4}}";

/* 4-bit, 2 x 16, groups of 8 */
static const uint32_t up_q[4] = {0x76543210u, 0xFEDCBA98u, 0x01234567u,
                                 0x89ABCDEFu};
static const float up_s[4] = {0.5f, 2.0f, -1.0f, 0.25f};
static const float up_b[4] = {1.0f, -3.0f, 4.0f, 0.5f};
/* 8-bit, 1 x 8, groups of 4, BF16 scales 0.5, -2 and biases -1, 0.125 */
static const uint8_t gate_q[8] = {1, 2, 3, 4, 250, 251, 252, 255};
static const uint16_t gate_s[2] = {0x3F00, 0xC000};
static const uint16_t gate_b[2] = {0xBF80, 0x3E00};
/* 3-bit, 1 x 32, groups of 16: values 0..7 repeating, F16 scales 1, 0.5 and
 * biases 0, -1. 0,1,..,7 at 3 bits each, LSB first, is 0xFAC688. */
static const uint8_t down_q[12] = {0x88, 0xC6, 0xFA, 0x88, 0xC6, 0xFA,
                                   0x88, 0xC6, 0xFA, 0x88, 0xC6, 0xFA};
static const uint16_t down_s[2] = {0x3C00, 0x3800};
static const uint16_t down_b[2] = {0x0000, 0xBC00};
/* 2-bit, 1 x 16: 0b11100100 is 0,1,2,3 */
static const uint8_t two_q[4] = {0xE4, 0xE4, 0xE4, 0xE4};
static const float two_s[1] = {1.0f}, two_b[1] = {0.5f};
/* 5-bit, 1 x 32: q[i] = (7 i + 3) mod 32, packed by an independent script */
static const uint8_t five_q[20] = {0x43, 0x45, 0xfc, 0x4d, 0xa3, 0x5b, 0x24,
                                   0x78, 0x7d, 0x61, 0x53, 0x07, 0xf4, 0x6c,
                                   0x27, 0x4b, 0x66, 0x70, 0x5c, 0xe5};
static const float five_s[1] = {1.0f}, five_b[1] = {0.0f};
/* 6-bit, 1 x 16: 1, 2, 3, 63 = 0xFC3081 in 3 bytes, repeated */
static const uint8_t six_q[12] = {0x81, 0x30, 0xFC, 0x81, 0x30, 0xFC,
                                  0x81, 0x30, 0xFC, 0x81, 0x30, 0xFC};
static const float six_s[1] = {2.0f}, six_b[1] = {-1.0f};
/* plain F16 [2, 3]: 1, -2, 0.375, 2^-24, 65504, -0 */
static const uint16_t head_h[6] = {0x3C00, 0xC000, 0x3600,
                                   0x0001, 0x7BFF, 0x8000};
/* plain BF16 [2, 2]: 1, -2, 0.375, 3 */
static const uint16_t keep_h[4] = {0x3F80, 0xC000, 0x3EC0, 0x4040};
static const float embed_f[4] = {0.25f, -8.0f, 1e-3f, 7.0f};
static const float zeros[8];
static const int8_t i8_q[4] = {1, 2, 3, 4};

static const char *make_quant_ckpt(void)
{
    const char *dir = temp_dir();
    write_text_in(dir, "config.json", quant_config);
    const tw t[] = {
        {"model.layers.0.mlp.up_proj.weight", "U32", 2, {2, 2}, up_q, 16},
        {"model.layers.0.mlp.up_proj.scales", "F32", 2, {2, 2}, up_s, 16},
        {"model.layers.0.mlp.up_proj.biases", "F32", 2, {2, 2}, up_b, 16},
        {"model.language_model.layers.0.mlp.gate.weight",
         "U32",
         2,
         {1, 2},
         gate_q,
         8},
        {"model.language_model.layers.0.mlp.gate.scales",
         "BF16",
         2,
         {1, 2},
         gate_s,
         4},
        {"model.language_model.layers.0.mlp.gate.biases",
         "BF16",
         2,
         {1, 2},
         gate_b,
         4},
        {"model.layers.0.mlp.down_proj.weight", "U32", 2, {1, 3}, down_q, 12},
        {"model.layers.0.mlp.down_proj.scales", "F16", 2, {1, 2}, down_s, 4},
        {"model.layers.0.mlp.down_proj.biases", "F16", 2, {1, 2}, down_b, 4},
        {"model.layers.0.mlp.two.weight", "U32", 2, {1, 1}, two_q, 4},
        {"model.layers.0.mlp.two.scales", "F32", 2, {1, 1}, two_s, 4},
        {"model.layers.0.mlp.two.biases", "F32", 2, {1, 1}, two_b, 4},
        {"model.layers.0.mlp.five.weight", "U32", 2, {1, 5}, five_q, 20},
        {"model.layers.0.mlp.five.scales", "F32", 2, {1, 1}, five_s, 4},
        {"model.layers.0.mlp.five.biases", "F32", 2, {1, 1}, five_b, 4},
        {"model.layers.0.mlp.six.weight", "U32", 2, {1, 3}, six_q, 12},
        {"model.layers.0.mlp.six.scales", "F32", 2, {1, 1}, six_s, 4},
        {"model.layers.0.mlp.six.biases", "F32", 2, {1, 1}, six_b, 4},
        {"model.layers.0.mlp.keep.weight", "BF16", 2, {2, 2}, keep_h, 8},
        {"model.layers.0.mlp.keep.scales", "BF16", 2, {2, 1}, keep_h, 4},
        {"model.layers.0.mlp.keep.biases", "BF16", 2, {2, 1}, keep_h + 2, 4},
        {"lm_head.weight", "F16", 2, {2, 3}, head_h, 12},
        {"model.embed.weight", "F32", 2, {2, 2}, embed_f, 16},
        /* error cases */
        {"bad.nobias.weight", "U32", 2, {1, 2}, zeros, 8},
        {"bad.nobias.scales", "F32", 2, {1, 2}, zeros, 8},
        {"bad.scaleshape.weight", "U32", 2, {1, 2}, zeros, 8},
        {"bad.scaleshape.scales", "F32", 2, {1, 3}, zeros, 12},
        {"bad.scaleshape.biases", "F32", 2, {1, 3}, zeros + 3, 12},
        {"bad.notu32.weight", "BF16", 2, {1, 2}, zeros, 4},
        {"bad.notu32.scales", "F32", 2, {1, 2}, zeros + 1, 8},
        {"bad.notu32.biases", "F32", 2, {1, 2}, zeros + 3, 8},
        {"bad.mixed.weight", "U32", 2, {1, 2}, zeros, 8},
        {"bad.mixed.scales", "F32", 2, {1, 2}, zeros + 2, 8},
        {"bad.mixed.biases", "BF16", 2, {1, 2}, zeros + 4, 4},
        {"bad.seven.weight", "U32", 2, {1, 7}, zeros, 28},
        {"bad.seven.scales", "F32", 2, {1, 1}, zeros, 4},
        {"bad.seven.biases", "F32", 2, {1, 1}, zeros, 4},
        {"bad.i8.weight", "I8", 2, {2, 2}, i8_q, 4},
        {"bad.vec.weight", "BF16", 1, {2}, keep_h, 4},
    };
    write_model(dir, t, (int)(sizeof t / sizeof t[0]));
    return dir;
}

/* ---------------------------------------------------------------- tests */

START_TEST(test_affine4)
{
    loom_checkpoint *c = open_ckpt(make_quant_ckpt());
    loom_weight w;
    loom_err err;
    ck_assert_msg(loom_weight_find(c, "model.layers.0.mlp.up_proj", 2, 16, &w,
                                   &err) == LOOM_OK,
                  "%s", err.msg);
    ck_assert_int_eq(w.bits, 4);
    ck_assert_int_eq(w.group_size, 8);
    ck_assert_int_eq(w.dtype, LOOM_DTYPE_U32);
    ck_assert_int_eq(w.scale_dtype, LOOM_DTYPE_F32);
    ck_assert_int_eq(w.rows, 2);
    /* row 0: q 0..7 with scale 0.5 bias 1; q 8..15 with scale 2 bias -3 */
    const float r0[16] = {1,  1.5, 2,  2.5, 3,  3.5, 4,  4.5,
                          13, 15,  17, 19,  21, 23,  25, 27};
    /* row 1: q 7..0 with scale -1 bias 4; q 15..8 with 0.25, 0.5 */
    const float r1[16] = {-3,   -2, -1,   0,   1,    2, 3,    4,
                          4.25, 4,  3.75, 3.5, 3.25, 3, 2.75, 2.5};
    expect_row(&w, 0, r0, 16);
    expect_row(&w, 1, r1, 16);
    /* rows/cols 0 skip the check */
    ck_assert_int_eq(
        loom_weight_find(c, "model.layers.0.mlp.up_proj", 0, 0, &w, &err),
        LOOM_OK);
    loom_checkpoint_close(c);
}
END_TEST

START_TEST(test_affine_overrides)
{
    loom_checkpoint *c = open_ckpt(make_quant_ckpt());
    loom_weight w;
    loom_err err;

    /* asked by the HF name; the override is keyed by the mlx-vlm one */
    ck_assert_msg(loom_weight_find(c, "model.language_model.layers.0.mlp.gate",
                                   1, 8, &w, &err) == LOOM_OK,
                  "%s", err.msg);
    ck_assert_int_eq(w.bits, 8);
    ck_assert_int_eq(w.group_size, 4);
    ck_assert_int_eq(w.scale_dtype, LOOM_DTYPE_BF16);
    const float g[8] = {-0.5,     0,        0.5,      1,
                        -499.875, -501.875, -503.875, -509.875};
    expect_row(&w, 0, g, 8);

    ck_assert_msg(loom_weight_find(c, "model.layers.0.mlp.down_proj", 1, 32, &w,
                                   &err) == LOOM_OK,
                  "%s", err.msg);
    ck_assert_int_eq(w.bits, 3);
    ck_assert_int_eq(w.scale_dtype, LOOM_DTYPE_F16);
    float d[32];
    for (int i = 0; i < 32; i++)
        d[i] = i < 16 ? (float)(i % 8) : 0.5f * (float)(i % 8) - 1.0f;
    expect_row(&w, 0, d, 32);

    ck_assert_msg(loom_weight_find(c, "model.layers.0.mlp.two", 1, 16, &w,
                                   &err) == LOOM_OK,
                  "%s", err.msg);
    ck_assert_int_eq(w.bits, 2);
    float t[16];
    for (int i = 0; i < 16; i++)
        t[i] = (float)(i % 4) + 0.5f;
    expect_row(&w, 0, t, 16);

    /* keyed without the "model." prefix */
    ck_assert_msg(loom_weight_find(c, "model.layers.0.mlp.five", 1, 32, &w,
                                   &err) == LOOM_OK,
                  "%s", err.msg);
    ck_assert_int_eq(w.bits, 5);
    float f[32];
    for (int i = 0; i < 32; i++)
        f[i] = (float)((7 * i + 3) % 32);
    expect_row(&w, 0, f, 32);

    ck_assert_msg(loom_weight_find(c, "model.layers.0.mlp.six", 1, 16, &w,
                                   &err) == LOOM_OK,
                  "%s", err.msg);
    ck_assert_int_eq(w.bits, 6);
    const float s[16] = {1, 3, 5, 125, 1, 3, 5, 125,
                         1, 3, 5, 125, 1, 3, 5, 125};
    expect_row(&w, 0, s, 16);

    /* false: the module stayed float even though scales lie beside it */
    ck_assert_msg(loom_weight_find(c, "model.layers.0.mlp.keep", 2, 2, &w,
                                   &err) == LOOM_OK,
                  "%s", err.msg);
    ck_assert_int_eq(w.bits, 0);
    ck_assert_int_eq(w.dtype, LOOM_DTYPE_BF16);
    const float k1[2] = {0.375f, 3.0f};
    expect_row(&w, 1, k1, 2);
    loom_checkpoint_close(c);
}
END_TEST

START_TEST(test_plain_rows)
{
    loom_checkpoint *c = open_ckpt(make_quant_ckpt());
    loom_weight w;
    loom_err err;
    /* no .scales: plain even under a quantization config */
    ck_assert_msg(loom_weight_find(c, "lm_head", 2, 3, &w, &err) == LOOM_OK,
                  "%s", err.msg);
    ck_assert_int_eq(w.bits, 0);
    ck_assert_int_eq(w.dtype, LOOM_DTYPE_F16);
    const float h0[3] = {1.0f, -2.0f, 0.375f};
    const float h1[3] = {0x1p-24f, 65504.0f, -0.0f};
    expect_row(&w, 0, h0, 3);
    expect_row(&w, 1, h1, 3);
    float r[3];
    loom_weight_row(&w, 1, r);
    ck_assert(signbit(r[2]));

    ck_assert_int_eq(loom_weight_find(c, "model.embed", 2, 2, &w, &err),
                     LOOM_OK);
    ck_assert_int_eq(w.dtype, LOOM_DTYPE_F32);
    const float e1[2] = {1e-3f, 7.0f};
    expect_row(&w, 1, e1, 2);
    loom_checkpoint_close(c);
}
END_TEST

static void expect_find_fail(loom_checkpoint *c, const char *base, int64_t rows,
                             int64_t cols, loom_status code, const char *part)
{
    loom_weight w;
    loom_err err = {{0}};
    loom_status s = loom_weight_find(c, base, rows, cols, &w, &err);
    ck_assert_msg(s == code, "%s: status %d, expected %d: %s", base, s, code,
                  err.msg);
    ck_assert_msg(strstr(err.msg, loom_checkpoint_dir(c)) != NULL,
                  "message lacks the checkpoint: %s", err.msg);
    ck_assert_msg(strstr(err.msg, part) != NULL, "message lacks '%s': %s", part,
                  err.msg);
}

START_TEST(test_find_errors)
{
    loom_checkpoint *c = open_ckpt(make_quant_ckpt());
    expect_find_fail(c, "nope", 0, 0, LOOM_ERR_NOT_FOUND, "'nope.weight'");
    expect_find_fail(c, "model.layers.0.mlp.up_proj", 3, 16, LOOM_ERR_FORMAT,
                     "expected [3, 16]");
    expect_find_fail(c, "model.layers.0.mlp.up_proj", 2, 8, LOOM_ERR_FORMAT,
                     "model.layers.0.mlp.up_proj.weight");
    expect_find_fail(c, "lm_head", 3, 2, LOOM_ERR_FORMAT, "'lm_head.weight'");
    expect_find_fail(c, "bad.nobias", 0, 0, LOOM_ERR_UNSUPPORTED,
                     "'bad.nobias.biases'");
    expect_find_fail(c, "bad.scaleshape", 0, 0, LOOM_ERR_FORMAT,
                     "'bad.scaleshape.scales'");
    expect_find_fail(c, "bad.notu32", 0, 0, LOOM_ERR_FORMAT,
                     "'bad.notu32.weight' is BF16");
    expect_find_fail(c, "bad.mixed", 0, 0, LOOM_ERR_FORMAT,
                     "'bad.mixed.biases' (BF16)");
    expect_find_fail(c, "bad.seven", 0, 0, LOOM_ERR_UNSUPPORTED, "7-bit");
    expect_find_fail(c, "bad.i8", 0, 0, LOOM_ERR_UNSUPPORTED,
                     "'bad.i8.weight' is I8");
    expect_find_fail(c, "bad.vec", 0, 0, LOOM_ERR_FORMAT, "1 dimensions");
    /* issue 18: a negative expected size (a wrapped product) is refused,
     * not taken for "any" */
    expect_find_fail(c, "model.layers.0.mlp.up_proj", -32, 0, LOOM_ERR_INVALID,
                     "is negative");
    expect_find_fail(c, "model.layers.0.mlp.up_proj", 0, INT64_MIN,
                     LOOM_ERR_INVALID, "is negative");
    loom_checkpoint_close(c);
}
END_TEST

/* Quantization sections of config.json that loom_weight_find refuses for a
 * quantized tensor x, with the status and a part of the message. */
static const struct config_refusal {
    const char *config;
    loom_status code;
    const char *part;
} config_refusals[] = {
    /* scales but no MLX section (another tool's quantization_config) */
    {"{\"quantization_config\": {\"quant_method\": \"awq\"}}", LOOM_ERR_FORMAT,
     "'x.scales'"},
    /* a mode other than affine */
    {"{\"quantization\": {\"group_size\": 32, \"bits\": 4, "
     "\"mode\": \"mxfp4\"}}",
     LOOM_ERR_UNSUPPORTED, "mxfp4"},
    /* bits that are not an integer, a group size that is not positive */
    {"{\"quantization\": {\"group_size\": 16, \"bits\": \"4\"}}",
     LOOM_ERR_FORMAT, "\"bits\""},
    {"{\"quantization\": {\"group_size\": 0, \"bits\": 2}}", LOOM_ERR_FORMAT,
     "group_size"},
    /* quantization_config alone (no "quantization") is MLX's copy; 16 2-bit
     * values do not fill groups of 64 */
    {"{\"quantization_config\": {\"group_size\": 64, \"bits\": 2}}",
     LOOM_ERR_FORMAT, "group_size 64"},
};

START_TEST(test_find_config_errors)
{
    const tw t[] = {
        {"x.weight", "U32", 2, {1, 1}, two_q, 4},
        {"x.scales", "F32", 2, {1, 1}, two_s, 4},
        {"x.biases", "F32", 2, {1, 1}, two_b, 4},
    };
    const char *dir = NULL;
    for (size_t i = 0; i < sizeof config_refusals / sizeof *config_refusals;
         i++) {
        const struct config_refusal *r = &config_refusals[i];
        dir = temp_dir();
        write_text_in(dir, "config.json", r->config);
        write_model(dir, t, 3);
        loom_checkpoint *c = open_ckpt(dir);
        expect_find_fail(c, "x", 0, 0, r->code, r->part);
        loom_checkpoint_close(c);
    }

    /* tensors not loaded yet */
    loom_checkpoint *c2 = NULL;
    loom_err err;
    ck_assert_int_eq(loom_checkpoint_open(dir, &c2, &err), LOOM_OK);
    expect_find_fail(c2, "x", 0, 0, LOOM_ERR_STATE, "not loaded");
    loom_checkpoint_close(c2);
}
END_TEST

/* ---------------------------------------------------------------- bf16/f16 */

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

START_TEST(test_bf16_conversions)
{
    /* widening is exact: the 16 bits are the f32's top half */
    ck_assert(loom_bf16_to_f32(0x3F80) == 1.0f);
    ck_assert(loom_bf16_to_f32(0xC000) == -2.0f);
    ck_assert(loom_bf16_to_f32(0x0001) == 0x1p-133f); /* least subnormal */
    ck_assert(loom_bf16_to_f32(0x7F7F) == 0x1.FEp127f);
    ck_assert(isinf(loom_bf16_to_f32(0x7F80)) && loom_bf16_to_f32(0x7F80) > 0);
    ck_assert(isinf(loom_bf16_to_f32(0xFF80)) && loom_bf16_to_f32(0xFF80) < 0);
    ck_assert(isnan(loom_bf16_to_f32(0x7FC0)));
    ck_assert(signbit(loom_bf16_to_f32(0x8000)));

    /* narrowing: round to nearest, ties to even (bf16 ulp at 1 is 2^-7) */
    ck_assert_uint_eq(loom_f32_to_bf16(1.0f), 0x3F80);
    ck_assert_uint_eq(loom_f32_to_bf16(1.0f + 0x1p-8f), 0x3F80); /* tie, even */
    ck_assert_uint_eq(loom_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82); /* tie */
    ck_assert_uint_eq(loom_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);
    ck_assert_uint_eq(loom_f32_to_bf16(1.0f + 0x1p-8f - 0x1p-20f), 0x3F80);
    ck_assert_uint_eq(loom_f32_to_bf16(-1.0f - 3 * 0x1p-8f), 0xBF82);
    ck_assert_uint_eq(loom_f32_to_bf16(0.375f), 0x3EC0);
    ck_assert_uint_eq(loom_f32_to_bf16(-0.0f), 0x8000);
    /* subnormals: 2^-130 is exact; ties at the bottom go to even */
    ck_assert_uint_eq(loom_f32_to_bf16(0x1p-130f), 0x0008); /* 8 * 2^-133 */
    ck_assert_uint_eq(loom_f32_to_bf16(bits_f32(0x00008000u)), 0x0000);
    ck_assert_uint_eq(loom_f32_to_bf16(bits_f32(0x00018000u)), 0x0002);
    ck_assert_uint_eq(loom_f32_to_bf16(bits_f32(0x00008001u)), 0x0001);
    /* the largest float rounds up to infinity; infinities stay */
    ck_assert_uint_eq(loom_f32_to_bf16(bits_f32(0x7F7FFFFFu)), 0x7F80);
    ck_assert_uint_eq(loom_f32_to_bf16(bits_f32(0x7F7F7FFFu)), 0x7F7F);
    ck_assert_uint_eq(loom_f32_to_bf16(INFINITY), 0x7F80);
    ck_assert_uint_eq(loom_f32_to_bf16(-INFINITY), 0xFF80);
    /* NaN stays NaN, even a signalling one whose payload is all low bits
     * (naive rounding would turn it into infinity) */
    uint16_t qn = loom_f32_to_bf16(NAN);
    ck_assert((qn & 0x7F80) == 0x7F80 && (qn & 0x7F) != 0);
    uint16_t sn = loom_f32_to_bf16(bits_f32(0x7F800001u));
    ck_assert((sn & 0x7F80) == 0x7F80 && (sn & 0x7F) != 0);
    uint16_t nn = loom_f32_to_bf16(bits_f32(0xFFFFFFFFu));
    ck_assert((nn & 0x7F80) == 0x7F80 && (nn & 0x7F) != 0);
    /* every bf16 survives the round trip */
    for (uint32_t h = 0; h < 0x10000u; h++) {
        if ((h & 0x7F80u) == 0x7F80u && (h & 0x7Fu))
            continue; /* NaNs: checked above */
        ck_assert_uint_eq(loom_f32_to_bf16(loom_bf16_to_f32((uint16_t)h)), h);
    }
}
END_TEST

START_TEST(test_f16_conversions)
{
    ck_assert(loom_f16_to_f32(0x3C00) == 1.0f);
    ck_assert(loom_f16_to_f32(0xC000) == -2.0f);
    ck_assert(loom_f16_to_f32(0x3600) == 0.375f);
    ck_assert(loom_f16_to_f32(0x0001) == 0x1p-24f);
    ck_assert(loom_f16_to_f32(0x03FF) == 1023 * 0x1p-24f);
    ck_assert(loom_f16_to_f32(0x0400) == 0x1p-14f);
    ck_assert(loom_f16_to_f32(0x7BFF) == 65504.0f);
    ck_assert(loom_f16_to_f32(0x8001) == -0x1p-24f);
    ck_assert(isinf(loom_f16_to_f32(0x7C00)) && loom_f16_to_f32(0x7C00) > 0);
    ck_assert(isinf(loom_f16_to_f32(0xFC00)) && loom_f16_to_f32(0xFC00) < 0);
    ck_assert(isnan(loom_f16_to_f32(0x7E00)));
    ck_assert(isnan(loom_f16_to_f32(0x7C01)));
    ck_assert(signbit(loom_f16_to_f32(0x8000)) &&
              loom_f16_to_f32(0x8000) == 0.0f);

    /* f16 ulp at 1 is 2^-10: ties go to even */
    ck_assert_uint_eq(loom_f32_to_f16(1.0f), 0x3C00);
    ck_assert_uint_eq(loom_f32_to_f16(1.0f + 0x1p-11f), 0x3C00);
    ck_assert_uint_eq(loom_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02);
    ck_assert_uint_eq(loom_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01);
    ck_assert_uint_eq(loom_f32_to_f16(-0.375f), 0xB600);
    ck_assert_uint_eq(loom_f32_to_f16(-0.0f), 0x8000);
    /* overflow: 65504 is the largest; 65520 ties to the even 65536 = inf */
    ck_assert_uint_eq(loom_f32_to_f16(65504.0f), 0x7BFF);
    ck_assert_uint_eq(loom_f32_to_f16(65519.99f), 0x7BFF);
    ck_assert_uint_eq(loom_f32_to_f16(65520.0f), 0x7C00);
    ck_assert_uint_eq(loom_f32_to_f16(-1e6f), 0xFC00);
    ck_assert_uint_eq(loom_f32_to_f16(INFINITY), 0x7C00);
    /* subnormals, with ties at the bottom */
    ck_assert_uint_eq(loom_f32_to_f16(0x1p-24f), 0x0001);
    ck_assert_uint_eq(loom_f32_to_f16(0x1p-25f), 0x0000);     /* tie, even */
    ck_assert_uint_eq(loom_f32_to_f16(3 * 0x1p-25f), 0x0002); /* tie, even */
    ck_assert_uint_eq(loom_f32_to_f16(0x1p-25f + 0x1p-35f), 0x0001);
    ck_assert_uint_eq(loom_f32_to_f16(0x1p-26f), 0x0000);
    ck_assert_uint_eq(loom_f32_to_f16(-0x1p-24f), 0x8001);
    ck_assert_uint_eq(loom_f32_to_f16(1023 * 0x1p-24f), 0x03FF);
    /* between the largest subnormal and the least normal: tie to even */
    ck_assert_uint_eq(loom_f32_to_f16(1023.5f * 0x1p-24f), 0x0400);
    ck_assert_uint_eq(loom_f32_to_f16(0x1p-14f), 0x0400);
    ck_assert_uint_eq(loom_f32_to_f16(1e-10f), 0x0000);
    /* NaN stays NaN */
    uint16_t qn = loom_f32_to_f16(NAN);
    ck_assert((qn & 0x7C00) == 0x7C00 && (qn & 0x3FF) != 0);
    uint16_t sn = loom_f32_to_f16(bits_f32(0x7F800001u));
    ck_assert((sn & 0x7C00) == 0x7C00 && (sn & 0x3FF) != 0);
    /* every f16 survives the round trip (f32 holds it exactly) */
    for (uint32_t h = 0; h < 0x10000u; h++) {
        if ((h & 0x7C00u) == 0x7C00u && (h & 0x3FFu))
            continue;
        ck_assert_uint_eq(loom_f32_to_f16(loom_f16_to_f32((uint16_t)h)), h);
    }
    /* and the f32 value is the closed form of the f16 fields */
    for (uint32_t h = 0; h < 0x7C00u; h++) {
        uint32_t e = h >> 10, m = h & 0x3FFu;
        double v =
            e ? ldexp(1.0 + m / 1024.0, (int)e - 15) : ldexp(m / 1024.0, -14);
        ck_assert((double)loom_f16_to_f32((uint16_t)h) == v);
    }
    ck_assert_uint_eq(f32_bits(loom_f16_to_f32(0x7C00)), 0x7F800000u);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("weights");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_affine4);
    tcase_add_test(tc, test_affine_overrides);
    tcase_add_test(tc, test_plain_rows);
    tcase_add_test(tc, test_find_errors);
    tcase_add_test(tc, test_find_config_errors);
    tcase_add_test(tc, test_bf16_conversions);
    tcase_add_test(tc, test_f16_conversions);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return run_suite(suite());
}
