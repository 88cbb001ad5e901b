/* safetensors loading: hand-made files written here (valid, each broken kind,
 * sharded with an index) and the fixture checkpoints against the shapes the
 * specs give for their configs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include <loom/checkpoint.h>
#include <loom/cpu_ops.h>
#include <loom/safetensors.h>

#include "testutil.h"

/* ---------------------------------------------------------------- helpers */

static const char *path_in(const char *dir, const char *name)
{
    static char bufs[8][1024];
    static int next;
    char *b = bufs[next++ & 7];
    snprintf(b, sizeof bufs[0], "%s/%s", dir, name);
    return b;
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    if (n)
        ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

/* An 8-byte little-endian header length `hlen`, then `header`, then data. */
static void write_st_len(const char *path, uint64_t hlen, const char *header,
                         const void *data, size_t n)
{
    size_t h = strlen(header);
    size_t total = 8 + h + n;
    unsigned char *buf = malloc(total);
    ck_assert_ptr_nonnull(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(buf + 8, header, h);
    if (n)
        memcpy(buf + 8 + h, data, n);
    write_bytes(path, buf, total);
    free(buf);
}

static void write_st(const char *path, const char *header, const void *data,
                     size_t n)
{
    write_st_len(path, strlen(header), header, data, n);
}

static int has(const char *msg, const char *part)
{
    return part == NULL || strstr(msg, part) != NULL;
}

/* Opens `path` expecting failure `code` with a message naming the file, the
 * tensor (when given) and `what`. */
static void expect_fail_file(const char *path, loom_status code,
                             const char *tensor, const char *what)
{
    loom_st *st = NULL;
    loom_err err = {{0}};
    loom_status s = loom_st_open_file(path, &st, &err);
    ck_assert_msg(s == code, "status %d, expected %d: %s", s, code, err.msg);
    ck_assert_ptr_null(st);
    ck_assert_msg(has(err.msg, path), "message lacks the file: %s", err.msg);
    ck_assert_msg(has(err.msg, tensor), "message lacks '%s': %s", tensor,
                  err.msg);
    ck_assert_msg(has(err.msg, what), "message lacks '%s': %s", what, err.msg);
}

/* A file with one header and `n` data bytes, expecting failure. */
static void expect_bad(const char *header, size_t n, loom_status code,
                       const char *tensor, const char *what)
{
    static const unsigned char zeros[256];
    ck_assert_uint_le(n, sizeof zeros);
    const char *path = path_in(temp_dir(), "bad.safetensors");
    write_st(path, header, zeros, n);
    expect_fail_file(path, code, tensor, what);
}

static float f32_at(const loom_tensor *t, size_t i)
{
    float f;
    memcpy(&f, (const char *)t->data + 4 * i, sizeof f);
    return f;
}

/* ---------------------------------------------------------------- valid */

static const char valid_header[] =
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]},"
    "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
    "\"s\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[32,36]},"
    "\"e\":{\"dtype\":\"F16\",\"shape\":[0,5],\"data_offsets\":[36,36]}}";

static void valid_data(unsigned char *d)
{
    const float a[6] = {1.0f, -2.0f, 0.5f, 3.25f, 0.0f, -0.125f};
    memcpy(d, a, sizeof a);
    /* BF16 1.0, -2.0, 0.375, +inf */
    const unsigned char b[8] = {0x80, 0x3f, 0x00, 0xc0, 0xc0, 0x3e, 0x80, 0x7f};
    memcpy(d + 24, b, 8);
    const unsigned char s[4] = {0x2a, 0, 0, 0}; /* 42 */
    memcpy(d + 32, s, 4);
}

