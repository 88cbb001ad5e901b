/* ABI 2 versioning and the family dispatcher, on the toy family and its
 * variants (tests/plugins/tp_toy*.c): an older minor (a vtable one member
 * short) and a newer one (a trailing field more) load and run; optional
 * members left NULL get the dispatcher's defaults; plugin errors come back
 * named; the host fills caller structs by their struct_size and keeps the
 * memory budget. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loom/drafter.h>
#include <loom/engine.h>
#include <loom/family.h>
#include <loom/lane.h>
#include <loom/registry.h>

#include "testutil.h"

#define VOCAB 64 /* the toy fixture's */

static loom_engine *open_family(const char *name)
{
    const char *dirs[1] = {LOOM_TEST_PLUGIN_DIR};
    loom_engine_params p;
    memset(&p, 0, sizeof p);
    p.model = fixture("models/toy");
    p.family = name;
    p.plugin_dirs = dirs;
    p.n_plugin_dirs = 1;
    p.device = LOOM_DEVICE_CPU;
    p.n_threads = 1;
    loom_engine *e = NULL;
    loom_err err;
    loom_status rc = loom_engine_open(&p, &e, &err);
    ck_assert_msg(rc == LOOM_OK, "%s: %s", name, err.msg);
    ck_assert_str_eq(e->plugin->plugin->name, name);
    return e;
}

/* Feeds tokens[0..n) to a fresh cache through the dispatcher; logits of
 * every row into out[n * VOCAB]. */
static void run_rows(loom_engine *e, const int32_t *tokens, int32_t n,
                     float *out)
{
    loom_cache *c = NULL;
    loom_err err;
    ck_assert_msg(loom_family_cache_new(&e->family, e->model, &c, &err) ==
                      LOOM_OK,
                  "%s", err.msg);
    loom_row rows[8];
    ck_assert_int_le(n, 8);
    for (int32_t i = 0; i < n; i++)
        rows[i] = (loom_row){c, tokens[i], i, -1, LOOM_ROW_LOGITS};
    loom_round r = {sizeof r, sizeof rows[0], rows, n};
    loom_output o = {sizeof o, loom_view_host_f32(out, n, VOCAB), {0}};
    ck_assert_msg(loom_family_forward(&e->family, e->model, &r, &o, &err) ==
                      LOOM_OK,
                  "%s", err.msg);
    loom_family_cache_free(&e->family, e->model, c);
}

static const int32_t toks[4] = {5, 17, 2, 40};

/* An older minor's vtable (no get_extension) and a newer minor's (one field
 * more, abi_minor + 1, a bigger descriptor) both load and give the toy's
 * logits; the older one's extension is not read past its struct_size. */
START_TEST(older_and_newer_minors_load_and_work)
{
    float ref[4 * VOCAB], got[4 * VOCAB];
    loom_engine *e = open_family("tp-toy");
    run_rows(e, toks, 4, ref);
    ck_assert_ptr_nonnull(
        loom_family_extension(&e->family, e->model, "tp.toy/1"));
    loom_engine_close(e);

    e = open_family("tp-toy-old");
    ck_assert_uint_eq(e->family.size, offsetof(loom_family_i, get_extension));
    ck_assert_int_eq(e->info.vocab, VOCAB);
    run_rows(e, toks, 4, got);
    ck_assert_mem_eq(got, ref, sizeof ref);
    /* the member is filled in the plugin's memory, outside its struct */
    ck_assert_ptr_null(loom_family_extension(&e->family, e->model, "tp.toy/1"));
    loom_engine_close(e);

    e = open_family("tp-toy-new");
    ck_assert_uint_gt(e->family.size, sizeof(loom_family_i));
    ck_assert_int_eq(e->plugin->plugin->abi_minor, LOOM_ABI_MINOR + 1);
    run_rows(e, toks, 4, got);
    ck_assert_mem_eq(got, ref, sizeof ref);
    ck_assert_ptr_nonnull(
        loom_family_extension(&e->family, e->model, "tp.toy/1"));
    ck_assert_ptr_null(loom_family_extension(&e->family, e->model, "nope/1"));
    loom_engine_close(e);
}
END_TEST

