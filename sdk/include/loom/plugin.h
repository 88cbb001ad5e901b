/* The whole loom plugin ABI: what a model-family or drafter plugin exports and
 * what the host hands it. Self-contained C (C99 and later), standard headers
 * only; plugins compile against this file alone.
 *
 * Versioning (see docs/plugins.md): `abi_major` changes break; the core
 * refuses a plugin whose major differs. Minor versions only append fields to
 * the end of structs and add interface ids. Every struct crossing the ABI
 * starts with `struct_size` (arrays of structs carry their element size):
 * a reader accepts a smaller struct (an older minor), reads only the fields
 * inside it (LOOM_HAS_FIELD) and takes the documented default for the rest;
 * a writer fills only what the reader's struct_size holds. The core calls
 * plugins only through its dispatchers (core/src/model/family.c, drafter.c),
 * which check sizes and apply the defaults of optional members.
 *
 * Lifetimes: a pointer a plugin receives is valid for the call it is passed
 * to unless its member says otherwise.
 *
 * Thread tags used below:
 *   [any-thread]   may be called from any thread, concurrently with anything.
 *   [load-thread]  called by the thread that loads/opens; never concurrently
 *                  with another call on the same object.
 *   [lane-thread]  called by the one thread that runs a model's lane; calls on
 *                  one model are never concurrent with each other.
 */
#ifndef LOOM_PLUGIN_H
#define LOOM_PLUGIN_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_ABI_MAJOR 2
#define LOOM_ABI_MINOR 5

#if defined(_WIN32)
#define LOOM_EXPORT __declspec(dllexport)
#define LOOM_ABI    __cdecl
#else
#define LOOM_EXPORT __attribute__((visibility("default")))
#define LOOM_ABI
#endif

/* ---------------------------------------------------------------- status */

/* Every fallible call returns a loom_status: 0 on success, a negative code
 * from this one table otherwise, with a message in the caller's loom_err. */
#define LOOM_STATUS_MAP(XX)                                                    \
    XX(OK, 0, "ok")                                                            \
    XX(ERR_INVALID, -1, "invalid argument")                                    \
    XX(ERR_NOMEM, -2, "out of memory")                                         \
    XX(ERR_IO, -3, "input/output error")                                       \
    XX(ERR_FORMAT, -4, "malformed input")                                      \
    XX(ERR_NOT_FOUND, -5, "not found")                                         \
    XX(ERR_UNSUPPORTED, -6, "not supported")                                   \
    XX(ERR_RANGE, -7, "out of range")                                          \
    XX(ERR_ABI, -8, "ABI mismatch")                                            \
    XX(ERR_DEVICE, -9, "device error")                                         \
    XX(ERR_CANCELLED, -10, "cancelled")                                        \
    XX(ERR_FULL, -11, "capacity exhausted")                                    \
    XX(ERR_STATE, -12, "call not valid in this state")                         \
    XX(ERR_DEVICE_LOST, -13, "device lost")

typedef int32_t loom_status;
enum loom_status_code {
#define LOOM_STATUS_ENUM(name, value, text) LOOM_##name = value,
    LOOM_STATUS_MAP(LOOM_STATUS_ENUM)
#undef LOOM_STATUS_ENUM
};

/* The message that goes with a failed call. Callers own it (usually on the
 * stack); callees write it only when they fail. */
typedef struct loom_err {
    char msg[512];
} loom_err;

/* Sets err (when not NULL) and returns code, so a failure reads as
 * `return loom_err_set(err, LOOM_ERR_FORMAT, "%s: ...", path);`. */
