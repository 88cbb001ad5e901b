/* The thread pool behind host->parallel_for: persistent workers and the
 * caller claim contiguous parts of a range until none is left. */
#include <loom/pool.h>

#include <stdatomic.h>
#include <stdlib.h>

#include <loom/platform.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
/* A spin-wait hint: frees the core's pipeline (and a hyperthread sibling)
 * and avoids the memory-order flush on leaving the loop. */
#define SPIN_HINT() _mm_pause()
#else
#define SPIN_HINT() ((void)0)
#endif

/* Spins this many polls before sleeping on the condition variable: decode
 * issues hundreds of short parallel calls per token, and a futex wake per
 * call would cost more than the work. */
#define POOL_SPIN 20000

/* The job word packs generation (32 bits), part count (16) and the next
 * unclaimed part (16). A claim is a CAS on the whole word, so a worker that
 * woke late can never claim a part of a generation it did not read the
 * parameters of, nor claim one part twice. */
#define JOB_GEN(w)   ((uint32_t)((w) >> 32))
#define JOB_PARTS(w) ((int)(((w) >> 16) & 0xffff))
#define JOB_NEXT(w)  ((int)((w)&0xffff))

struct loom_pool {
    int n;
    loom_thread **threads;
    loom_mutex *mu;
    loom_cond *cv_work;
    loom_cond *cv_done;
    atomic_uint_fast64_t job;
    atomic_int pending;
    /* workers asleep on cv_work, and whether the caller sleeps on cv_done:
     * a call takes the mutex only when someone is asleep */
    atomic_int sleepers;
    atomic_int caller_asleep;
    atomic_int busy;
    atomic_int stop;
    loom_range_fn fn;
    void *ctx;
    int64_t n_items;
};

/* Claims and runs parts of generation `gen` until none is left. */
static void run_parts(loom_pool *p, uint32_t gen)
{
    for (;;) {
        uint_fast64_t w = atomic_load(&p->job);
        if (JOB_GEN(w) != gen || JOB_NEXT(w) >= JOB_PARTS(w))
            return;
        if (!atomic_compare_exchange_weak(&p->job, &w, w + 1))
            continue;
        int part = JOB_NEXT(w), parts = JOB_PARTS(w);
        int64_t begin = p->n_items * part / parts;
        int64_t end = p->n_items * (part + 1) / parts;
        if (end > begin)
            p->fn(p->ctx, begin, end);
        if (atomic_fetch_sub(&p->pending, 1) == 1 &&
            atomic_load(&p->caller_asleep)) {
            loom_mutex_lock(p->mu);
            loom_cond_broadcast(p->cv_done);
            loom_mutex_unlock(p->mu);
        }
    }
}

static void worker_main(void *arg)
{
    loom_pool *p = arg;
    uint32_t seen = 0;
    for (;;) {
        int spins = 0;
        while (JOB_GEN(atomic_load(&p->job)) == seen && spins < POOL_SPIN &&
               !atomic_load(&p->stop)) {
            SPIN_HINT();
            spins++;
        }
        if (JOB_GEN(atomic_load(&p->job)) == seen) {
            loom_mutex_lock(p->mu);
            /* counted before the job word is read again: a caller that
             * publishes a job after this either sees the count or is seen */
            atomic_fetch_add(&p->sleepers, 1);
            while (JOB_GEN(atomic_load(&p->job)) == seen &&
                   !atomic_load(&p->stop))
                loom_cond_wait(p->cv_work, p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            loom_mutex_unlock(p->mu);
        }
        if (atomic_load(&p->stop))
            return;
        seen = JOB_GEN(atomic_load(&p->job));
        run_parts(p, seen);
    }
}

loom_status loom_pool_new(int n_threads, loom_pool **out, loom_err *err)
{
    if (n_threads <= 0)
        n_threads = loom_cpu_count();
    if (n_threads > 256)
        n_threads = 256;
    loom_pool *p = calloc(1, sizeof *p);
    if (!p)
        return loom_err_set(err, LOOM_ERR_NOMEM, "pool: out of memory");
    p->n = 1;
    p->mu = loom_mutex_new();
    p->cv_work = loom_cond_new();
    p->cv_done = loom_cond_new();
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->mu || !p->cv_work || !p->cv_done || !p->threads) {
        loom_pool_free(p);
        return loom_err_set(err, LOOM_ERR_NOMEM, "pool: out of memory");
    }
    for (int i = 1; i < n_threads; i++) {
        loom_status rc = loom_thread_start(&p->threads[i], worker_main, p, err);
        if (rc != LOOM_OK) {
            loom_pool_free(p);
            return rc;
        }
        p->n = i + 1;
    }
    *out = p;
    return LOOM_OK;
}

void loom_pool_free(loom_pool *p)
{
    if (!p)
        return;
    if (p->mu && p->cv_work) {
        loom_mutex_lock(p->mu);
        atomic_store(&p->stop, 1);
        loom_cond_broadcast(p->cv_work);
        loom_mutex_unlock(p->mu);
    }
    for (int i = 1; i < p->n; i++)
        loom_thread_join(p->threads[i]);
    loom_cond_free(p->cv_work);
    loom_cond_free(p->cv_done);
    loom_mutex_free(p->mu);
    free(p->threads);
    free(p);
}

int loom_pool_size(const loom_pool *p)
{
    return p ? p->n : 1;
}

void loom_pool_run(loom_pool *p, int64_t n, loom_range_fn fn, void *ctx)
{
    if (n <= 0)
        return;
    int expected = 0;
    /* A nested call (from inside a part) or a second caller runs on its
     * own thread: the workers are taken. */
    if (!p || p->n == 1 || n == 1 ||
        !atomic_compare_exchange_strong(&p->busy, &expected, 1)) {
        fn(ctx, 0, n);
        return;
    }
    int parts = n < p->n ? (int)n : p->n;
    p->fn = fn;
    p->ctx = ctx;
    p->n_items = n;
    atomic_store(&p->pending, parts);
    uint32_t gen = JOB_GEN(atomic_load(&p->job)) + 1;
    atomic_store(&p->job,
                 ((uint_fast64_t)gen << 32) | ((uint_fast64_t)parts << 16));
    /* spinning workers see the job word; only sleepers need the wake-up */
    if (atomic_load(&p->sleepers) > 0) {
        loom_mutex_lock(p->mu);
        loom_cond_broadcast(p->cv_work);
        loom_mutex_unlock(p->mu);
    }

    run_parts(p, gen);

    int spins = 0;
    while (atomic_load(&p->pending) > 0 && spins < POOL_SPIN) {
        SPIN_HINT();
        spins++;
    }
    if (atomic_load(&p->pending) > 0) {
        loom_mutex_lock(p->mu);
        atomic_store(&p->caller_asleep, 1);
        while (atomic_load(&p->pending) > 0)
            loom_cond_wait(p->cv_done, p->mu);
        atomic_store(&p->caller_asleep, 0);
        loom_mutex_unlock(p->mu);
    }
    atomic_store(&p->busy, 0);
}
