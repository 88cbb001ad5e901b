/* What the qwen35 kernels (the .cu files under cuda/) and their host glue
 * (gpu*.c) share: the round's row and stream tables, laid out identically in
 * C and CUDA (fixed-width fields, device addresses as 64-bit integers). */
#ifndef QWEN35_GPU_KERNELS_H
#define QWEN35_GPU_KERNELS_H

#include <stdint.h>

/* One row of a round, in device order (each stream's rows contiguous and in
 * position order). */
typedef struct q35_gpu_row {
    int32_t token;
    int32_t pos;    /* absolute position in its stream */
    int32_t stream; /* index into the round's stream table */
    int32_t log;    /* replay-log index of a speculative row, else -1 */
} q35_gpu_row;

/* Positions in one page of the K/V pool: a page holds, for every attention
 * layer, K and V of Q35_KV_PAGE consecutive positions of one stream. */
#define Q35_KV_PAGE 16

/* Attention over keys in splits (cuda/attention.cu): at most
 * Q35_ATTN_SPLITS per row, each at least Q35_ATTN_CHUNK positions. */
/* Output rows per warp of the GEMV's 8-token form (SwiGLU: half as many
 * of each of its two weights). */
#define Q35_GEMV8_RPW 4

/* The one-row product through shared memory (cuda/gemv_stream.cu): columns
 * and rows per ring stage (SwiGLU: half as many rows of each weight), at
 * most Q35_GEMVS_NS stages, blocks per SM, and the dynamic shared memory a
 * block may take (the ring and the row's activations) for that many to fit
 * on an SM of 228 KiB. */
#define Q35_GEMVS_SLAB  2048
#define Q35_GEMVS_RPW   8
#define Q35_GEMVS_NS    3
#define Q35_GEMVS_BPS   2
#define Q35_GEMVS_SMEM  (112 * 1024)
#define Q35_GEMVS_STAGE (Q35_GEMVS_RPW * Q35_GEMVS_SLAB * 2)

/* Warps per output row of a product: enough warps to fill the chip, from
 * the weight's shape alone (never the round's), so a row's summation
 * order is the same in every launch. Rows counted in groups of 4, the
 * streaming kernel's widest; each warp of a row at least `span` columns
 * (two of its chunks). */
static inline int q35_wpr_of(int rows, int cols, int span)
{
    int wpr = 1;
    int64_t groups = ((int64_t)rows + 3) / 4;
    while (wpr < 8 && groups * wpr < 2048 && cols >= span * wpr)
        wpr *= 2;
    return wpr;
}

/* ... for BF16 and F16 weights (256-column chunks). */
static inline int q35_wpr(int rows, int cols)
{
    return q35_wpr_of(rows, cols, 512);
}

/* The kernel of a one-row ring form (q35_gemvs, q35_q4s) for wpr 1, 2, 4
 * or 8: 0 .. 3. */
static inline int q35_wpr_kind(int wpr)
{
    return wpr == 1 ? 0 : wpr == 2 ? 1 : wpr == 4 ? 2 : 3;
}

/* q35_gemvs's ring stages beside a row of cols activations (below 2 it
 * does not run). */
static inline int q35_gemvs_stages(int cols)
{
    int ns = (Q35_GEMVS_SMEM - cols * 4) / Q35_GEMVS_STAGE;
    return ns > Q35_GEMVS_NS ? Q35_GEMVS_NS : ns;
}

/* Helpers the kernels call as well as the host. */
#ifdef __CUDACC__
#define Q35_HD __host__ __device__
#else
#define Q35_HD
#endif

/* MLX affine 4-bit weights on the device: the words [rows, cols / 8] (column
 * c of a row in bits 4 (c % 8) of word c / 8), then per row q35_q4_gp
 * (scale, bias) pairs of float32, one per group of gsz columns, their
 * count padded to even so that each row's pairs start 16-byte aligned. */
static inline Q35_HD int q35_q4_gp(int cols, int gsz)
{
    return (cols / gsz + 1) & ~1;
}