static inline loom_status loom_err_set(loom_err *err, loom_status code,
                                       const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static inline loom_status loom_err_set(loom_err *err, loom_status code,
                                       const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* ---------------------------------------------------------------- dtypes */

typedef enum loom_dtype {
    LOOM_DTYPE_F32 = 0,
    LOOM_DTYPE_F16 = 1,
    LOOM_DTYPE_BF16 = 2,
    LOOM_DTYPE_I32 = 3,
    LOOM_DTYPE_U32 = 4,
    LOOM_DTYPE_I8 = 5,
    LOOM_DTYPE_U8 = 6,
    LOOM_DTYPE_F8_E4M3 = 7,
    LOOM_DTYPE_I64 = 8,
    LOOM_DTYPE_F64 = 9,
    LOOM_DTYPE_I16 = 10,
    LOOM_DTYPE_U16 = 11,
    LOOM_DTYPE_BOOL = 12,
    LOOM_DTYPE_COUNT
} loom_dtype;

static inline float loom_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Round to nearest even; NaN stays NaN (quiet). */
static inline uint16_t loom_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float loom_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else {
            /* subnormal: shift the mantissa up until it is normal */
            exp = 127 - 15 + 1;
            while ((man & 0x400u) == 0) {
                man <<= 1;
                exp--;
            }
            u = sign | (exp << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Round to nearest even, overflow to infinity, NaN stays NaN. */
static inline uint16_t loom_f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u);
    if (absu >= 0x477ff000u) /* rounds to >= 65520: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (absu < 0x38800000u) {
        /* result is subnormal or zero: value / 2^-24, rounded to even */
        if (absu < 0x33000000u)
            return sign;
        uint32_t e = absu >> 23;
        uint32_t m = (absu & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u)))
            q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = absu + 0xfffu + ((absu >> 13) & 1u);
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

/* ---------------------------------------------------------------- config */

/* A read-only view of a parsed JSON value owned by the host (config.json and
 * friends). Valid until the checkpoint it came from is closed. */
typedef struct loom_json loom_json;

typedef enum loom_json_type {
    LOOM_JSON_MISSING = 0, /* NULL node: key absent */
    LOOM_JSON_NULL,
    LOOM_JSON_BOOL,
    LOOM_JSON_INT,
    LOOM_JSON_REAL,
    LOOM_JSON_STRING,
    LOOM_JSON_ARRAY,
    LOOM_JSON_OBJECT
} loom_json_type;

/* An opened checkpoint directory (config, tensors). Owned by the host; valid
 * until the host closes it, which it does only after the plugin's model made
 * from it is closed. */
typedef struct loom_checkpoint loom_checkpoint;

/* ---------------------------------------------------------------- sizes */

/* Whether a struct that says it is `struct_size` bytes long holds `member`
 * whole: a reader of an older (smaller) struct reads only what is inside
 * and takes the documented default for the rest. */
#define LOOM_HAS_FIELD(size, type, member)                                     \
    ((size_t)(size) >=                                                         \
     offsetof(type, member) + sizeof(((const type *)0)->member))

/* ---------------------------------------------------------------- tensors */

#define LOOM_MAX_DIMS 8

/* One tensor of a checkpoint, memory-mapped. `data` points into the mapping
 * and stays valid while the checkpoint is open. Little-endian hosts only.
 * Filled by the host up to the caller's struct_size. */
typedef struct loom_tensor {
    uint32_t struct_size;
    const char *name; /* owned by the host, valid while the checkpoint is */
    loom_dtype dtype;
    int32_t ndim;
    int64_t shape[LOOM_MAX_DIMS];
    const void *data;
    uint64_t nbytes;
} loom_tensor;

/* A 2-D linear weight `[rows = out, cols = in]`, either plain (F32, F16,
 * BF16) or MLX affine-quantized: `q` is U32 `[rows, cols*bits/32]`, element j
 * of a word in bits [bits*j, bits*(j+1)) LSB first; `scales`/`biases` are
 * `[rows, cols/group_size]` (F32, F16 or BF16); w = scale * q + bias.
 * Pointers are into the checkpoint's mapping, valid while it is open. */
typedef struct loom_weight {
    uint32_t struct_size;
    loom_dtype dtype; /* of `data`; LOOM_DTYPE_U32 when quantized */
    int64_t rows, cols;
    const void *data;
    int32_t bits;       /* 0 when not quantized, else 2, 3, 4, 5, 6 or 8 */
    int32_t group_size; /* quantized only */
    loom_dtype scale_dtype;
    const void *scales;
    const void *biases;
} loom_weight;

/* Bytes of a linear weight's data, plus scales and biases when quantized. */
static inline uint64_t loom_weight_nbytes(const loom_weight *w)
{
    uint64_t es = w->dtype == LOOM_DTYPE_F32 ? 4 : 2;
    if (w->bits == 0)
        return (uint64_t)w->rows * (uint64_t)w->cols * es;
    uint64_t ss = w->scale_dtype == LOOM_DTYPE_F32 ? 4 : 2;
    return (uint64_t)w->rows * ((uint64_t)w->cols * (uint64_t)w->bits / 8) +
           2 * (uint64_t)w->rows * (uint64_t)(w->cols / w->group_size) * ss;
}

/* ---------------------------------------------------------------- views */

typedef enum loom_mem_kind {
    LOOM_MEM_HOST = 0,
    LOOM_MEM_DEVICE = 1 /* device memory of the engine's loom_cuda table */
} loom_mem_kind;

#define LOOM_VIEW_DIMS 4

/* A tensor that crosses the ABI (logits, taps, hidden rows, features): its
 * memory kind, dtype, shape and strides (in elements, outermost first), and
 * where it lives. The owner is whoever made it (said at each use); a view is
 * valid for the call it is passed to unless said otherwise. A view with
 * ndim == 0 is empty ("none asked"). Views are embedded by value in other
 * structs (loom_output, loom_proposals), so loom_view is frozen for every
 * 2.x minor: it grows only with a major, and a reader refuses a view whose
 * struct_size is not at least sizeof(loom_view) (LOOM_ERR_INVALID). */
typedef struct loom_view {
    uint32_t struct_size;
    int32_t kind; /* loom_mem_kind */
    loom_dtype dtype;
    int32_t ndim;
    int64_t shape[LOOM_VIEW_DIMS];
    int64_t strides[LOOM_VIEW_DIMS];
    void *data;          /* LOOM_MEM_HOST */
    uint64_t device_ptr; /* LOOM_MEM_DEVICE: a loom_cu_ptr */
} loom_view;

/* A dense host float32 view of shape [rows, cols]. */
static inline loom_view loom_view_host_f32(float *data, int64_t rows,
                                           int64_t cols)
{
    loom_view v;
    memset(&v, 0, sizeof v);
    v.struct_size = sizeof v;
    v.kind = LOOM_MEM_HOST;
    v.dtype = LOOM_DTYPE_F32;
    v.ndim = 2;
    v.shape[0] = rows;
    v.shape[1] = cols;
    v.strides[0] = cols;
    v.strides[1] = 1;
    v.data = data;
    return v;
}

/* The host float32 row `r` of a dense 2-D host view, or NULL when the view
 * is not that (device memory, another dtype, out of range). */
static inline float *loom_view_row_f32(const loom_view *v, int64_t r)
{
    if (!v || v->kind != LOOM_MEM_HOST || v->dtype != LOOM_DTYPE_F32 ||
        v->ndim < 1 || r < 0 || r >= v->shape[0] || !v->data)
        return NULL;
    return (float *)v->data + r * v->strides[0];
}

/* ---------------------------------------------------------------- host */

typedef enum loom_log_level {
    LOOM_LOG_ERROR = 0,
    LOOM_LOG_WARN = 1,
    LOOM_LOG_INFO = 2,
    LOOM_LOG_DEBUG = 3
} loom_log_level;

/* What memory is for; the account and the budget are kept by use and kind
 * (host bytes through loom_host's account, device bytes through loom_cuda's
 * alloc and free). */
typedef enum loom_mem_use {
    LOOM_MEM_WEIGHTS = 0,
    LOOM_MEM_CACHE = 1,   /* per-stream caches: KV pages, recurrent state */
    LOOM_MEM_SCRATCH = 2, /* activations, logits, row tables */
    LOOM_MEM_GRAPHS = 3,
    LOOM_MEM_DRAFTER = 4,
    LOOM_MEM_USE_COUNT
} loom_mem_use;

/* Work split over the host's thread pool: fn is called with disjoint
 * [begin, end) ranges covering [0, n), possibly concurrently. */
typedef void(LOOM_ABI *loom_range_fn)(void *ctx, int64_t begin, int64_t end);

/* Receives named geometry fields from a family's `geometry` call. Owned by
 * the host; valid for that call. */
typedef struct loom_fields {
    uint32_t struct_size;
    void *ctx;
    void(LOOM_ABI *i64)(void *ctx, const char *key, int64_t value);
    void(LOOM_ABI *f64)(void *ctx, const char *key, double value);
    void(LOOM_ABI *str)(void *ctx, const char *key, const char *value);
} loom_fields;

struct loom_cuda; /* sdk/include/loom/cuda.h */

/* The services the core gives a plugin. Owned by the host, one table per
 * loaded plugin (so log lines name the plugin); valid from the plugin's
 * first call until it is unloaded. Every member is [any-thread] and never
 * NULL in a table of this struct_size. */
typedef struct loom_host {
    uint32_t struct_size;
    uint16_t abi_major, abi_minor;

    /* One line, prefixed with the plugin's name. */
    void(LOOM_ABI *log)(const struct loom_host *host, loom_log_level level,
                        const char *fmt, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 3, 4)))
