/* The C side of the device sampler: packs a round's rows, sparse lists and
 * windows into one upload, launches sample.cu's kernels on the engine's
 * stream, and copies back only tokens, asked-for logprobs and windows. */
#include <loom/cuda_sample.h>

#include <stdlib.h>
#include <string.h>

#include <loom/cuda_runtime.h>
#include <loom/fatbin.h>

#include "sample_dev.h"

struct loom_cuda_sampler {
    const loom_cuda *cu;
    loom_cu_module mod;
    loom_cu_function f_rows, f_verify, f_part;
    int32_t vocab, max_rows, max_list;
    loom_cu_ptr d_work, d_mass, d_in, d_out;
    uint64_t work_bytes, mass_bytes, in_bytes, out_bytes;
    unsigned char *h_in, *h_out; /* page-locked staging */
    /* section offsets inside the in / out buffers */
    size_t o_rows, o_bias, o_pen, o_win, o_drafts;
    size_t o_outs, o_nemit, o_emit;
};

#if LOOM_HAVE_CUDA
static size_t up16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}
#endif

#define CK(call, what)                                                         \
    do {                                                                       \
        loom_status st_ = loom_cuda_check(s->cu, (call), what, err);           \
        if (st_ != LOOM_OK)                                                    \
            return st_;                                                        \
    } while (0)

loom_status loom_cuda_sampler_new(const loom_cuda *cu, int32_t vocab,
                                  int32_t max_rows, int32_t max_list,
                                  loom_cuda_sampler **out, loom_err *err)
{
#if !LOOM_HAVE_CUDA
    (void)cu;
    (void)vocab;
    (void)max_rows;
    (void)max_list;
    (void)out;
    return loom_err_set(err, LOOM_ERR_UNSUPPORTED,
                        "device sampler: loom was built without nvcc");
#else
    if (vocab <= 0 || max_rows <= 0 || max_list < 0)
        return loom_err_set(err, LOOM_ERR_INVALID,
                            "device sampler: vocab %d, %d rows, %d entries",
                            vocab, max_rows, max_list);
    loom_cuda_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return loom_err_set(err, LOOM_ERR_NOMEM, "device sampler: no memory");
    s->cu = cu;
    s->vocab = vocab;
    s->max_rows = max_rows;
    s->max_list = max_list;
    size_t R = (size_t)max_rows, L = (size_t)(max_list > 0 ? max_list : 1);
    s->o_rows = 0;
    s->o_bias = up16(R * sizeof(loom__ds_row));
    s->o_pen = s->o_bias + up16(L * sizeof(loom__ds_bias));
    s->o_win = s->o_pen + up16(L * sizeof(loom__ds_pen));
    s->o_drafts = s->o_win + up16(R * sizeof(loom__ds_window));
    s->in_bytes = s->o_drafts + up16(R * LOOM_CUDA_MAX_WINDOW * 4);
    s->o_outs = 0;
    s->o_nemit = up16(R * sizeof(loom__ds_out));
    s->o_emit = s->o_nemit + up16(R * 4);
    s->out_bytes = s->o_emit + up16(R * (LOOM_CUDA_MAX_WINDOW + 1) * 4);
    s->work_bytes = (uint64_t)R * (uint64_t)vocab * sizeof(float);
    s->mass_bytes = (uint64_t)R * (uint64_t)vocab * sizeof(double);
    loom_status st;
    loom_cu_result r = cu->moduleLoadData(&s->mod, LOOM_FATBIN);
    if ((st = loom_cuda_check(cu, r, "device sampler: cuModuleLoadData",
                              err)) != LOOM_OK)
        goto fail;
    r = cu->moduleGetFunction(&s->f_rows, s->mod, "loom_sample_rows");
    if (r == 0)
        r = cu->moduleGetFunction(&s->f_verify, s->mod, "loom_verify_windows");
    if (r == 0)
        r = cu->moduleGetFunction(&s->f_part, s->mod,
                                  "loom_sample_argmax_part");
    if ((st = loom_cuda_check(cu, r, "device sampler: cuModuleGetFunction",
                              err)) != LOOM_OK)
        goto fail;
    if ((st = cu->alloc(cu, LOOM_MEM_SCRATCH, s->work_bytes, &s->d_work,
                        err)) != LOOM_OK ||
        (st = cu->alloc(cu, LOOM_MEM_SCRATCH, s->mass_bytes, &s->d_mass,
                        err)) != LOOM_OK ||
        (st = cu->alloc(cu, LOOM_MEM_SCRATCH, s->in_bytes, &s->d_in, err)) !=
            LOOM_OK ||
        (st = cu->alloc(cu, LOOM_MEM_SCRATCH, s->out_bytes, &s->d_out, err)) !=
            LOOM_OK)
        goto fail;
    void *hi = NULL, *ho = NULL;
    r = cu->memAllocHost(&hi, s->in_bytes);
    if (r == 0) {
        s->h_in = hi;
        r = cu->memAllocHost(&ho, s->out_bytes);
        if (r == 0)
            s->h_out = ho;
    }
    if ((st = loom_cuda_check(cu, r, "device sampler: cuMemAllocHost", err)) !=
        LOOM_OK)
        goto fail;
    *out = s;
    return LOOM_OK;
fail:
    loom_cuda_sampler_free(s);
    return st;
#endif
}

