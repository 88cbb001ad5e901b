/* The lane's streams by id, so a cancellation finds its stream in O(1)
 * instead of scanning every stream under the lock. */
#include <stdlib.h>

#include "lane_impl.h"

#define MAP_MIN 64

/* splitmix64's finalizer: ids are sequential, the slots should not be */
static uint32_t map_hash(uint64_t id)
{
    id = (id ^ (id >> 30)) * 0xBF58476D1CE4E5B9ull;
    id = (id ^ (id >> 27)) * 0x94D049BB133111EBull;
    return (uint32_t)(id ^ (id >> 31));
}

loom_status loom__map_init(stream_map *m, loom_err *err)
{
    m->slot = (stream **)calloc(MAP_MIN, sizeof(stream *));
    if (!m->slot)
        return loom_err_set(err, LOOM_ERR_NOMEM, "lane: out of memory");
    m->mask = MAP_MIN - 1;
    m->n = 0;
    return LOOM_OK;
}

void loom__map_free(stream_map *m)
{
    free(m->slot);
    m->slot = NULL;
    m->n = 0;
}

static void map_insert(stream **slot, uint32_t mask, stream *s)
{
    uint32_t i = map_hash(s->id) & mask;
    while (slot[i])
        i = (i + 1) & mask;
    slot[i] = s;
}

loom_status loom__map_put(stream_map *m, stream *s, loom_err *err)
{
    /* at most half full, so probes stay short */
    if (2 * (m->n + 1) > m->mask + 1) {
        uint32_t cap = 2 * (m->mask + 1);
        if (cap == 0)
            return loom_err_set(err, LOOM_ERR_FULL, "lane: too many streams");
        stream **slot = (stream **)calloc(cap, sizeof(stream *));
        if (!slot)
            return loom_err_set(err, LOOM_ERR_NOMEM, "lane: out of memory");
        for (uint32_t i = 0; i <= m->mask; i++)
            if (m->slot[i])
                map_insert(slot, cap - 1, m->slot[i]);
        free(m->slot);
        m->slot = slot;
        m->mask = cap - 1;
    }
    map_insert(m->slot, m->mask, s);
    m->n++;
    return LOOM_OK;
}

stream *loom__map_get(const stream_map *m, uint64_t id)
{
    for (uint32_t i = map_hash(id) & m->mask; m->slot[i]; i = (i + 1) & m->mask)
        if (m->slot[i]->id == id)
            return m->slot[i];
    return NULL;
}

void loom__map_del(stream_map *m, uint64_t id)
{
    uint32_t i = map_hash(id) & m->mask;
    while (m->slot[i] && m->slot[i]->id != id)
        i = (i + 1) & m->mask;
    if (!m->slot[i])
        return;
    m->slot[i] = NULL;
    m->n--;
    /* backward shift: an entry after the hole moves into it unless its
     * home slot lies cyclically in (hole, its slot] */
    uint32_t hole = i;
    for (uint32_t j = (i + 1) & m->mask; m->slot[j]; j = (j + 1) & m->mask) {
        uint32_t home = map_hash(m->slot[j]->id) & m->mask;
        int stays =
            hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (stays)
            continue;
        m->slot[hole] = m->slot[j];
        m->slot[j] = NULL;
        hole = j;
    }
}