#endif
        ;

    /* config.json of the checkpoint; `text_config` is the object under
     * "text_config" when present, else the root. generation_config may be
     * NULL when the file is absent. Valid while the checkpoint is open. */
    const loom_json *(LOOM_ABI *config)(const loom_checkpoint *ckpt);
    const loom_json *(LOOM_ABI *text_config)(const loom_checkpoint *ckpt);
    const loom_json *(LOOM_ABI *generation_config)(const loom_checkpoint *ckpt);
    const char *(LOOM_ABI *checkpoint_path)(const loom_checkpoint *ckpt);

    /* JSON access; every function accepts NULL and answers "missing". */
    loom_json_type(LOOM_ABI *json_type)(const loom_json *v);
    const loom_json *(LOOM_ABI *json_get)(const loom_json *obj,
                                          const char *key);
    size_t(LOOM_ABI *json_len)(const loom_json *arr); /* 0 if not array */
    const loom_json *(LOOM_ABI *json_at)(const loom_json *arr, size_t i);
    int64_t(LOOM_ABI *json_int)(const loom_json *v);      /* REAL truncates */
    double(LOOM_ABI *json_real)(const loom_json *v);      /* INT converts */
    int(LOOM_ABI *json_bool)(const loom_json *v);         /* 1, 0 */
    const char *(LOOM_ABI *json_str)(const loom_json *v); /* NULL if not */

    /* Tensors. `out->struct_size` says how much the caller's struct holds.
     * A missing one is LOOM_ERR_NOT_FOUND naming the tensor and checkpoint. */
    loom_status(LOOM_ABI *tensor_find)(const loom_checkpoint *ckpt,
                                       const char *name, loom_tensor *out,
                                       loom_err *err);
    /* Iterates names starting with `prefix` ("" for all) in file order:
     * start with *cursor = 0; returns 1 and fills `out` while there are
     * more, 0 at the end (and, logged, for an out->struct_size smaller than
     * 2.0's). */
    int(LOOM_ABI *tensor_next)(const loom_checkpoint *ckpt, const char *prefix,
                               size_t *cursor, loom_tensor *out);
    /* A linear weight named by its module path `base` ("model.layers.0.
     * mlp.up_proj"): `base.weight` as is, or with `base.scales` and
     * `base.biases` when config.json says it is quantized. Checks that it is
     * [rows, cols] when those are > 0. */
    loom_status(LOOM_ABI *weight_find)(const loom_checkpoint *ckpt,
                                       const char *base, int64_t rows,
                                       int64_t cols, loom_weight *out,
                                       loom_err *err);

    /* The thread pool. n_threads counts the caller. */
    int(LOOM_ABI *n_threads)(const struct loom_host *host);
    void(LOOM_ABI *parallel_for)(const struct loom_host *host, int64_t n,
                                 loom_range_fn fn, void *ctx);

    /* CPU kernels shared by every family, parallel over the pool.
     * y[t, 0..rows) = W x[t, 0..cols) for t < n_tok; x and y are dense
     * float32 row-major. */
    void(LOOM_ABI *matmul)(const struct loom_host *host, const loom_weight *w,
                           const float *x, float *y, int64_t n_tok);
    /* Row `row` of w as float32 into out[0..cols) (embedding lookup). */
    void(LOOM_ABI *weight_row)(const loom_weight *w, int64_t row, float *out);

    /* Memory accounting: a plugin reports the host bytes it holds (device
     * bytes are accounted by loom_cuda's alloc/free). A positive delta that
     * would pass the engine's budget for that kind is refused with
     * LOOM_ERR_FULL naming the use and the bytes, and not counted; an
     * unknown kind or use is LOOM_ERR_INVALID. `err` may be NULL. */
    loom_status(LOOM_ABI *account)(const struct loom_host *host,
                                   loom_mem_kind kind, loom_mem_use use,
                                   int64_t delta_bytes, loom_err *err);

    /* The engine's device table when a driver and device were found and the
     * engine runs on it, else NULL. Valid until the engine closes. */
    const struct loom_cuda *(LOOM_ABI *cuda)(const struct loom_host *host);

    /* Since 2.2. matmul for the rows of prompt chunks: a matrix-matrix
     * kernel whose results differ from matmul's within a bound the core
     * states (core/src/model/matmul_prompt.c) and do not depend on n_tok,
     * so windows and one-row steps keep going through matmul. [optional:
     * a plugin checks LOOM_HAS_FIELD and calls matmul when it is absent] */
    void(LOOM_ABI *matmul_prompt)(const struct loom_host *host,
                                  const loom_weight *w, const float *x,
                                  float *y, int64_t n_tok);

    /* Since 2.5. Zeroed memory for weights a family copies out of the
     * checkpoint to keep them resident: the core's policy (huge pages
     * where the OS has them), 64-byte aligned at least; NULL when there
     * is none. Accounting stays the plugin's (account). Freed with
     * free_resident and the same size. [optional: a plugin checks
     * LOOM_HAS_FIELD and uses malloc when it is absent] */
    void *(LOOM_ABI *alloc_resident)(const struct loom_host *host,
                                     size_t bytes);
    void(LOOM_ABI *free_resident)(const struct loom_host *host, void *p,
                                  size_t bytes);
} loom_host;