START_TEST(test_valid_file)
{
    unsigned char data[36];
    valid_data(data);
    const char *dir = temp_dir();
    const char *path = path_in(dir, "model.safetensors");
    write_st(path, valid_header, data, sizeof data);

    loom_st *st = NULL;
    loom_err err;
    ck_assert_msg(loom_st_open_file(path, &st, &err) == LOOM_OK, "%s", err.msg);
    /* __metadata__ is not a tensor; header order is kept */
    ck_assert_uint_eq(loom_st_count(st), 4);
    ck_assert_str_eq(loom_st_at(st, 0)->name, "b");
    ck_assert_str_eq(loom_st_at(st, 1)->name, "a");
    ck_assert_str_eq(loom_st_at(st, 2)->name, "s");
    ck_assert_str_eq(loom_st_at(st, 3)->name, "e");
    ck_assert_ptr_null(loom_st_at(st, 4));

    const loom_tensor *a = loom_st_find(st, "a");
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(a->dtype, LOOM_DTYPE_F32);
    ck_assert_int_eq(a->ndim, 2);
    ck_assert_int_eq(a->shape[0], 2);
    ck_assert_int_eq(a->shape[1], 3);
    ck_assert_uint_eq(a->nbytes, 24);
    ck_assert(f32_at(a, 0) == 1.0f);
    ck_assert(f32_at(a, 3) == 3.25f);
    ck_assert(f32_at(a, 5) == -0.125f);

    const loom_tensor *b = loom_st_find(st, "b");
    ck_assert_int_eq(b->dtype, LOOM_DTYPE_BF16);
    uint16_t h[4];
    memcpy(h, b->data, sizeof h);
    ck_assert(loom_bf16_to_f32(h[0]) == 1.0f);
    ck_assert(loom_bf16_to_f32(h[1]) == -2.0f);
    ck_assert(loom_bf16_to_f32(h[2]) == 0.375f);

    const loom_tensor *s = loom_st_find(st, "s");
    ck_assert_int_eq(s->ndim, 0);
    ck_assert_uint_eq(s->nbytes, 4);
    int32_t v;
    memcpy(&v, s->data, sizeof v);
    ck_assert_int_eq(v, 42);

    const loom_tensor *e = loom_st_find(st, "e");
    ck_assert_uint_eq(e->nbytes, 0);
    ck_assert_int_eq(e->shape[1], 5);

    ck_assert_ptr_null(loom_st_find(st, "missing"));
    ck_assert_ptr_null(loom_st_find(st, "__metadata__"));
    ck_assert_str_eq(loom_st_file_of(st, a), path);
    loom_tensor other = *a;
    ck_assert_ptr_null(loom_st_file_of(st, &other));
    loom_st_close(st);

    /* the directory form finds model.safetensors */
    st = NULL;
    ck_assert_msg(loom_st_open_dir(dir, &st, &err) == LOOM_OK, "%s", err.msg);
    ck_assert_uint_eq(loom_st_count(st), 4);
    loom_st_close(st);
}
END_TEST

START_TEST(test_valid_memory_and_dtypes)
{
    /* every dtype name round-trips; sizes are the safetensors ones */
    static const struct {
        const char *name;
        size_t size;
    } want[] = {{"F32", 4}, {"F16", 2}, {"BF16", 2},    {"I32", 4}, {"U32", 4},
                {"I8", 1},  {"U8", 1},  {"F8_E4M3", 1}, {"I64", 8}, {"F64", 8},
                {"I16", 2}, {"U16", 2}, {"BOOL", 1}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        loom_dtype t = loom_dtype_from_name(want[i].name);
        ck_assert_int_ne(t, LOOM_DTYPE_COUNT);
        ck_assert_str_eq(loom_dtype_name(t), want[i].name);
        ck_assert_uint_eq(loom_dtype_size(t), want[i].size);
    }
    ck_assert_int_eq(loom_dtype_from_name("Q4_K"), LOOM_DTYPE_COUNT);
    ck_assert_int_eq(loom_dtype_from_name(NULL), LOOM_DTYPE_COUNT);
    ck_assert_uint_eq(loom_dtype_size(LOOM_DTYPE_COUNT), 0);

    /* an F8_E4M3 tensor is data like any other; trailing spaces pad the
     * header as the Python writer does */
    const char hdr[] =
        "{\"f8\":{\"dtype\":\"F8_E4M3\",\"shape\":[3],\"data_offsets\":[0,3]}}"
        "     ";
    unsigned char img[8 + sizeof hdr - 1 + 3];
    uint64_t hl = sizeof hdr - 1;
    for (int i = 0; i < 8; i++)
        img[i] = (unsigned char)(hl >> (8 * i));
    memcpy(img + 8, hdr, sizeof hdr - 1);
    img[8 + hl] = 0x38;
    img[8 + hl + 1] = 0x40;
    img[8 + hl + 2] = 0xb8;
    loom_st *st = NULL;
    loom_err err;
    ck_assert_msg(loom_st_open_memory(img, sizeof img, "mem", &st, &err) ==
                      LOOM_OK,
                  "%s", err.msg);
    const loom_tensor *t = loom_st_find(st, "f8");
    ck_assert_int_eq(t->dtype, LOOM_DTYPE_F8_E4M3);
    ck_assert_uint_eq(((const unsigned char *)t->data)[2], 0xb8);
    loom_st_close(st);
}
END_TEST

/* ---------------------------------------------------------------- broken */

