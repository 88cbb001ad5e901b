/* The mixture-of-experts routing helpers declared in loom/cpu_route.h. */
#include <loom/cpu_route.h>

#include <math.h>
#include <string.h>

/* The order of the top k: larger value first, then lower index; NaN last.
 * Distinct indices make it a strict total order. */
static int first(const float *x, int32_t a, int32_t b)
{
    float va = x[a], vb = x[b];
    if (isnan(va))
        va = -INFINITY;
    if (isnan(vb))
        vb = -INFINITY;
    if (va != vb)
        return va > vb;
    return a < b;
}

static void swap32(int32_t *a, int32_t *b)
{
    int32_t t = *a;
    *a = *b;
    *b = t;
}

void loom_cpu_topk(const float *x, int64_t n, int64_t k, int32_t *idx,
                   int32_t *work)
{
    for (int64_t i = 0; i < n; i++)
        work[i] = (int32_t)i;
    /* quickselect: afterwards work[0..k) are the k first, in some order */
    int64_t lo = 0, hi = n - 1, r = k - 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (first(x, work[mid], work[lo]))
            swap32(&work[mid], &work[lo]);
        if (first(x, work[hi], work[lo]))
            swap32(&work[hi], &work[lo]);
        if (first(x, work[hi], work[mid]))
            swap32(&work[hi], &work[mid]);
        /* work[mid] is the median of the three: partition around it */
        swap32(&work[mid], &work[hi]);
        int32_t pivot = work[hi];
        int64_t p = lo;
        for (int64_t i = lo; i < hi; i++)
            if (first(x, work[i], pivot))
                swap32(&work[i], &work[p++]);
        swap32(&work[p], &work[hi]);
        if (p == r)
            break;
        if (p > r)
            hi = p - 1;
        else
            lo = p + 1;
    }
    /* the k chosen, largest first */
    for (int64_t i = 0; i < k; i++) {
        int32_t v = work[i];
        int64_t j = i;
        for (; j > 0 && first(x, v, idx[j - 1]); j--)
            idx[j] = idx[j - 1];
        idx[j] = v;
    }
}

void loom_cpu_group_by_expert(const int32_t *sel, int64_t n_sel,
                              int64_t n_experts, int32_t *start, int32_t *order)
{
    memset(start, 0, (size_t)(n_experts + 1) * sizeof *start);
    for (int64_t i = 0; i < n_sel; i++)
        start[sel[i] + 1]++;
    for (int64_t e = 0; e < n_experts; e++)
        start[e + 1] += start[e];
    /* start[e] serves as the fill cursor of expert e, then is restored */
    for (int64_t i = 0; i < n_sel; i++)
        order[start[sel[i]]++] = (int32_t)i;
    for (int64_t e = n_experts; e > 0; e--)
        start[e] = start[e - 1];
    start[0] = 0;
}