/* ---------------------------------------------------------------- rounds */

/* A family's per-stream cache; the plugin defines it. */
typedef struct loom_cache loom_cache;
/* A family's loaded model; the plugin defines it. */
typedef struct loom_model loom_model;

enum loom_row_flags {
    /* write this row's logits to the output */
    LOOM_ROW_LOGITS = 1u << 0,
    /* write this row's tapped features (drafters) */
    LOOM_ROW_TAP = 1u << 1,
    /* this row belongs to the cache's window: a later `commit` keeps a
     * prefix of the window's rows */
    LOOM_ROW_SPECULATIVE = 1u << 2
};

/* One token of one stream. Rows of one cache are contiguous in a round and
 * in order of position; the first one's position equals the cache's length.
 * A cache carries at most one window (rows flagged SPECULATIVE, at most
 * LOOM_MAX_WINDOW, all after its plain rows). */
typedef struct loom_row {
    loom_cache *cache;
    int32_t token;
    int32_t position; /* absolute position in the stream, from 0 */
    int32_t parent;   /* -1: the previous row of the stream (chains) */
    uint32_t flags;
} loom_row;

#define LOOM_MAX_WINDOW 16

/* Owned by the lane; valid for the forward it is passed to. `row_size` is
 * sizeof(loom_row) as the lane knows it: read row i at
 * (const char *)rows + i * row_size. */