START_TEST(test_truncated)
{
    const char *dir = temp_dir();
    const char *p0 = path_in(dir, "empty.safetensors");
    write_bytes(p0, "", 0);
    expect_fail_file(p0, LOOM_ERR_FORMAT, NULL, "truncated");

    const char *p5 = path_in(dir, "five.safetensors");
    write_bytes(p5, "\x10\0\0\0\0", 5);
    expect_fail_file(p5, LOOM_ERR_FORMAT, NULL, "truncated");

    /* a valid file cut in the middle of its data */
    unsigned char data[36];
    valid_data(data);
    const char *pc = path_in(dir, "cut.safetensors");
    write_st(pc, valid_header, data, 20);
    expect_fail_file(pc, LOOM_ERR_RANGE, "'b'", "past the data section");

    /* cut inside the header */
    const char *ph = path_in(dir, "cuthdr.safetensors");
    char half[40];
    memcpy(half, valid_header, sizeof half - 1);
    half[sizeof half - 1] = '\0';
    write_st_len(ph, strlen(valid_header), half, NULL, 0);
    expect_fail_file(ph, LOOM_ERR_FORMAT, NULL, "exceeds");
}
END_TEST

START_TEST(test_header_length)
{
    const char *dir = temp_dir();
    const char *p = path_in(dir, "long.safetensors");
    write_st_len(p, 1000, "{}", NULL, 0);
    expect_fail_file(p, LOOM_ERR_FORMAT, NULL, "1000");

    /* 2^64-1: must not wrap around when added to anything */
    const char *q = path_in(dir, "huge.safetensors");
    write_st_len(q, UINT64_MAX, "{}", NULL, 0);
    expect_fail_file(q, LOOM_ERR_FORMAT, NULL, "exceeds");

    /* A length within the file but past the 100 MiB bound: a sparse file
     * of 101 MiB (stdio seek past the end, no data written). */
    const char *r = path_in(dir, "big.safetensors");
    FILE *f = fopen(r, "wb");
    ck_assert_ptr_nonnull(f);
    uint64_t len = (uint64_t)101 << 20;
    unsigned char l8[8];
    for (int i = 0; i < 8; i++)
        l8[i] = (unsigned char)(len >> (8 * i));
    ck_assert_uint_eq(fwrite(l8, 1, 8, f), 8);
    ck_assert_int_eq(fseek(f, (long)len + 7, SEEK_SET), 0);
    ck_assert_int_eq(fputc(' ', f), ' ');
    ck_assert_int_eq(fclose(f), 0);
    expect_fail_file(r, LOOM_ERR_FORMAT, NULL, "limit");
}
END_TEST

START_TEST(test_not_json)
{
    expect_bad("{\"a\": {\"dtype\": ", 0, LOOM_ERR_FORMAT, NULL,
               "not valid JSON");
    expect_bad("[1, 2, 3]", 0, LOOM_ERR_FORMAT, NULL, "not a JSON object");
    expect_bad("{}x", 0, LOOM_ERR_FORMAT, NULL, "not valid JSON");
    /* a NUL inside the header (the file is not named nul.*: Windows
     * reserves that name for its null device) */
    const char *path = path_in(temp_dir(), "nul-byte.safetensors");
    unsigned char img[8 + 4] = {4, 0, 0, 0, 0, 0, 0, 0, '{', 0, '}', ' '};
    write_bytes(path, img, sizeof img);
    expect_fail_file(path, LOOM_ERR_FORMAT, NULL, "not valid JSON");
}
END_TEST

START_TEST(test_bad_entries)
{
    expect_bad(
        "{\"w\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2,
        LOOM_ERR_FORMAT, "'w'", "unknown dtype 'Q4'");
    expect_bad("{\"w\":{\"shape\":[2],\"data_offsets\":[0,2]}}", 2,
               LOOM_ERR_FORMAT, "'w'", "dtype");
    expect_bad("{\"w\":[1]}", 0, LOOM_ERR_FORMAT, "'w'", "not an object");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,2]}}", 2,
               LOOM_ERR_FORMAT, "'w'", "shape");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[-2],\"data_offsets\":[0,"
               "2]}}",
               2, LOOM_ERR_FORMAT, "'w'", "shape[0]");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[2.0],\"data_offsets\":[0,"
               "2]}}",
               2, LOOM_ERR_FORMAT, "'w'", "shape[0]");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],"
               "\"data_offsets\":[0,1]}}",
               1, LOOM_ERR_FORMAT, "'w'", "9 dimensions");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[2]}}", 2, LOOM_ERR_FORMAT,
               "'w'", "data_offsets");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0]}}",
               2, LOOM_ERR_FORMAT, "'w'", "data_offsets");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,"
               "-2]}}",
               2, LOOM_ERR_FORMAT, "'w'", "data_offsets");
}
END_TEST