/* Warps per output row of an affine-4 product (1,024-column chunks). */
static inline int q35_q4_wpr(int rows, int cols)
{
    return q35_wpr_of(rows, cols, 2048);
}

/* The one-row affine-4 product through shared memory
 * (cuda/gemv_q4_stream.cu): a ring stage holds one 1024-column chunk of
 * Q35_Q4S_ROWS rows (SwiGLU: half as many of each weight) as boxes of
 * Q35_Q4S_BOX rows from two tensor maps, the words' (128 words a row) and
 * the pairs' (1024 / gsz a row); at most Q35_Q4S_NS stages beside the
 * row's activations and their 32-column sums, in Q35_GEMVS_SMEM. It takes
 * groups of 32 to 512 columns, a power of two. */
#define Q35_Q4S_ROWS 32
#define Q35_Q4S_BOX  8
#define Q35_Q4S_NS   6
static inline Q35_HD int q35_q4s_stage(int gsz)
{
    return Q35_Q4S_ROWS * (512 + 1024 / gsz * 8);
}
static inline int q35_q4s_smem(int cols, int gsz, int ns)
{
    return ns * q35_q4s_stage(gsz) + cols * 4 + cols / 32 * 4;
}
/* Its stages (below 2 it does not run). */
static inline int q35_q4s_stages(int cols, int gsz)
{
    if (gsz < 32 || gsz > 512 || (gsz & (gsz - 1)) != 0)
        return 0;
    int ns = (Q35_GEMVS_SMEM - q35_q4s_smem(cols, gsz, 0)) / q35_q4s_stage(gsz);
    return ns > Q35_Q4S_NS ? Q35_Q4S_NS : ns;
}

/* The affine-4 product on tensor cores (cuda/gemv_q4_mma.cu). A ring stage
 * holds a 1024-column chunk of two 16-row tiles (SwiGLU: 16 rows of each
 * weight): for each tile its words as 4 boxes of 256 columns by 16 rows
 * (2 KiB each, under the 128-byte swizzle), then for each tile its pairs,
 * 1024 / gsz a row and two more (a row's pitch, so that the rows' pairs
 * fall in other banks). A block takes up to Q35_Q4M_TOK rows of x, at most
 * Q35_Q4M_NS stages. Groups of 32 to 512 columns, a power of two. */
#define Q35_Q4M_TOK 4
#define Q35_Q4M_NS  6
static inline Q35_HD int q35_q4m_pitch(int gsz)
{
    return 1024 / gsz * 8 + 16;
}
static inline Q35_HD int q35_q4m_stage(int gsz)
{
    return (16384 + 32 * q35_q4m_pitch(gsz) + 1023) / 1024 * 1024;
}
/* Its dynamic shared memory for tb rows of x and ns stages: 1024 bytes to
 * align the ring, the ring, two buffers of the warps' partial sums, then
 * the rows' BF16 halves and two floats per 32 columns a row. */
static inline unsigned q35_q4m_smem(int cols, int gsz, int tb, int ns)
{
    return (unsigned)(1024 + ns * q35_q4m_stage(gsz) + 2 * 8 * 32 * 4 * 4 +
                      tb * cols * 4 + 2 * tb * (cols / 32) * 4);
}
/* The stages for tb rows within Q35_GEMVS_SMEM (two blocks an SM; below 2
 * it does not run). */
static inline int q35_q4m_stages(int cols, int gsz, int tb)
{
    if (gsz < 32 || gsz > 512 || (gsz & (gsz - 1)) != 0 || cols % 32)
        return 0;
    int ns = ((int)Q35_GEMVS_SMEM - (int)q35_q4m_smem(cols, gsz, tb, 0)) /
             q35_q4m_stage(gsz);
    return ns > Q35_Q4M_NS ? Q35_Q4M_NS : ns;
}
/* Rows of x a block takes: the most, up to T and Q35_Q4M_TOK, that leave 2
 * stages (0: none do). */
static inline int q35_q4m_rows(int cols, int gsz, int T)
{
    int tb = T < Q35_Q4M_TOK ? T : Q35_Q4M_TOK;
    while (tb > 0 && q35_q4m_stages(cols, gsz, tb) < 2)
        tb--;
    return tb;
}