typedef struct loom_round {
    uint32_t struct_size;
    uint32_t row_size;
    const loom_row *rows;
    int32_t n_rows;
} loom_round;

/* The i-th row of a round, whatever the size of the lane's loom_row. */
static inline const loom_row *loom_round_row(const loom_round *r, int32_t i)
{
    return (const loom_row *)((const char *)r->rows +
                              (size_t)i * (size_t)r->row_size);
}

/* Where forward writes; views owned by the lane, valid for that forward.
 * logits: [k, vocab] float32, row k being the k-th row flagged
 * LOOM_ROW_LOGITS in round order. taps: [k, n_taps * hidden] for the k-th
 * row flagged LOOM_ROW_TAP (ndim 0 when no drafter asked). On a device the
 * views are device memory of the engine's table and forward is
 * stream-ordered: it does not synchronise. */
typedef struct loom_output {
    uint32_t struct_size;
    loom_view logits;
    loom_view taps;
} loom_output;

enum loom_device_kind {
    LOOM_DEVICE_AUTO = 0,
    LOOM_DEVICE_CPU = 1,
    LOOM_DEVICE_CUDA = 2
};

enum loom_model_caps {
    LOOM_CAP_WINDOWS = 1u << 0, /* LOOM_ROW_SPECULATIVE + commit */
    LOOM_CAP_TREES = 1u << 1,   /* rows with parent != -1 */
    LOOM_CAP_TAPS = 1u << 2     /* LOOM_ROW_TAP, loom.target/1 set_taps */
};