START_TEST(test_shape_size_mismatch)
{
    /* F32 [2,3] needs 24 bytes, the span is 20 */
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,"
               "20]}}",
               24, LOOM_ERR_FORMAT, "'w'", "needs 24 bytes");
    /* a shape whose byte count wraps around 2^64 to a small number */
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],"
               "\"data_offsets\":[0,0]}}",
               0, LOOM_ERR_FORMAT, "'w'", "overflows");
    expect_bad("{\"w\":{\"dtype\":\"BF16\",\"shape\":[9223372036854775807,3],"
               "\"data_offsets\":[0,2]}}",
               2, LOOM_ERR_FORMAT, "'w'", "overflows");
}
END_TEST

START_TEST(test_offsets)
{
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,"
               "8]}}",
               6, LOOM_ERR_RANGE, "'w'", "past the data section");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[7,"
               "7]}}",
               6, LOOM_ERR_RANGE, "'w'", "past the data section");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,"
               "2]}}",
               6, LOOM_ERR_FORMAT, "'w'", "backwards");
    /* past what a JSON integer holds: Jansson refuses it */
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,"
               "18446744073709551615]}}",
               6, LOOM_ERR_FORMAT, NULL, "not valid JSON");
}
END_TEST

/* issue 18: a header of odd length puts the data at odd addresses; the
 * kernels read through typed pointers, so each tensor's data must come out
 * aligned to its element size, holding the file's values. */
START_TEST(test_misaligned_data_read_safely)
{
    static const char header[] =
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
        "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[12,16]},"
        "\"c\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[16,17]}}";
    ck_assert_uint_eq((8 + strlen(header)) % 2, 1);
    unsigned char data[17];
    const float a[3] = {1.5f, -2.0f, 1e-3f};
    memcpy(data, a, sizeof a);
    const unsigned char b[4] = {0x80, 0x3f, 0x00, 0xc0}; /* 1.0, -2.0 */
    memcpy(data + 12, b, 4);
    data[16] = 7;
    const char *path = path_in(temp_dir(), "odd.safetensors");
    write_st(path, header, data, sizeof data);
    loom_st *st = NULL;
    loom_err err;
    ck_assert_msg(loom_st_open_file(path, &st, &err) == LOOM_OK, "%s", err.msg);
    const loom_tensor *ta = loom_st_find(st, "a");
    const loom_tensor *tb = loom_st_find(st, "b");
    ck_assert(ta && tb);
    ck_assert_uint_eq((uintptr_t)ta->data % 4, 0);
    ck_assert_uint_eq((uintptr_t)tb->data % 2, 0);
    float out[3];
    ck_assert_int_eq(loom_cpu_tensor_f32(ta, out, 3, &err), LOOM_OK);
    for (int i = 0; i < 3; i++)
        ck_assert(out[i] == a[i]);
    ck_assert(loom_cpu_load_f32(tb->data, tb->dtype, 1) == -2.0f);
    ck_assert_int_eq(((const unsigned char *)loom_st_find(st, "c")->data)[0],
                     7);
    loom_st_close(st);
}
END_TEST

START_TEST(test_overlap)
{
    expect_bad("{\"x\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
               "\"y\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[3,7]}}",
               8, LOOM_ERR_FORMAT, "'y'", "overlap");
    /* one inside another, listed the other way round */
    expect_bad("{\"y\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]},"
               "\"x\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}",
               8, LOOM_ERR_FORMAT, "'x'", "overlap");
    /* same range twice */
    expect_bad("{\"x\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
               "\"y\":{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
               8, LOOM_ERR_FORMAT, "'y'", "overlap");
    /* touching ranges and an empty tensor inside another are fine */
    const char *path = path_in(temp_dir(), "ok.safetensors");
    const unsigned char d[8] = {0};
    write_st(path,
             "{\"x\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
             "\"y\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]},"
             "\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,2]}}",
             d, sizeof d);
    loom_st *st = NULL;
    loom_err err;
    ck_assert_msg(loom_st_open_file(path, &st, &err) == LOOM_OK, "%s", err.msg);
    ck_assert_uint_eq(loom_st_count(st), 3);
    loom_st_close(st);
}
END_TEST

START_TEST(test_duplicate_in_file)
{
    expect_bad("{\"x\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
               "\"x\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}",
               8, LOOM_ERR_FORMAT, "x", "duplicate");
}
END_TEST

START_TEST(test_missing_file)
{
    const char *dir = temp_dir();
    loom_st *st = NULL;
    loom_err err;
    ck_assert_int_eq(loom_st_open_dir(dir, &st, &err), LOOM_ERR_NOT_FOUND);
    ck_assert_ptr_null(st);
    ck_assert(has(err.msg, dir));
    ck_assert(has(err.msg, "model.safetensors.index.json"));
    const char *p = path_in(dir, "nope.safetensors");
    ck_assert_int_eq(loom_st_open_file(p, &st, &err), LOOM_ERR_NOT_FOUND);
    ck_assert(has(err.msg, p));
}
END_TEST

