/* The lane's cache pool: caches go back to it reset when their stream ends
 * and the next admitted stream takes one, so admissions seldom allocate. */
#include <stdlib.h>

#include "lane_impl.h"

loom_status loom__pool_init(cache_pool *p, loom_lane *lane, int32_t cap,
                            loom_err *err)
{
    p->fam = lane->fam;
    p->model = lane->model;
    p->mu = lane->mu;
    p->n_idle = p->n_total = 0;
    /* room for every cache ever made: at most `cap` are out at once */
    p->idle = (loom_cache **)calloc((size_t)cap, sizeof(loom_cache *));
    if (!p->idle)
        return loom_err_set(err, LOOM_ERR_NOMEM, "lane: out of memory");
    return LOOM_OK;
}

loom_status loom__pool_get(cache_pool *p, loom_cache **out, loom_err *err)
{
    loom_mutex_lock(p->mu);
    if (p->n_idle > 0) {
        *out = p->idle[--p->n_idle];
        loom_mutex_unlock(p->mu);
        return LOOM_OK;
    }
    loom_mutex_unlock(p->mu);
    loom_cache *c = NULL;
    loom_status rc = loom_family_cache_new(p->fam, p->model, &c, err);
    if (rc != LOOM_OK)
        return rc;
    loom_mutex_lock(p->mu);
    p->n_total++;
    loom_mutex_unlock(p->mu);
    *out = c;
    return LOOM_OK;
}

void loom__pool_put(cache_pool *p, loom_cache *c)
{
    /* without cache_reset the dispatcher frees the cache and makes a fresh
     * one; when that fails (c is then NULL) the pool holds one cache fewer */
    loom_err err;
    if (loom_family_cache_reset(p->fam, p->model, &c, &err) != LOOM_OK) {
        loom_family_cache_free(p->fam, p->model, c);
        loom_mutex_lock(p->mu);
        p->n_total--;
        loom_mutex_unlock(p->mu);
        return;
    }
    loom_mutex_lock(p->mu);
    p->idle[p->n_idle++] = c;
    loom_mutex_unlock(p->mu);
}

void loom__pool_free(cache_pool *p)
{
    for (int32_t i = 0; i < p->n_idle; i++)
        loom_family_cache_free(p->fam, p->model, p->idle[i]);
    free(p->idle);
    p->idle = NULL;
    p->n_idle = 0;
}