/* Filled by the host before open; valid for the open call only (a family
 * copies what it keeps). */
typedef struct loom_model_options {
    uint32_t struct_size;
    /* loom_device_kind: CPU, CUDA, or AUTO only when the host has a device:
     * the family then opens on CUDA if its kernels take the model (a
     * format they refuse opens on the CPU) */
    int32_t device;
    int64_t max_context; /* 0: the model's own limit */
    int32_t max_rows;    /* most rows one forward will be given; 0: 512 */
    int32_t max_streams; /* caches alive at once, for pools; 0: unbounded */
    /* Since 2.4: 1 when no round will carry a speculative window (no
     * drafter), so that with max_streams 1 every round is one stream's
     * prompt rows or its one-row step; 0: windows may come. */
    int32_t no_windows;
} loom_model_options;

#define LOOM_MAX_EOS 8

/* Filled by `describe` up to info->struct_size (set by the caller). Strings
 * owned by the model, valid until close. */
typedef struct loom_model_info {
    uint32_t struct_size;
    int32_t vocab;
    int32_t hidden;
    int32_t n_layers;
    int32_t n_eos;
    int32_t eos[LOOM_MAX_EOS]; /* config + generation_config, merged once */
    int64_t max_context;
    /* one char per layer: 'L' linear attention, 'A' attention, 'M' Mamba-2,
     * '-' MLP only, 'E' MoE */
    const char *layer_kinds;
    uint64_t cache_bytes_fixed;     /* per stream, whatever its length */
    uint64_t cache_bytes_per_token; /* per stream per cached token */
    int32_t max_rows;
    uint32_t caps; /* loom_model_caps */
    int32_t device;
    loom_dtype compute_dtype;
    /* Weight bytes one single-token decode step reads: every weight it
     * multiplies by, the output head included, the embedding table not
     * (one row of it is read). MoE layers count their shared weights, the
     * router and top_k of their experts. 0 when the family does not say. */
    uint64_t weight_bytes_per_token;
} loom_model_info;

/* ---------------------------------------------------------------- family */

#define LOOM_FAMILY_ID "loom.family/2"

/* Members marked [optional] may be NULL; the core's dispatcher then does
 * what the member's comment says. Every other member is required. */
typedef struct loom_family_i {
    uint32_t struct_size;

    /* Describes the geometry parsed from config.json, field by field, without
     * loading weights. Refuses a bad config with the field's name and value.
     * [optional: no fields] [load-thread] */
    loom_status(LOOM_ABI *geometry)(const loom_host *host,
                                    const loom_checkpoint *ckpt,
                                    const loom_fields *out, loom_err *err);

    /* Binds the weights and makes the model. On failure nothing is left
     * allocated and *model is untouched. [load-thread] */
    loom_status(LOOM_ABI *open)(const loom_host *host,
                                const loom_checkpoint *ckpt,
                                const loom_model_options *options,
                                loom_model **model, loom_err *err);
    /* Releases everything open made. NULL is accepted. [load-thread] */
    void(LOOM_ABI *close)(loom_model *model);

    /* [any-thread] (reads only what open fixed) */
    void(LOOM_ABI *describe)(const loom_model *model, loom_model_info *info);

    /* A stream's cache, empty. [lane-thread] */
    loom_status(LOOM_ABI *cache_new)(loom_model *model, loom_cache **cache,
                                     loom_err *err);
    /* Empties a cache for reuse by another stream. [optional: cache_free
     * then cache_new] [lane-thread] */
    void(LOOM_ABI *cache_reset)(loom_model *model, loom_cache *cache);
    /* NULL is accepted. [lane-thread] */
    void(LOOM_ABI *cache_free)(loom_model *model, loom_cache *cache);

    /* One forward over a round. On failure no cache has changed. A round
     * that holds a row of a cache whose window is not committed yet is
     * refused with LOOM_ERR_STATE. [lane-thread] */
    loom_status(LOOM_ABI *forward)(loom_model *model, const loom_round *round,
                                   const loom_output *out, loom_err *err);

    /* After a forward that gave `cache` a window of n rows: keep the first
     * `kept` of them (0..n) and leave the cache exactly as if only those had
     * been fed. Refused with LOOM_ERR_STATE when the cache has no window.
     * [optional: LOOM_CAP_WINDOWS is off and the lane sends no windows]
     * [lane-thread] */
    loom_status(LOOM_ABI *commit)(loom_model *model, loom_cache *cache,
                                  int32_t kept, loom_err *err);

    /* An extension of this opened model by id (LOOM_TARGET_ID, ...), or NULL
     * when this model (on this device) has none. The vtable is static or
     * owned by the model, valid until close. [optional: none] [any-thread] */
    const void *(LOOM_ABI *get_extension)(const loom_model *model,
                                          const char *id);

    /* Since 2.2. Makes `dst` an exact copy of `src`: its length, K/V rows
     * and recurrent and conv state, so that the same rows fed to either
     * give bit-identical logits (n streams of one prompt share its
     * prefill). dst's old contents are dropped; src is unchanged. Refused
     * with LOOM_ERR_STATE when src has an uncommitted window; on failure
     * dst is empty or unchanged, never half-copied state that reads as
     * valid. On a device the copy is stream-ordered. [optional: the lane
     * prefills each stream itself; a 2.1 core never calls it]
     * [lane-thread] */
    loom_status(LOOM_ABI *cache_copy)(loom_model *model, loom_cache *dst,
                                      const loom_cache *src, loom_err *err);
} loom_family_i;