/* ---------------------------------------------------------------- shards */

/* Two shards: "a.w" F32 [2] + "a.v" U8 [3] in 00001, "b.w" BF16 [2] in
 * 00002. `index` is the weight_map body. */
static const char *make_sharded(const char *index)
{
    const char *dir = temp_dir();
    const float f[2] = {1.5f, -4.0f};
    unsigned char d1[11];
    memcpy(d1, f, 8);
    d1[8] = 7;
    d1[9] = 8;
    d1[10] = 9;
    write_st(
        path_in(dir, "model-00001-of-00002.safetensors"),
        "{\"a.w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"a.v\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[8,11]}}",
        d1, sizeof d1);
    const unsigned char d2[4] = {0x80, 0x3f, 0x00, 0x41}; /* 1.0, 8.0 */
    write_st(
        path_in(dir, "model-00002-of-00002.safetensors"),
        "{\"b.w\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}"
        "}",
        d2, sizeof d2);
    char text[1024];
    snprintf(text, sizeof text,
             "{\"metadata\":{\"total_size\":15},\"weight_map\":{%s}}", index);
    write_bytes(path_in(dir, "model.safetensors.index.json"), text,
                strlen(text));
    return dir;
}

static const char good_index[] = "\"b.w\":\"model-00002-of-00002.safetensors\","
                                 "\"a.w\":\"model-00001-of-00002.safetensors\","
                                 "\"a.v\":\"model-00001-of-00002.safetensors\"";

START_TEST(test_sharded)
{
    const char *dir = make_sharded(good_index);
    loom_st *st = NULL;
    loom_err err;
    ck_assert_msg(loom_st_open_dir(dir, &st, &err) == LOOM_OK, "%s", err.msg);
    ck_assert_uint_eq(loom_st_count(st), 3);
    /* shards in file-name order, tensors in header order within each */
    ck_assert_str_eq(loom_st_at(st, 0)->name, "a.w");
    ck_assert_str_eq(loom_st_at(st, 1)->name, "a.v");
    ck_assert_str_eq(loom_st_at(st, 2)->name, "b.w");
    const loom_tensor *aw = loom_st_find(st, "a.w");
    ck_assert(f32_at(aw, 1) == -4.0f);
    const loom_tensor *av = loom_st_find(st, "a.v");
    ck_assert_uint_eq(((const unsigned char *)av->data)[2], 9);
    const loom_tensor *bw = loom_st_find(st, "b.w");
    uint16_t h[2];
    memcpy(h, bw->data, sizeof h);
    ck_assert(loom_bf16_to_f32(h[1]) == 8.0f);
    ck_assert(has(loom_st_file_of(st, bw), "model-00002-of-00002"));
    ck_assert(has(loom_st_file_of(st, aw), "model-00001-of-00002"));
    loom_st_close(st);
}
END_TEST

static void expect_dir_fail(const char *dir, loom_status code,
                            const char *part1, const char *part2)
{
    loom_st *st = NULL;
    loom_err err = {{0}};
    loom_status s = loom_st_open_dir(dir, &st, &err);
    ck_assert_msg(s == code, "status %d, expected %d: %s", s, code, err.msg);
    ck_assert_ptr_null(st);
    ck_assert_msg(has(err.msg, part1), "lacks '%s': %s", part1, err.msg);
    ck_assert_msg(has(err.msg, part2), "lacks '%s': %s", part2, err.msg);
}

START_TEST(test_shard_missing)
{
    const char *dir =
        make_sharded("\"a.w\":\"model-00001-of-00002.safetensors\","
                     "\"c.w\":\"model-00003-of-00002.safetensors\"");
    expect_dir_fail(dir, LOOM_ERR_NOT_FOUND, "model-00003-of-00002", "'c.w'");
}
END_TEST

START_TEST(test_index_names_absent_tensor)
{
    /* a.w is in 00001, but the index says 00002 */
    const char *dir =
        make_sharded("\"a.w\":\"model-00002-of-00002.safetensors\","
                     "\"b.w\":\"model-00002-of-00002.safetensors\","
                     "\"a.v\":\"model-00001-of-00002.safetensors\"");
    expect_dir_fail(dir, LOOM_ERR_FORMAT, "'a.w'", "00002-of-00002");

    /* a tensor no shard has */
    dir = make_sharded("\"a.w\":\"model-00001-of-00002.safetensors\","
                       "\"zz\":\"model-00002-of-00002.safetensors\"");
    expect_dir_fail(dir, LOOM_ERR_FORMAT, "'zz'", "lacks it");
}
END_TEST