void loom_cuda_sampler_free(loom_cuda_sampler *s)
{
    if (!s)
        return;
    const loom_cuda *cu = s->cu;
    cu->free(cu, LOOM_MEM_SCRATCH, s->d_work, s->work_bytes);
    cu->free(cu, LOOM_MEM_SCRATCH, s->d_mass, s->mass_bytes);
    cu->free(cu, LOOM_MEM_SCRATCH, s->d_in, s->in_bytes);
    cu->free(cu, LOOM_MEM_SCRATCH, s->d_out, s->out_bytes);
    if (s->h_in)
        cu->memFreeHost(s->h_in);
    if (s->h_out)
        cu->memFreeHost(s->h_out);
    if (s->mod)
        cu->moduleUnload(s->mod);
    free(s);
}

/* Packs the rows and their lists into h_in. */
static loom_status pack_rows(loom_cuda_sampler *s,
                             const loom_cuda_sample_req *reqs, int32_t n,
                             loom_err *err)
{
    loom__ds_row *rows = (loom__ds_row *)(s->h_in + s->o_rows);
    loom__ds_bias *bias = (loom__ds_bias *)(s->h_in + s->o_bias);
    loom__ds_pen *pen = (loom__ds_pen *)(s->h_in + s->o_pen);
    int32_t nb = 0, np = 0;
    for (int32_t i = 0; i < n; i++) {
        const loom_sample_params *p = reqs[i].params;
        if (reqs[i].logits_row < 0)
            return loom_err_set(err, LOOM_ERR_RANGE,
                                "device sampler: row %d reads logits row %d", i,
                                reqs[i].logits_row);
        if (nb + p->n_bias > s->max_list || np + reqs[i].n_pen > s->max_list)
            return loom_err_set(err, LOOM_ERR_FULL,
                                "device sampler: more than %d bias or penalty "
                                "entries in one call",
                                s->max_list);
        loom__ds_row *r = &rows[i];
        memset(r, 0, sizeof *r);
        r->seed = p->seed;
        r->position = reqs[i].position;
        r->logits_row = reqs[i].logits_row;
        r->top_k = p->top_k;
        r->n_logprobs = p->n_logprobs;
        r->temperature = p->temperature;
        r->top_p = p->top_p;
        r->min_p = p->min_p;
        r->repeat_penalty = p->repeat_penalty;
        r->presence = p->presence_penalty;
        r->frequency = p->frequency_penalty;
        r->bias_off = nb;
        r->n_bias = p->n_bias;
        for (int32_t k = 0; k < p->n_bias; k++) {
            bias[nb].token = p->bias[k].token;
            bias[nb].bias = p->bias[k].bias;
            nb++;
        }
        r->pen_off = np;
        r->n_pen = reqs[i].n_pen;
        for (int32_t k = 0; k < reqs[i].n_pen; k++) {
            pen[np].token = reqs[i].pen[k].token;
            pen[np].prompt_count = reqs[i].pen[k].prompt_count;
            pen[np].gen_count = reqs[i].pen[k].gen_count;
            np++;
        }
    }
    return LOOM_OK;
}