/* The tensor-core decode product (cuda/gemv_mma.cu): a block's columns
 * are a run of Q35_MMA_KC-column slices; a ring stage holds rs weight
 * rows (q35_mma_rs) by 16384 / rs columns, as 64-column blocks of rs rows of
 * 128 bytes laid out by the bulk tensor copy's 128-byte swizzle (16-byte piece
 * p of row r at piece p ^ (r % 8)), weights in boxes of 64 columns by
 * Q35_MMA_BOX rows; then the same blocks of the launch tile's rows, two
 * (hi, lo) per row. Q35_MMA_TILES kinds of launch tile (q35_mma_tok,
 * q35_mma_rs), at most Q35_MMA_NS stages. */
#define Q35_MMA_KC    128
#define Q35_MMA_RS    64
#define Q35_MMA_BOX   32
#define Q35_MMA_NS    4
#define Q35_MMA_TILES 6
/* The most shared memory a block may take for two to fit on an SM (228
 * KiB, less 1 KiB the driver keeps per block). */
#define Q35_MMA_HALF_SM (113 * 1024)
/* Weight rows from which a product takes two blocks per SM. */
#define Q35_MMA_ROWS2 8192
/* Columns per block of q35_split. */
#define Q35_SPLIT_COLS 1024

/* A row's sum-of-squares parts (16 columns each, mma.cuh) and their
 * stride in a table of rows (s.ssp): a whole number of 128-column slices. */
static inline Q35_HD int q35_ss_n(int cols)
{
    return (cols + 15) / 16;
}
static inline Q35_HD int q35_ss_ld(int cols)
{
    return (cols + Q35_MMA_KC - 1) / Q35_MMA_KC * (Q35_MMA_KC / 16);
}

/* The one-row form's own copy of a block's run of columns of the row's
 * halves (after its ring): 256 bytes a 64-column block, and 6 rows of 128
 * bytes that its MMA's unused rows read past the end. */
static inline unsigned q35_mma_resa(int run)
{
    return (unsigned)(run / 64 * 256 + 6 * 128);
}

/* A bulk tensor copy's map (CUtensorMap). */
typedef struct q35_tmap {
#ifdef __cplusplus
    alignas(64) uint64_t v[16];
#else
    _Alignas(64) uint64_t v[16];
#endif
} q35_tmap;

/* Blocks of a cluster, each a run of the columns, from the weight's
 * columns alone (a row's summation order must not depend on the round):
 * two for runs of at least 8 slices, else one. */
static inline int q35_mma_splits(int cols)
{
    return (cols + Q35_MMA_KC - 1) / Q35_MMA_KC >= 16 ? 2 : 1;
}

/* Rows of a launch tile of kind k: 4, 8, 16, 32, then 4 and 8 again in
 * stages of 128 weight rows (kinds 4 and 5). */
static inline int q35_mma_tok(int k)
{
    return 4 << (k < 4 ? k : k - 4);
}

/* Weight rows of a stage of kind k: 128 from kind 2 on (on sm_90a two
 * warpgroups' products of 64 rows each), else 64. */
static inline int q35_mma_rs(int k)
{
    return k >= 2 ? 128 : Q35_MMA_RS;
}

/* The kind for T rows, wg set where the 128-row stages are warpgroup
 * products and the product has Q35_MMA_ROWS2 rows or more; it never changes
 * a row's sums. Below 9 rows the 64-row stages of mma.sync are faster on
 * products of fewer rows, and without warpgroups on all (9B: 8 streams
 * 1,218 against 1,140 tok/s with 128-row stages of mma.sync). */
static inline int q35_mma_kind(int T, int wg)
{
    if (T > 8)
        return T <= 16 ? 2 : 3;
    return (T <= 4 ? 0 : 1) + (wg ? 4 : 0);
}

/* Bytes of a ring stage of kind k: 32 KiB of weights, then the tile's rows
 * for the stage's 16384 / rs columns. */