/* ---------------------------------------------------------------- target */

/* What a drafter reaches of its target model: the token embedding, the
 * output head (final norm + lm_head) and which layers' outputs forward taps.
 * Views are owned by the caller and of the model's device. [lane-thread],
 * except set_taps [load-thread] before the first forward. */
#define LOOM_TARGET_ID "loom.target/1"

typedef struct loom_target_i {
    uint32_t struct_size;
    /* hidden[i, 0..hidden) = embedding of tokens[i], i < n; float32. */
    loom_status(LOOM_ABI *embed)(loom_model *model, const int32_t *tokens,
                                 int32_t n, const loom_view *hidden,
                                 loom_err *err);
    /* logits[i, 0..vocab) = lm_head(final_norm(hidden[i])), i < n. */
    loom_status(LOOM_ABI *head)(loom_model *model, const loom_view *hidden,
                                int32_t n, const loom_view *logits,
                                loom_err *err);
    /* Rows flagged LOOM_ROW_TAP get the outputs of these layers, in this
     * order, in out->taps. The ids are copied. n = 0 turns taps off. */
    loom_status(LOOM_ABI *set_taps)(loom_model *model, const int32_t *layers,
                                    int32_t n, loom_err *err);
    /* logits[i, 0..vocab) = lm_head(hidden[i]), without the final norm: for
     * drafters that norm their own output (DFlash). [optional: NULL, and a
     * drafter that needs it refuses the target] */
    loom_status(LOOM_ABI *lm_head)(loom_model *model, const loom_view *hidden,
                                   int32_t n, const loom_view *logits,
                                   loom_err *err);
} loom_target_i;

/* ---------------------------------------------------------------- drafter */

#define LOOM_DRAFTER_ID "loom.drafter/2"

typedef struct loom_drafter loom_drafter;

/* The target a drafter opens with: valid until the drafter is closed (the
 * core closes drafters before their target). */
typedef struct loom_target {
    uint32_t struct_size;
    const loom_model_info *info;
    loom_model *model;
    const loom_target_i *ext; /* NULL when the family has no loom.target/1 */
} loom_target;

/* Filled by `needs`; `taps` owned by the drafter, valid until close. */
typedef struct loom_drafter_needs {
    uint32_t struct_size;
    int32_t n_taps;
    const int32_t *taps; /* target layer ids */
    int32_t block_size;  /* most tokens one draft proposes, plus one */
    int32_t mask_token;
} loom_drafter_needs;

/* Where `draft` writes, owned by the lane. Stream i's proposals are
 * tokens[i*max .. i*max + n_out[i]), each with parents[...] (-1: the
 * previous proposal, or the stream's last token for the first); `logits`
 * is [n_streams*max, vocab] when the lane asks (ndim > 0) and the drafter
 * has them, else left alone. */
typedef struct loom_proposals {
    uint32_t struct_size;
    int32_t max;
    int32_t *tokens;
    int32_t *parents;
    int32_t *n_out;
    loom_view logits;
} loom_proposals;

typedef struct loom_draft_stream loom_draft_stream; /* drafter-defined */