static loom_status run(loom_cuda_sampler *s, loom_cu_ptr logits, int64_t ld,
                       const loom_cuda_sample_req *reqs, int32_t n,
                       const loom_cuda_window *win, int32_t n_win,
                       int32_t *n_emit, int32_t *emit, loom_sample_result *out,
                       loom_err *err)
{
    if (n <= 0 || n > s->max_rows)
        return loom_err_set(err, LOOM_ERR_RANGE,
                            "device sampler: %d rows (at most %d)", n,
                            s->max_rows);
    if (n_win > s->max_rows)
        return loom_err_set(err, LOOM_ERR_RANGE,
                            "device sampler: %d windows (at most %d)", n_win,
                            s->max_rows);
    loom_status st = pack_rows(s, reqs, n, err);
    if (st != LOOM_OK)
        return st;
    loom__ds_window *w = (loom__ds_window *)(s->h_in + s->o_win);
    int32_t *drafts = (int32_t *)(s->h_in + s->o_drafts);
    int32_t nd = 0;
    for (int32_t i = 0; i < n_win; i++) {
        if (win[i].n_draft < 0 || win[i].n_draft > LOOM_CUDA_MAX_WINDOW ||
            win[i].first < 0 || win[i].first + win[i].n_draft > n - 1)
            return loom_err_set(err, LOOM_ERR_RANGE,
                                "device sampler: window %d: rows %d..%d of %d",
                                i, win[i].first, win[i].first + win[i].n_draft,
                                n);
        w[i].first = win[i].first;
        w[i].n_draft = win[i].n_draft;
        w[i].draft_off = nd;
        w[i].emit_off = i * (LOOM_CUDA_MAX_WINDOW + 1);
        if (win[i].n_draft > 0)
            memcpy(drafts + nd, win[i].drafts,
                   sizeof(int32_t) * (size_t)win[i].n_draft);
        nd += win[i].n_draft;
    }
    const loom_cuda *cu = s->cu;
    loom_cu_stream stream = cu->stream;
    /* one upload: rows, lists, windows */
    size_t in_used =
        n_win > 0 ? s->o_drafts + sizeof(int32_t) * (size_t)nd : s->o_win;
    CK(cu->memcpyHtoDAsync(s->d_in, s->h_in, in_used, stream),
       "device sampler: upload");
    loom_cu_ptr d_rows = s->d_in + s->o_rows, d_bias = s->d_in + s->o_bias,
                d_pen = s->d_in + s->o_pen, d_win = s->d_in + s->o_win,
                d_drafts = s->d_in + s->o_drafts;
    loom_cu_ptr d_outs = s->d_out + s->o_outs, d_nemit = s->d_out + s->o_nemit,
                d_emit = s->d_out + s->o_emit;
    int32_t V = s->vocab;
    void *args[] = {&d_rows, &logits,    &ld,        &V,     &d_bias,
                    &d_pen,  &s->d_work, &s->d_mass, &d_outs};
    const loom__ds_row *hrows = (const loom__ds_row *)(s->h_in + s->o_rows);
    int plain = 0;
    for (int32_t i = 0; i < n && !plain; i++)
        plain = loom__ds_plain_argmax(&hrows[i], V);
    void *pargs[] = {&d_rows, &logits, &ld, &V, &s->d_mass};
    if (plain)
        CK(cu->launchKernel(s->f_part, (unsigned)n, LOOM__DS_PARTS, 1,
                            LOOM__DS_THREADS, 1, 1, 0, stream, pargs, NULL),
           "device sampler: loom_sample_argmax_part");
    CK(cu->launchKernel(s->f_rows, (unsigned)n, 1, 1, LOOM__DS_THREADS, 1, 1, 0,
                        stream, args, NULL),
       "device sampler: loom_sample_rows");
    if (n_win > 0) {
        void *vargs[] = {&d_win, &n_win, &d_drafts, &d_outs, &d_nemit, &d_emit};
        CK(cu->launchKernel(s->f_verify, (unsigned)(n_win + 127) / 128, 1, 1,
                            128, 1, 1, 0, stream, vargs, NULL),
           "device sampler: loom_verify_windows");
    }
    CK(cu->memcpyDtoHAsync(s->h_out + s->o_outs, d_outs,
                           sizeof(loom__ds_out) * (size_t)n, stream),
       "device sampler: download");
    if (n_win > 0) {
        CK(cu->memcpyDtoHAsync(s->h_out + s->o_nemit, d_nemit,
                               sizeof(int32_t) * (size_t)n_win, stream),
           "device sampler: download");
        CK(cu->memcpyDtoHAsync(s->h_out + s->o_emit, d_emit,
                               sizeof(int32_t) * (size_t)n_win *
                                   (LOOM_CUDA_MAX_WINDOW + 1),
                               stream),
           "device sampler: download");
    }
    CK(cu->streamSynchronize(stream), "device sampler: cuStreamSynchronize");
    const loom__ds_out *o = (const loom__ds_out *)(s->h_out + s->o_outs);
    for (int32_t i = 0; i < n; i++) {
        out[i].token = o[i].token;
        out[i].logprob = o[i].logprob;
        out[i].n_top = o[i].n_top;
        for (int32_t k = 0; k < o[i].n_top && k < LOOM_MAX_TOP_LOGPROBS; k++) {
            out[i].top[k].token = o[i].top_token[k];
            out[i].top[k].logprob = o[i].top_logprob[k];
        }
    }
    if (n_win > 0) {
        memcpy(n_emit, s->h_out + s->o_nemit, sizeof(int32_t) * (size_t)n_win);
        memcpy(emit, s->h_out + s->o_emit,
               sizeof(int32_t) * (size_t)n_win * (LOOM_CUDA_MAX_WINDOW + 1));
    }
    return LOOM_OK;
}

loom_status loom_cuda_sample(loom_cuda_sampler *s, loom_cu_ptr logits,
                             int64_t ld, const loom_cuda_sample_req *reqs,
                             int32_t n, loom_sample_result *out, loom_err *err)
{
    return run(s, logits, ld, reqs, n, NULL, 0, NULL, NULL, out, err);
}

loom_status loom_cuda_verify(loom_cuda_sampler *s, loom_cu_ptr logits,
                             int64_t ld, const loom_cuda_sample_req *reqs,
                             int32_t n, const loom_cuda_window *win,
                             int32_t n_win, int32_t *n_emit, int32_t *emit,
                             loom_sample_result *out, loom_err *err)
{
    return run(s, logits, ld, reqs, n, win, n_win, n_emit, emit, out, err);
}