START_TEST(test_duplicate_across_shards)
{
    const char *dir = make_sharded(good_index);
    /* a third shard that also holds a.w */
    const float f[2] = {0, 0};
    write_st(
        path_in(dir, "model-00003-of-00003.safetensors"),
        "{\"a.w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", f,
        sizeof f);
    char text[1024];
    snprintf(text, sizeof text,
             "{\"weight_map\":{%s,\"x\":\"model-00003-of-00003.safetensors\"}}",
             good_index);
    write_bytes(path_in(dir, "model.safetensors.index.json"), text,
                strlen(text));
    expect_dir_fail(dir, LOOM_ERR_FORMAT, "'a.w'", "00003-of-00003");
}
END_TEST

START_TEST(test_bad_index)
{
    const char *dir = make_sharded(good_index);
    const char *ip = path_in(dir, "model.safetensors.index.json");
    write_bytes(ip, "{\"weight_map\": [", 16);
    expect_dir_fail(dir, LOOM_ERR_FORMAT, ip, "not valid JSON");
    write_bytes(ip, "{\"metadata\": {}}", 16);
    expect_dir_fail(dir, LOOM_ERR_FORMAT, ip, "weight_map");
    write_bytes(ip, "{\"weight_map\": {}}", 18);
    expect_dir_fail(dir, LOOM_ERR_FORMAT, ip, "empty");
    const char up[] = "{\"weight_map\": {\"a.w\": \"../x.safetensors\"}}";
    write_bytes(ip, up, strlen(up));
    expect_dir_fail(dir, LOOM_ERR_FORMAT, "'a.w'", "plain file name");
    const char num[] = "{\"weight_map\": {\"a.w\": 3}}";
    write_bytes(ip, num, strlen(num));
    expect_dir_fail(dir, LOOM_ERR_FORMAT, "'a.w'", "plain file name");
    /* a shard that is itself broken: its error names it */
    const char bad[] = "{\"weight_map\": {\"a.w\": \"bad.safetensors\"}}";
    write_bytes(ip, bad, strlen(bad));
    write_st(
        path_in(dir, "bad.safetensors"),
        "{\"a.w\":{\"dtype\":\"F99\",\"shape\":[2],\"data_offsets\":[0,8]}}",
        "12345678", 8);
    expect_dir_fail(dir, LOOM_ERR_FORMAT, "bad.safetensors", "'a.w'");
}
END_TEST

/* ---------------------------------------------------------------- fixtures */

typedef struct want_list {
    char names[256][128];
    int64_t shapes[256][4];
    int ndims[256];
    int n;
} want_list;

static void want(want_list *w, const char *name, int nd, int64_t a, int64_t b,
                 int64_t c)
{
    ck_assert_int_lt(w->n, 256);
    snprintf(w->names[w->n], sizeof w->names[0], "%s", name);
    w->ndims[w->n] = nd;
    w->shapes[w->n][0] = a;
    w->shapes[w->n][1] = b;
    w->shapes[w->n][2] = c;
    w->n++;
}

/* Every expected tensor is present, BF16, of its shape, and readable (all
 * values finite); and the checkpoint holds nothing else. */
static void check_against(const char *model, const want_list *w)
{
    loom_st *st = NULL;
    loom_err err;
    ck_assert_msg(loom_st_open_dir(fixture(model), &st, &err) == LOOM_OK, "%s",
                  err.msg);
    ck_assert_uint_eq(loom_st_count(st), (size_t)w->n);
    for (int i = 0; i < w->n; i++) {
        const loom_tensor *t = loom_st_find(st, w->names[i]);
        ck_assert_msg(t != NULL, "%s: no %s", model, w->names[i]);
        ck_assert_int_eq(t->dtype, LOOM_DTYPE_BF16);
        ck_assert_msg(t->ndim == w->ndims[i], "%s: ndim %d", w->names[i],
                      t->ndim);
        uint64_t count = 1;
        for (int d = 0; d < w->ndims[i]; d++) {
            ck_assert_msg(t->shape[d] == w->shapes[i][d],
                          "%s: dim %d is %lld, spec says %lld", w->names[i], d,
                          (long long)t->shape[d], (long long)w->shapes[i][d]);
            count *= (uint64_t)t->shape[d];
        }
        ck_assert_uint_eq(t->nbytes, count * 2);
        for (uint64_t k = 0; k < count; k++) {
            uint16_t h;
            memcpy(&h, (const char *)t->data + 2 * k, 2);
            ck_assert_msg((h & 0x7f80u) != 0x7f80u, "%s[%llu] not finite",
                          w->names[i], (unsigned long long)k);
        }
    }
    loom_st_close(st);
}

static json_t *load_config(const char *model)
{
    char rel[256];
    snprintf(rel, sizeof rel, "%s/config.json", model);
    json_t *cfg = NULL;
    loom_err err;
    ck_assert_msg(loom_json_load_file(fixture(rel), &cfg, &err) == LOOM_OK,
                  "%s", err.msg);
    return cfg;
}