static void LOOM_ABI count_i64(void *ctx, const char *k, int64_t v)
{
    (void)k;
    (void)v;
    (*(int *)ctx)++;
}

static void LOOM_ABI count_f64(void *ctx, const char *k, double v)
{
    (void)k;
    (void)v;
    (*(int *)ctx)++;
}

static void LOOM_ABI count_str(void *ctx, const char *k, const char *v)
{
    (void)k;
    (void)v;
    (*(int *)ctx)++;
}

/* NULL optional members: geometry gives no fields, cache_reset is free +
 * new, commit is LOOM_ERR_UNSUPPORTED, get_extension finds nothing. */
START_TEST(null_optional_members_get_their_defaults)
{
    loom_engine *e = open_family("tp-toy-bare");
    loom_err err;
    int n_fields = 0;
    loom_fields f = {sizeof f, &n_fields, count_i64, count_f64, count_str};
    ck_assert_int_eq(
        loom_family_geometry(&e->family, e->plugin->host, e->ckpt, &f, &err),
        LOOM_OK);
    ck_assert_int_eq(n_fields, 0);
    ck_assert_ptr_null(loom_family_extension(&e->family, e->model, "tp.toy/1"));

    /* a cache holding two rows, reset: position 0 is valid again, and the
     * old cache was freed (the accounting is back to one cache) */
    int64_t base = loom_host_accounted(&e->hs, LOOM_MEM_HOST, LOOM_MEM_CACHE);
    loom_cache *c = NULL;
    ck_assert_int_eq(loom_family_cache_new(&e->family, e->model, &c, &err),
                     LOOM_OK);
    int64_t one = loom_host_accounted(&e->hs, LOOM_MEM_HOST, LOOM_MEM_CACHE);
    ck_assert_int_gt(one, base);
    float lg[2 * VOCAB], ref[VOCAB];
    loom_row rows[2] = {{c, 5, 0, -1, 0}, {c, 17, 1, -1, LOOM_ROW_LOGITS}};
    loom_round r = {sizeof r, sizeof rows[0], rows, 2};
    loom_output o = {sizeof o, loom_view_host_f32(lg, 1, VOCAB), {0}};
    ck_assert_int_eq(loom_family_forward(&e->family, e->model, &r, &o, &err),
                     LOOM_OK);
    ck_assert_int_eq(loom_family_cache_reset(&e->family, e->model, &c, &err),
                     LOOM_OK);
    ck_assert_int_eq(loom_host_accounted(&e->hs, LOOM_MEM_HOST, LOOM_MEM_CACHE),
                     one);
    rows[0] = (loom_row){c, 5, 0, -1, LOOM_ROW_LOGITS};
    r.n_rows = 1;
    ck_assert_msg(loom_family_forward(&e->family, e->model, &r, &o, &err) ==
                      LOOM_OK,
                  "%s", err.msg);
    run_rows(e, toks, 1, ref);
    ck_assert_mem_eq(lg, ref, sizeof ref);

    ck_assert_int_eq(loom_family_commit(&e->family, e->model, c, 0, &err),
                     LOOM_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "tp-toy-bare: "));
    loom_family_cache_free(&e->family, e->model, c);
    ck_assert_int_eq(loom_host_accounted(&e->hs, LOOM_MEM_HOST, LOOM_MEM_CACHE),
                     base);
    loom_engine_close(e);
}
END_TEST

typedef struct tokens {
    int32_t t[64];
    int32_t n;
    int done;
} tokens;

static int collect(void *user, const loom_lane_event *ev)
{
    tokens *k = user;
    if (ev->token >= 0 && k->n < 64)
        k->t[k->n++] = ev->token;
    if (ev->finish != LOOM_FINISH_NONE)
        k->done = 1;
    return 0;
}

/* Three streams one after another through a lane of one cache: what each
 * generates on the family without cache_reset (the pool's caches are freed
 * and made anew between streams) equals the toy's own. */
