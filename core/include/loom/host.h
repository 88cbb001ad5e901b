/* The loom_host services table the core hands to plugins: one for the core,
 * and one lent to each plugin so its log lines carry its name. */
#ifndef LOOM_HOST_H
#define LOOM_HOST_H

#include <loom/pool.h>

/* A host table bound to a pool (NULL: run on the caller only). The table is
 * owned by the caller and must outlive every plugin object made with it. */
typedef struct loom_host_state {
    loom_host host; /* first: plugins get &state->host */
    loom_pool *pool;
    /* Bytes accounted by kind and use, the total per kind, and the budget
     * per kind (INT64_MAX: unlimited); kept in the root table. */
    _Atomic int64_t accounted[2][LOOM_MEM_USE_COUNT];
    _Atomic int64_t accounted_total[2];
    int64_t budget[2];
    /* The plugin the table is lent to (log lines name it); NULL: the core. */
    const char *who;
    /* The table that owns the pool and the accounting: itself, or the one
     * this table was lent from. */
    struct loom_host_state *root;
    /* The engine's device table (root only), NULL on the CPU. */
    const struct loom_cuda *cuda;
    /* The matmul kernel sets (loom_mm_isa), read from CPUID once. */
    int mm_isa, mm_prompt_isa;
} loom_host_state;

void loom_host_init(loom_host_state *state, loom_pool *pool);
/* Fills *out as BASE's table lent to the plugin WHO: the same services,
 * pool and accounting (kept in BASE's root), with log lines that say
 * "WHO: ...". BASE and WHO must outlive *out. */
void loom_host_lend(loom_host_state *out, loom_host_state *base,
                    const char *who);

/* The budget of one memory kind for every table lent from STATE's root
 * (bytes; INT64_MAX, the default, is unlimited). Set before plugins run. */
void loom_host_set_budget(loom_host_state *state, loom_mem_kind kind,
                          int64_t bytes);
/* Bytes accounted of KIND for USE (a loom_mem_use, or -1 for every use). */
int64_t loom_host_accounted(const loom_host_state *state, loom_mem_kind kind,
                            int use);

#endif