static int64_t ci(json_t *cfg, const char *key)
{
    json_t *v = json_object_get(cfg, key);
    ck_assert_msg(json_is_integer(v), "config lacks %s", key);
    return (int64_t)json_integer_value(v);
}

/* docs/specs/qwen35.md section 3, for the flat Qwen3.5 text checkpoint
 * (prefix "model.", untied lm_head). */
START_TEST(test_fixture_qwen35)
{
    json_t *cfg = load_config("models/qwen35-tiny");
    int64_t H = ci(cfg, "hidden_size"), V = ci(cfg, "vocab_size");
    int64_t I = ci(cfg, "intermediate_size"), L = ci(cfg, "num_hidden_layers");
    int64_t nh = ci(cfg, "num_attention_heads");
    int64_t nkv = ci(cfg, "num_key_value_heads"), hd = ci(cfg, "head_dim");
    int64_t Hk = ci(cfg, "linear_num_key_heads");
    int64_t Hv = ci(cfg, "linear_num_value_heads");
    int64_t dk = ci(cfg, "linear_key_head_dim");
    int64_t dv = ci(cfg, "linear_value_head_dim");
    int64_t K = ci(cfg, "linear_conv_kernel_dim");
    int64_t conv_dim = 2 * Hk * dk + Hv * dv;
    json_t *types = json_object_get(cfg, "layer_types");
    ck_assert_int_eq((int64_t)json_array_size(types), L);

    static want_list w;
    w.n = 0;
    want(&w, "model.embed_tokens.weight", 2, V, H, 0);
    want(&w, "model.norm.weight", 1, H, 0, 0);
    want(&w, "lm_head.weight", 2, V, H, 0);
    char n[128];
#define P(suffix)                                                              \
    (snprintf(n, sizeof n, "model.layers.%d.%s", (int)l, suffix), n)
    for (int64_t l = 0; l < L; l++) {
        want(&w, P("input_layernorm.weight"), 1, H, 0, 0);
        want(&w, P("post_attention_layernorm.weight"), 1, H, 0, 0);
        want(&w, P("mlp.gate_proj.weight"), 2, I, H, 0);
        want(&w, P("mlp.up_proj.weight"), 2, I, H, 0);
        want(&w, P("mlp.down_proj.weight"), 2, H, I, 0);
        const char *t = json_string_value(json_array_get(types, (size_t)l));
        if (strcmp(t, "linear_attention") == 0) {
            want(&w, P("linear_attn.in_proj_qkv.weight"), 2, conv_dim, H, 0);
            want(&w, P("linear_attn.in_proj_z.weight"), 2, Hv * dv, H, 0);
            want(&w, P("linear_attn.in_proj_b.weight"), 2, Hv, H, 0);
            want(&w, P("linear_attn.in_proj_a.weight"), 2, Hv, H, 0);
            want(&w, P("linear_attn.conv1d.weight"), 3, conv_dim, 1, K);
            want(&w, P("linear_attn.A_log"), 1, Hv, 0, 0);
            want(&w, P("linear_attn.dt_bias"), 1, Hv, 0, 0);
            want(&w, P("linear_attn.norm.weight"), 1, dv, 0, 0);
            want(&w, P("linear_attn.out_proj.weight"), 2, H, Hv * dv, 0);
        } else {
            ck_assert_str_eq(t, "full_attention");
            want(&w, P("self_attn.q_proj.weight"), 2, 2 * nh * hd, H, 0);
            want(&w, P("self_attn.k_proj.weight"), 2, nkv * hd, H, 0);
            want(&w, P("self_attn.v_proj.weight"), 2, nkv * hd, H, 0);
            want(&w, P("self_attn.o_proj.weight"), 2, H, nh * hd, 0);
            want(&w, P("self_attn.q_norm.weight"), 1, hd, 0, 0);
            want(&w, P("self_attn.k_norm.weight"), 1, hd, 0, 0);
        }
    }
#undef P
    json_decref(cfg);
    check_against("models/qwen35-tiny", &w);
}
END_TEST

/* docs/specs/nemotron-h.md section 3 (prefix "backbone.", untied head). The
 * layer kinds come from hybrid_override_pattern, or from layers_block_type
 * as transformers 5 writes them. */