static inline unsigned q35_mma_stage(int k)
{
    return (unsigned)(32768 +
                      16384 / q35_mma_rs(k) / 64 * 2 * q35_mma_tok(k) * 128);
}

/* Buffers of partial sums of a tile of tok rows: two (the next group's
 * written while the cluster reads these), but one for 32 rows, so that two
 * blocks fit on an SM (a second cluster barrier a group guards it). */
#define Q35_MMA_NBUF(tok) ((tok) == 32 ? 1 : 2)

/* Dynamic shared memory of a block of kind k with ns stages: the partial
 * sums, then the ring. */
static inline unsigned q35_mma_smem(int k, int ns)
{
    int tok = q35_mma_tok(k);
    return (unsigned)(Q35_MMA_NBUF(tok) * tok * q35_mma_rs(k) * 4 +
                      ns * q35_mma_stage(k));
}

/* Stages of kind k's ring (two: the ring for two blocks per SM, else one
 * block per SM) with optin bytes of shared memory a block may take, less
 * the kernel's static barriers' 1024; the two-block ring falls back to the
 * one-block one when it holds fewer than 2 stages. */
static inline int q35_mma_ring_stages(int k, int two, uint64_t optin)
{
    uint64_t part = q35_mma_smem(k, 0) + 1024, stage = q35_mma_stage(k);
    int ns = optin > part ? (int)((optin - part) / stage) : 0;
    int ns2 = (int)((Q35_MMA_HALF_SM - part) / stage);
    ns = ns > Q35_MMA_NS ? Q35_MMA_NS : ns;
    if (two && ns2 >= 2)
        ns = ns2 > Q35_MMA_NS ? Q35_MMA_NS : ns2;
    return ns;
}

/* A block's run of columns of a cols-wide product (q35_mma_splits' runs of
 * Q35_MMA_KC-column slices, the longest). */
static inline int q35_mma_run(int cols)
{
    int nsl = (cols + Q35_MMA_KC - 1) / Q35_MMA_KC, s = q35_mma_splits(cols);
    return (nsl + s - 1) / s * Q35_MMA_KC;
}

/* The one-row form over a block's run of columns: its dynamic shared
 * memory with ns stages (weights only: it keeps the row's halves itself),
 * and the most stages that fit (two: in the two-block budget; below 2 it
 * does not run). */
#define Q35_MMA1R_STAGE (Q35_MMA_RS * 256 * 2)
static inline unsigned q35_mma1r_smem(int run, int ns)
{
    return q35_mma_smem(0, 0) + (unsigned)ns * Q35_MMA1R_STAGE +
           q35_mma_resa(run);
}
static inline int q35_mma1r_stages(int run, int two, uint64_t optin)
{
    int64_t cap = two ? Q35_MMA_HALF_SM : (int64_t)optin;
    int64_t ns =
        (cap - 1024 - (int64_t)q35_mma1r_smem(run, 0)) / Q35_MMA1R_STAGE;
    return ns > Q35_MMA_NS ? Q35_MMA_NS : (int)ns;
}

/* The chunk attention (q35_attn_chunk): query rows per warp, per block of
 * 4 warps. */
#define Q35_AC_R 8
#define Q35_AC_Q (4 * Q35_AC_R)
/* its dynamic shared memory: Q35_AC_Q query rows, 32 keys of K padded by 4
 * floats, 32 of V */
static inline uint64_t q35_attn_chunk_smem(int hd)
{
    return (uint64_t)(Q35_AC_Q * hd + 32 * (hd + 4) + 32 * hd) * 4u;
}

/* ... on tensor cores (q35_attn_mma<hd>, head_dim 16 to 256, a power of
 * two): warps per block (16 query rows each), keys per tile, and its dynamic
 * shared memory (Q, a K tile and a V tile, rows padded by 4 floats). */
#ifndef Q35_AM_W
#define Q35_AM_W 4 /* warps of 16 rows */
#endif
#ifndef Q35_AM_K
#define Q35_AM_K 32
#endif
#define Q35_AM_Q (16 * Q35_AM_W)
static inline uint64_t q35_attn_mma_smem(int hd)
{
    return (uint64_t)(Q35_AM_Q + 2 * Q35_AM_K) * (uint64_t)(hd + 4) * 4u;
}