static void lane_run(const char *family, tokens out[3])
{
    loom_engine *e = open_family(family);
    loom_lane_params lp;
    memset(&lp, 0, sizeof lp);
    lp.engine = e;
    lp.max_streams = 1;
    loom_lane *lane = NULL;
    loom_err err;
    ck_assert_msg(loom_lane_new(&lp, &lane, &err) == LOOM_OK, "%s", err.msg);
    int64_t base = loom_host_accounted(&e->hs, LOOM_MEM_HOST, -1);
    static const int32_t prompt[3][3] = {{1, 2, 3}, {4, 5, 6}, {1, 2, 3}};
    for (int i = 0; i < 3; i++) {
        memset(&out[i], 0, sizeof out[i]);
        loom_stream_params sp;
        memset(&sp, 0, sizeof sp);
        sp.prompt = prompt[i];
        sp.n_prompt = 3;
        loom_sample_params_default(&sp.sample);
        sp.sample.temperature = 0;
        sp.max_tokens = 5;
        sp.cb = collect;
        sp.user = &out[i];
        uint64_t id;
        ck_assert_int_eq(loom_lane_add(lane, &sp, &id, &err), LOOM_OK);
        for (int guard = 0; !out[i].done && guard < 100; guard++)
            ck_assert_int_eq(loom_lane_step(lane, NULL, &err), LOOM_OK);
        ck_assert_int_eq(out[i].n, 5);
    }
    loom_lane_free(lane);
    ck_assert_int_eq(loom_host_accounted(&e->hs, LOOM_MEM_HOST, -1), base);
    loom_engine_close(e);
}

START_TEST(the_lane_runs_on_the_default_cache_reset)
{
    tokens ref[3], got[3];
    lane_run("tp-toy", ref);
    lane_run("tp-toy-bare", got);
    for (int i = 0; i < 3; i++)
        ck_assert_mem_eq(got[i].t, ref[i].t, sizeof(int32_t) * 5);
    /* the same prompt on a reused cache gives the same tokens */
    ck_assert_mem_eq(got[2].t, got[0].t, sizeof(int32_t) * 5);
}
END_TEST

/* A plugin's own error comes back prefixed with its name, once. */
START_TEST(plugin_errors_are_named)
{
    loom_engine *e = open_family("tp-toy");
    loom_err err;
    loom_cache *c = NULL;
    ck_assert_int_eq(loom_family_cache_new(&e->family, e->model, &c, &err),
                     LOOM_OK);
    loom_row row = {c, 999, 0, -1, LOOM_ROW_LOGITS};
    float lg[VOCAB];
    loom_round r = {sizeof r, sizeof row, &row, 1};
    loom_output o = {sizeof o, loom_view_host_f32(lg, 1, VOCAB), {0}};
    ck_assert_int_eq(loom_family_forward(&e->family, e->model, &r, &o, &err),
                     LOOM_ERR_RANGE);
    ck_assert_str_eq(err.msg, "tp-toy: row 0: token 999");
    /* the toy has commit: no window is its own LOOM_ERR_STATE */
    ck_assert_int_eq(loom_family_commit(&e->family, e->model, c, 0, &err),
                     LOOM_ERR_STATE);
    ck_assert_str_eq(err.msg, "tp-toy: the cache has no window");
    /* a lane whose rows are bigger than 2.0's: read by row_size */
    struct {
        loom_row row;
        int64_t later;
    } wide[2] = {{{c, 5, 0, -1, 0}, -1}, {{c, 17, 1, -1, LOOM_ROW_LOGITS}, -1}};
    loom_round rw = {sizeof rw, sizeof wide[0], &wide[0].row, 2};
    ck_assert_msg(loom_family_forward(&e->family, e->model, &rw, &o, &err) ==
                      LOOM_OK,
                  "%s", err.msg);
    loom_family_cache_free(&e->family, e->model, c);
    float ref[2 * VOCAB];
    run_rows(e, toks, 2, ref);
    ck_assert_mem_eq(lg, ref + VOCAB, sizeof lg);
    loom_engine_close(e);
}
END_TEST

/* The drafter dispatcher: NULL geometry gives no fields, NULL absorb is a
 * no-op, needs is zero-filled then filled, draft's errors come back named;
 * the target the drafter opens with carries the family's info. */