START_TEST(test_fixture_nemotron)
{
    json_t *cfg = load_config("models/nemotron-h-tiny");
    int64_t H = ci(cfg, "hidden_size"), V = ci(cfg, "vocab_size");
    int64_t I = ci(cfg, "intermediate_size");
    int64_t nh = ci(cfg, "mamba_num_heads"), P = ci(cfg, "mamba_head_dim");
    int64_t N = ci(cfg, "ssm_state_size"), ng = ci(cfg, "n_groups");
    int64_t K = ci(cfg, "conv_kernel");
    int64_t nq = ci(cfg, "num_attention_heads");
    int64_t nkv = ci(cfg, "num_key_value_heads"), hd = ci(cfg, "head_dim");
    int64_t d_inner = nh * P, conv_dim = d_inner + 2 * ng * N;

    char kinds[64] = {0};
    const char *pat =
        json_string_value(json_object_get(cfg, "hybrid_override_pattern"));
    json_t *blocks = json_object_get(cfg, "layers_block_type");
    /* num_hidden_layers is the pattern's length (HF derives it so) */
    int64_t L = pat ? (int64_t)strlen(pat) : (int64_t)json_array_size(blocks);
    ck_assert_int_gt(L, 0);
    ck_assert_int_lt(L, (int64_t)sizeof kinds);
    for (int64_t l = 0; l < L; l++) {
        if (pat) {
            kinds[l] = pat[l];
            continue;
        }
        const char *b = json_string_value(json_array_get(blocks, (size_t)l));
        ck_assert_ptr_nonnull(b);
        kinds[l] =
            strcmp(b, "linear_attention") == 0 || strcmp(b, "mamba") == 0 ? 'M'
            : strcmp(b, "full_attention") == 0 || strcmp(b, "attention") == 0
                ? '*'
            : strcmp(b, "mlp") == 0 ? '-'
                                    : '?';
    }
    ck_assert_str_eq(kinds, "M-M*-");

    static want_list w;
    w.n = 0;
    want(&w, "backbone.embeddings.weight", 2, V, H, 0);
    want(&w, "backbone.norm_f.weight", 1, H, 0, 0);
    want(&w, "lm_head.weight", 2, V, H, 0);
    char n[128];
#define Q(suffix)                                                              \
    (snprintf(n, sizeof n, "backbone.layers.%d.%s", (int)l, suffix), n)
    for (int64_t l = 0; l < L; l++) {
        want(&w, Q("norm.weight"), 1, H, 0, 0);
        switch (kinds[l]) {
        case 'M':
            want(&w, Q("mixer.in_proj.weight"), 2,
                 2 * d_inner + 2 * ng * N + nh, H, 0);
            want(&w, Q("mixer.conv1d.weight"), 3, conv_dim, 1, K);
            want(&w, Q("mixer.conv1d.bias"), 1, conv_dim, 0, 0);
            want(&w, Q("mixer.A_log"), 1, nh, 0, 0);
            want(&w, Q("mixer.D"), 1, nh, 0, 0);
            want(&w, Q("mixer.dt_bias"), 1, nh, 0, 0);
            want(&w, Q("mixer.norm.weight"), 1, d_inner, 0, 0);
            want(&w, Q("mixer.out_proj.weight"), 2, H, d_inner, 0);
            break;
        case '*':
            want(&w, Q("mixer.q_proj.weight"), 2, nq * hd, H, 0);
            want(&w, Q("mixer.k_proj.weight"), 2, nkv * hd, H, 0);
            want(&w, Q("mixer.v_proj.weight"), 2, nkv * hd, H, 0);
            want(&w, Q("mixer.o_proj.weight"), 2, H, nq * hd, 0);
            break;
        case '-':
            want(&w, Q("mixer.up_proj.weight"), 2, I, H, 0);
            want(&w, Q("mixer.down_proj.weight"), 2, H, I, 0);
            break;
        default:
            ck_abort_msg("layer %d kind %c", (int)l, kinds[l]);
        }
    }
#undef Q
    json_decref(cfg);
    check_against("models/nemotron-h-tiny", &w);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("safetensors");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_valid_file);
    tcase_add_test(tc, test_valid_memory_and_dtypes);
    tcase_add_test(tc, test_truncated);
    tcase_add_test(tc, test_header_length);
    tcase_add_test(tc, test_not_json);
    tcase_add_test(tc, test_bad_entries);
    tcase_add_test(tc, test_shape_size_mismatch);
    tcase_add_test(tc, test_offsets);
    tcase_add_test(tc, test_overlap);
    tcase_add_test(tc, test_duplicate_in_file);
    tcase_add_test(tc, test_missing_file);
    tcase_add_test(tc, test_sharded);
    tcase_add_test(tc, test_shard_missing);
    tcase_add_test(tc, test_index_names_absent_tensor);
    tcase_add_test(tc, test_duplicate_across_shards);
    tcase_add_test(tc, test_bad_index);
    tcase_add_test(tc, test_misaligned_data_read_safely);
    tcase_add_test(tc, test_fixture_qwen35);
    tcase_add_test(tc, test_fixture_nemotron);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return run_suite(suite());
}