/* Blocks (a cluster, sm_90) per value head of the one-row recurrence
 * (q35_gdn_rec4, cuda/gdn.cu), 32 value columns each. */
#define Q35_GDN_CTAS 4

/* Rows per chunk of the chunkwise delta rule (cuda/gdn_prompt.cu). */
#define Q35_WY_C 64

#define Q35_ATTN_SPLITS 32
#define Q35_ATTN_CHUNK  16

/* One stream (cache) of a round: where its device state lives and which
 * rows of the round are its. */
typedef struct q35_gpu_stream {
    /* the model's K/V pool, float [page][n_attn][2][Q35_KV_PAGE][n_kv*hd] */
    uint64_t kv;
    uint64_t conv;       /* float [n_lin][(K-1) * conv_dim], oldest first */
    uint64_t state;      /* float [n_lin][Hv][q35_gdn_head] */
    uint64_t snap_conv;  /* copies of conv and state at a window's start */
    uint64_t snap_state; /* */
    uint64_t log;        /* float [log_cap][n_lin][log_size] */
    uint64_t ptab;       /* int32 [positions / Q35_KV_PAGE]: its pages */
    int32_t first;       /* its rows: [first, first + count) */
    int32_t count;
    int32_t snap_row; /* index among its rows before which the snapshot is
                         taken, or -1 */
    int32_t n_attn;   /* attention layers (a page's stride) */
    /* a prompt chunk's kernels (the per-row and per-stream ones skip it):
     * bit 0 conv and delta rule (gdn_prompt.cu), bit 1 attention */
    int32_t chunk;
    int32_t pad;
} q35_gpu_stream;

/* A head's state [dk, dv] on the device: its value columns in groups of
 * 32 (the last one padded to 32), each group its dk rows of 32 floats, so
 * that the 32 columns one block of the recurrence takes are one contiguous
 * run (a bulk copy) and a warp's 32 columns of a row are 128 contiguous
 * bytes. q35_gdn_head: floats a head; q35_gdn_off: where (i, j) lies. */
static inline Q35_HD int64_t q35_gdn_head(int dk, int dv)
{
    return (int64_t)dk * ((dv + 31) / 32 * 32);
}
static inline Q35_HD int64_t q35_gdn_off(int i, int j, int dk)
{
    return (int64_t)(j / 32) * 32 * dk + (int64_t)i * 32 + j % 32;
}

/* q35_gdn_rec4s's state in shared memory, as one bulk copy lays a block's
 * 32 columns (q35_gdn_off) down: dk rows (a multiple of 32) of 32 floats,
 * a warp's 32 columns in 32 banks. */
static inline Q35_HD int q35_gdn_sst_bytes(int dk)
{
    return dk * 32 * (int)sizeof(float);
}

/* The GDN conv run in the epilogue of a one-row step's merged affine-4
 * input product (q35_q4s*_conv): rows [0, cd) are the conv's channels, and
 * what q35_conv reads comes with it. It is taken for blocks of at most
 * Q35_CONV_EPI_ROWS rows, the shapes it was measured on (9B: 47). */
#define Q35_CONV_EPI_ROWS 64
typedef struct q35_conv_epi {
    uint64_t w;       /* float [cd][K] */
    uint64_t out;     /* float [rows][cd] */
    uint64_t streams; /* q35_gpu_stream: the round's one */
    uint64_t rows;    /* q35_gpu_row */
    int32_t slot, cd, K, n_lin, log_size, log_conv;
    /* the bytes of the layer's recurrent state in a slot, which the blocks
     * ask into L2 as they finish, for the recurrence that comes next */
    int64_t state_bytes;
} q35_conv_epi;

/* Offsets (floats) of one row's entry in one GDN layer's replay log. */
typedef struct q35_gpu_log {
    int32_t conv, k, v, decay, beta, size;
} q35_gpu_log;

#endif
