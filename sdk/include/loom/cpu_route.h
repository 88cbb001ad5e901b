/* Mixture-of-experts routing helpers for CPU reference paths: the top k of
 * a row of router scores in expected O(n), and the grouping of every row's
 * chosen experts by expert (a counting sort), so that each expert runs once
 * over the rows routed to it. Any MoE family (Qwen3.5-MoE, Qwen3-Next,
 * Nemotron-H) can use them; the score function (softmax, sigmoid, biases,
 * groups) stays the family's. */
#ifndef LOOM_CPU_ROUTE_H
#define LOOM_CPU_ROUTE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The indices of the k largest of x[0..n) into idx[0..k), largest first;
 * equal values go to the lower index, and NaN ranks below everything.
 * work: n int32 of scratch. 1 <= k <= n. Expected O(n + k²): a quickselect
 * (median-of-three pivots) then an insertion sort of the k chosen. */
void loom_cpu_topk(const float *x, int64_t n, int64_t k, int32_t *idx,
                   int32_t *work);

/* Groups n_sel choices sel[i] (expert ids in [0, n_experts)) by expert:
 * afterwards the choices of expert e are order[start[e] .. start[e + 1]),
 * each an index i into sel, ascending (for sel laid out [row, k], rows come
 * in order). start has n_experts + 1 entries. O(n_sel + n_experts). */
void loom_cpu_group_by_expert(const int32_t *sel, int64_t n_sel,
                              int64_t n_experts, int32_t *start,
                              int32_t *order);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_CPU_ROUTE_H */