START_TEST(the_drafter_dispatcher_applies_defaults)
{
    loom_engine *e = open_family("tp-toy");
    const loom_plugin_ref *ref = NULL;
    loom_err err;
    ck_assert_msg(loom_registry_select(e->registry, e->ckpt,
                                       LOOM_PLUGIN_DRAFTER, "tp-toy-drafter",
                                       &ref, &err) == LOOM_OK,
                  "%s", err.msg);
    loom_drafter_ref d;
    ck_assert_int_eq(loom_drafter_bind(ref->plugin, &d, &err), LOOM_OK);
    int n_fields = 0;
    loom_fields f = {sizeof f, &n_fields, count_i64, count_f64, count_str};
    ck_assert_int_eq(loom_drafter_geometry(&d, ref->host, e->ckpt, &f, &err),
                     LOOM_OK);
    ck_assert_int_eq(n_fields, 0);

    loom_target target = {
        sizeof target, &e->info, e->model,
        loom_family_extension(&e->family, e->model, LOOM_TARGET_ID)};
    ck_assert_ptr_null(target.ext); /* the toy has no loom.target/1 */
    loom_drafter *dr = NULL;
    ck_assert_msg(loom_drafter_open(&d, ref->host, e->ckpt, &target, &dr,
                                    &err) == LOOM_OK,
                  "%s", err.msg);
    loom_drafter_needs needs;
    loom_drafter_get_needs(&d, dr, &needs);
    ck_assert_uint_eq(needs.struct_size, sizeof needs);
    ck_assert_int_eq(needs.n_taps, 0);
    ck_assert_int_eq(needs.block_size, 4);
    ck_assert_int_eq(needs.mask_token, VOCAB - 1);

    loom_draft_stream *st[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(loom_drafter_stream_new(&d, dr, &st[i], &err),
                         LOOM_OK);
    float feat[4] = {0};
    loom_view fv = loom_view_host_f32(feat, 1, 4);
    const int32_t pos[1] = {0};
    ck_assert_int_eq(loom_drafter_absorb(&d, dr, st[0], &fv, pos, 1, &err),
                     LOOM_OK);
    /* a 2.0 drafter (older minor): its vtable ends before absorb_tokens,
     * which the dispatcher then never reads (the plugin's memory past the
     * end holds a member that fails) */
    ck_assert_int_eq(ref->plugin->abi_minor, 0);
    ck_assert_uint_eq(d.size, offsetof(loom_drafter_i, absorb_tokens));
    const int32_t seen[1] = {7};
    ck_assert_int_eq(
        loom_drafter_absorb_tokens(&d, dr, st[0], seen, pos, 1, &err), LOOM_OK);

    int32_t tok[2 * 4], par[2 * 4], n_out[2];
    loom_proposals pr;
    memset(&pr, 0, sizeof pr);
    pr.struct_size = sizeof pr;
    pr.max = 4;
    pr.tokens = tok;
    pr.parents = par;
    pr.n_out = n_out;
    const int32_t last[2] = {10, 63};
    ck_assert_int_eq(loom_drafter_draft(&d, dr, st, last, 2, &pr, &err),
                     LOOM_OK);
    ck_assert_int_eq(n_out[0], 3);
    ck_assert_int_eq(n_out[1], 3);
    ck_assert_int_eq(tok[0], 11);
    ck_assert_int_eq(tok[2], 13);
    ck_assert_int_eq(tok[4], 0); /* 63 + 1 wraps at the vocab */
    ck_assert_int_eq(par[5], -1);
    const int32_t bad[2] = {10, 999};
    ck_assert_int_eq(loom_drafter_draft(&d, dr, st, bad, 2, &pr, &err),
                     LOOM_ERR_RANGE);
    ck_assert_str_eq(err.msg, "tp-toy-drafter: stream 1: last token 999");
    for (int i = 0; i < 2; i++)
        loom_drafter_stream_free(&d, dr, st[i]);
    loom_drafter_close(&d, dr);
    loom_engine_close(e);
}
END_TEST

/* A vtable without a required member and a foreign major are refused, in
 * one line naming the plugin and the sizes. */
START_TEST(short_vtables_and_other_majors_are_refused)
{
    loom_host_state hs;
    loom_host_init(&hs, NULL);
    loom_registry *reg = NULL;
    loom_err err;
    const char *dirs[1] = {LOOM_TEST_PLUGIN_DIR};
    ck_assert_int_eq(loom_registry_load(dirs, 1, &hs, &reg, &err), LOOM_OK);
    int found = 0;
    char want[128];
    snprintf(want, sizeof want, "tp-shortvt: %s vtable is %zu bytes, ABI 2.0",
             LOOM_FAMILY_ID, offsetof(loom_family_i, forward));
    for (int i = 0; i < loom_registry_refused_count(reg); i++) {
        const loom_refusal *r = loom_registry_refused_at(reg, i);
        if (strstr(r->path, "libtp_shortvt")) {
            found |= 1;
            ck_assert_msg(strstr(r->reason, want), "%s", r->reason);
            ck_assert_ptr_null(strchr(r->reason, '\n'));
        }
        if (strstr(r->path, "libtp_shortdrafter")) {
            char dwant[128];
            snprintf(dwant, sizeof dwant,
                     "tp-shortdrafter: %s vtable is %zu bytes, ABI 2.0 needs "
                     "%zu",
                     LOOM_DRAFTER_ID, offsetof(loom_drafter_i, draft),
                     offsetof(loom_drafter_i, draft) + sizeof(void *));
            found |= 4;
            ck_assert_msg(strstr(r->reason, dwant), "%s", r->reason);
            ck_assert_ptr_null(strchr(r->reason, '\n'));
        }
        if (strstr(r->path, "libtp_badabi")) {
            found |= 2;
            ck_assert_ptr_null(strchr(r->reason, '\n'));
        }
    }
    ck_assert_int_eq(found, 7);
    for (int i = 0; i < loom_registry_count(reg); i++)
        ck_assert_str_ne(loom_registry_at(reg, i)->plugin->name, "tp-shortvt");
    loom_registry_free(reg);
}
END_TEST

/* Over the budget of its kind, account refuses, names use and bytes, and
 * counts nothing; the plugin's cache_new passes the refusal on. */
START_TEST(accounting_keeps_the_budget)
{
    loom_engine *e = open_family("tp-toy");
    loom_err err;
    int64_t used = loom_host_accounted(&e->hs, LOOM_MEM_HOST, -1);
    loom_host_set_budget(&e->hs, LOOM_MEM_HOST, used + 8);
    loom_cache *c = NULL;
    ck_assert_int_eq(loom_family_cache_new(&e->family, e->model, &c, &err),
                     LOOM_ERR_FULL);
    ck_assert_ptr_null(c);
    ck_assert_msg(strncmp(err.msg, "tp-toy: host memory for cache: ", 31) == 0,
                  "%s", err.msg);
    ck_assert_int_eq(loom_host_accounted(&e->hs, LOOM_MEM_HOST, -1), used);
    const loom_host *h = e->plugin->host;
    ck_assert_int_eq(h->account(h, LOOM_MEM_HOST, LOOM_MEM_SCRATCH, 8, &err),
                     LOOM_OK);
    ck_assert_int_eq(h->account(h, LOOM_MEM_HOST, LOOM_MEM_SCRATCH, 1, &err),
                     LOOM_ERR_FULL);
    ck_assert_ptr_nonnull(strstr(err.msg, "scratch: 1 bytes"));
    /* the device budget is apart from the host's */
    ck_assert_int_eq(
        h->account(h, LOOM_MEM_DEVICE, LOOM_MEM_WEIGHTS, 1 << 20, &err),
        LOOM_OK);
    ck_assert_int_eq(
        h->account(h, LOOM_MEM_DEVICE, LOOM_MEM_WEIGHTS, -(1 << 20), &err),
        LOOM_OK);
    ck_assert_int_eq(h->account(h, LOOM_MEM_HOST, LOOM_MEM_SCRATCH, -8, &err),
                     LOOM_OK);
    ck_assert_int_eq(loom_host_accounted(&e->hs, LOOM_MEM_HOST, -1), used);
    ck_assert_ptr_null(h->cuda(h));
    loom_host_set_budget(&e->hs, LOOM_MEM_HOST, INT64_MAX);
    loom_engine_close(e);
}
END_TEST

/* tensor_find / tensor_next / weight_find fill a caller's struct up to its
 * struct_size: a bigger one keeps its extra field, one smaller than 2.0's
 * is refused. */
START_TEST(host_fills_structs_by_their_size)
{
    loom_host_state hs;
    loom_host_init(&hs, NULL);
    const loom_host *h = &hs.host;
    loom_checkpoint *ck = NULL;
    loom_err err;
    ck_assert_int_eq(
        loom_checkpoint_open(fixture("models/qwen35-tiny"), &ck, &err),
        LOOM_OK);
    ck_assert_int_eq(loom_checkpoint_load_tensors(ck, &err), LOOM_OK);

    struct {
        loom_tensor t;
        uint64_t later;
    } big;
    memset(&big, 0, sizeof big);
    big.t.struct_size = sizeof big;
    big.later = 0x1234;
    size_t cursor = 0;
    ck_assert_int_eq(h->tensor_next(ck, "", &cursor, &big.t), 1);
    ck_assert_uint_eq(big.t.struct_size, sizeof(loom_tensor));
    ck_assert_uint_eq(big.later, 0x1234);
    char name[256];
    snprintf(name, sizeof name, "%s", big.t.name);

    loom_tensor t;
    memset(&t, 0, sizeof t);
    t.struct_size = sizeof t;
    ck_assert_int_eq(h->tensor_find(ck, name, &t, &err), LOOM_OK);
    ck_assert_uint_eq(t.nbytes, big.t.nbytes);
    ck_assert_ptr_eq(t.data, big.t.data);

    t.struct_size = 0;
    ck_assert_int_eq(h->tensor_find(ck, name, &t, &err), LOOM_ERR_ABI);
    t.struct_size = (uint32_t)offsetof(loom_tensor, nbytes);
    ck_assert_int_eq(h->tensor_find(ck, name, &t, &err), LOOM_ERR_ABI);
    ck_assert_ptr_nonnull(strstr(err.msg, "loom_tensor"));
    cursor = 0;
    ck_assert_int_eq(h->tensor_next(ck, "", &cursor, &t), 0);

    /* a linear weight: the first 2-D "*.weight" */
    char base[256] = "";
    cursor = 0;
    t.struct_size = sizeof t;
    while (!base[0] && h->tensor_next(ck, "", &cursor, &t) == 1) {
        size_t n = strlen(t.name);
        if (t.ndim == 2 && n > 7 && strcmp(t.name + n - 7, ".weight") == 0)
            snprintf(base, sizeof base, "%.*s", (int)(n - 7), t.name);
    }
    ck_assert(base[0]);
    struct {
        loom_weight w;
        uint64_t later;
    } wb;
    memset(&wb, 0, sizeof wb);
    wb.w.struct_size = sizeof wb;
    wb.later = 7;
    ck_assert_msg(h->weight_find(ck, base, 0, 0, &wb.w, &err) == LOOM_OK, "%s",
                  err.msg);
    ck_assert_uint_eq(wb.w.struct_size, sizeof(loom_weight));
    ck_assert_uint_eq(wb.later, 7);
    ck_assert_int_eq(wb.w.rows, t.shape[0]);
    loom_weight w;
    memset(&w, 0, sizeof w);
    w.struct_size = 4;
    ck_assert_int_eq(h->weight_find(ck, base, 0, 0, &w, &err), LOOM_ERR_ABI);
    loom_checkpoint_close(ck);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("abi");
    TCase *tc = tcase_create("abi");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, older_and_newer_minors_load_and_work);
    tcase_add_test(tc, null_optional_members_get_their_defaults);
    tcase_add_test(tc, the_lane_runs_on_the_default_cache_reset);
    tcase_add_test(tc, plugin_errors_are_named);
    tcase_add_test(tc, the_drafter_dispatcher_applies_defaults);
    tcase_add_test(tc, short_vtables_and_other_majors_are_refused);
    tcase_add_test(tc, accounting_keeps_the_budget);
    tcase_add_test(tc, host_fills_structs_by_their_size);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