typedef struct loom_drafter_i {
    uint32_t struct_size;
    /* [optional: no fields] [load-thread] */
    loom_status(LOOM_ABI *geometry)(const loom_host *host,
                                    const loom_checkpoint *ckpt,
                                    const loom_fields *out, loom_err *err);
    /* Refuses a target it does not fit (vocab, hidden, tap ids, a missing
     * loom.target/1 it needs). [load-thread] */
    loom_status(LOOM_ABI *open)(const loom_host *host,
                                const loom_checkpoint *ckpt,
                                const loom_target *target,
                                loom_drafter **drafter, loom_err *err);
    /* NULL is accepted. [load-thread] */
    void(LOOM_ABI *close)(loom_drafter *drafter);
    /* [any-thread] */
    void(LOOM_ABI *needs)(const loom_drafter *drafter, loom_drafter_needs *req);
    /* [lane-thread] */
    loom_status(LOOM_ABI *stream_new)(loom_drafter *drafter,
                                      loom_draft_stream **s, loom_err *err);
    /* NULL is accepted. [lane-thread] */
    void(LOOM_ABI *stream_free)(loom_drafter *drafter, loom_draft_stream *s);
    /* The target's tapped features of newly committed rows: a view
     * [n, n_taps * hidden] and their positions[n]. [optional: the drafter
     * asked for no taps] [lane-thread] */
    loom_status(LOOM_ABI *absorb)(loom_drafter *drafter, loom_draft_stream *s,
                                  const loom_view *features,
                                  const int32_t *positions, int32_t n,
                                  loom_err *err);
    /* Proposes up to out->max tokens after last[i] for each stream.
     * [lane-thread] */
    loom_status(LOOM_ABI *draft)(loom_drafter *drafter,
                                 loom_draft_stream *const *streams,
                                 const int32_t *last, int32_t n_streams,
                                 const loom_proposals *out, loom_err *err);

    /* Since 2.1. The tokens of newly committed rows, tokens[i] at
     * positions[i], i < n: the same rows, in the same order and at the
     * same time, as absorb gets (prompt rows, then each window's kept
     * rows), whether or not the drafter asked for taps. A first position
     * below the stream's length replaces its tail. [optional: the drafter
     * reads no tokens; a 2.0 core never calls it] [lane-thread] */
    loom_status(LOOM_ABI *absorb_tokens)(loom_drafter *drafter,
                                         loom_draft_stream *s,
                                         const int32_t *tokens,
                                         const int32_t *positions, int32_t n,
                                         loom_err *err);
} loom_drafter_i;

/* ---------------------------------------------------------------- entry */

typedef enum loom_plugin_kind {
    LOOM_PLUGIN_FAMILY = 1,
    LOOM_PLUGIN_DRAFTER = 2
} loom_plugin_kind;

/* The one thing a plugin exports (through loom_plugin_entry). A static
 * const object owned by the plugin, valid while it is loaded. */
typedef struct loom_plugin {
    uint16_t abi_major;   /* LOOM_ABI_MAJOR */
    uint16_t abi_minor;   /* LOOM_ABI_MINOR */
    uint32_t struct_size; /* sizeof(loom_plugin) */
    const char *name;     /* short, unique: "qwen35" */
    const char *version;  /* the plugin's own version: "0.1.0" */
    int32_t kind;         /* loom_plugin_kind */
    const char *description;

    /* Scores a checkpoint: 0 = not mine, higher = better fit. Reads
     * config.json through the host; touches no device. [any-thread] */
    int32_t(LOOM_ABI *probe)(const loom_host *host,
                             const loom_checkpoint *ckpt);
    /* A versioned vtable by id (LOOM_FAMILY_ID, LOOM_DRAFTER_ID, ...) or NULL
     * when the plugin has no such interface. [any-thread] */
    const void *(LOOM_ABI *get_interface)(const char *id);
} loom_plugin;

#define LOOM_ENTRY_SYMBOL "loom_plugin_entry"
typedef const loom_plugin *(LOOM_ABI *loom_plugin_entry_fn)(void);

/* Each plugin defines exactly this function; it must do no work beyond
 * returning its static descriptor. */
LOOM_EXPORT const loom_plugin *LOOM_ABI loom_plugin_entry(void);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_PLUGIN_H */
