/* The DFlash drafter plugin on the CPU with qwen35-tiny as its target: the
 * first block's logits against the reference drafter's (fixtures/drafters/
 * dflash-tiny), the config variants it reads alike, what it refuses (a
 * target it does not fit, malformed weights), and the proposals it writes. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <loom/checkpoint.h>
#include <loom/cpu_ops.h>
#include <loom/drafter.h>
#include <loom/registry.h>

#include "testmodel.h"
#include "testutil.h"

#define TARGET  "models/qwen35-tiny"
#define DRAFTER "drafters/dflash-tiny"
#define B       4   /* the fixture's block size */
#define VOCAB   512 /* the fixture's */

/* golden.json of dflash-tiny: the prompt and the target's first token. */
typedef struct golden {
    int32_t prompt[64];
    int32_t n_prompt;
    int32_t first;
    float *logits; /* [B-1, VOCAB] */
} golden;

static void read_golden(golden *g)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/golden.json", fixture(DRAFTER));
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    ck_assert_msg(j != NULL, "%s: %s", path, je.text);
    json_t *ids = json_object_get(j, "prompt_ids");
    g->n_prompt = (int32_t)json_array_size(ids);
    ck_assert_int_le(g->n_prompt, 64);
    for (int32_t i = 0; i < g->n_prompt; i++)
        g->prompt[i] = (int32_t)json_integer_value(json_array_get(ids, i));
    g->first = (int32_t)json_integer_value(json_object_get(j, "first_token"));
    json_t *shape =
        json_object_get(json_object_get(j, "draft_logits"), "shape");
    ck_assert_int_eq(json_integer_value(json_array_get(shape, 0)), B - 1);
    ck_assert_int_eq(json_integer_value(json_array_get(shape, 1)), VOCAB);
    json_decref(j);
    snprintf(path, sizeof path, "%s/draft_logits.f32", fixture(DRAFTER));
    size_t n = 0;
    g->logits = read_f32(path, &n);
    ck_assert_ptr_nonnull(g->logits);
    ck_assert_uint_eq(n, (size_t)(B - 1) * VOCAB);
}

/* A target engine and a drafter opened for it. */
typedef struct pair {
    loom_engine *e;
    loom_checkpoint *ckpt;
    loom_drafter_ref ref;
    const loom_host *host; /* the drafter plugin's */
    const loom_target_i *ext_of_target;
    loom_drafter *d;
} pair;

/* Opens drafter checkpoint `dir` for qwen35-tiny; returns the status, with
 * the message in err. */
static loom_status open_pair(const char *dir, pair *p, loom_err *err)
{
    memset(p, 0, sizeof *p);
    p->e = tm_open_ok(fixture(TARGET), "qwen35");
    loom_status rc = loom_checkpoint_open(dir, &p->ckpt, err);
    ck_assert_msg(rc == LOOM_OK, "%s", err->msg);
    rc = loom_checkpoint_load_tensors(p->ckpt, err);
    if (rc != LOOM_OK)
        return rc;
    ck_assert_int_eq(loom_registry_kind_of(p->e->registry, p->ckpt),
                     LOOM_PLUGIN_DRAFTER);
    const loom_plugin_ref *pl = NULL;
    rc = loom_registry_select(p->e->registry, p->ckpt, LOOM_PLUGIN_DRAFTER,
                              NULL, &pl, err);
    ck_assert_msg(rc == LOOM_OK, "%s", err->msg);
    ck_assert_str_eq(pl->plugin->name, "dflash");
    ck_assert_int_eq(loom_drafter_bind(pl->plugin, &p->ref, err), LOOM_OK);
    p->host = pl->host;
    p->ext_of_target =
        loom_family_extension(&p->e->family, p->e->model, LOOM_TARGET_ID);
    loom_target t = {sizeof t, &p->e->info, p->e->model, p->ext_of_target};
    return loom_drafter_open(&p->ref, pl->host, p->ckpt, &t, &p->d, err);
}

static void open_pair_ok(const char *dir, pair *p)
{
    loom_err err = {{0}};
    loom_status rc = open_pair(dir, p, &err);
    ck_assert_msg(rc == LOOM_OK, "open drafter %s: %s", dir, err.msg);
}

static void close_pair(pair *p)
{
    loom_drafter_close(&p->ref, p->d);
    if (p->ckpt)
        loom_checkpoint_close(p->ckpt);
    loom_engine_close(p->e);
}

/* A stream that has absorbed the target's taps of the prompt, fed to the
 * target in `n_chunks` forwards (and absorbed chunk by chunk). The target's
 * greedy token after the prompt must be the fixture's first token. */
static loom_draft_stream *prompt_stream(pair *p, const golden *g, int n_chunks)
{
    loom_drafter_needs needs;
    loom_drafter_get_needs(&p->ref, p->d, &needs);
    int64_t width = (int64_t)needs.n_taps * p->e->info.hidden;
    int32_t T = g->n_prompt;
    float *taps = malloc((size_t)T * (size_t)width * sizeof *taps);
    float *lg = malloc((size_t)VOCAB * sizeof *lg);
    ck_assert(taps && lg);
    loom_cache *c = tm_new_cache(p->e);
    loom_draft_stream *s = NULL;
    loom_err err = {{0}};
    ck_assert_int_eq(loom_drafter_stream_new(&p->ref, p->d, &s, &err), LOOM_OK);
    int32_t at = 0;
    for (int k = 0; k < n_chunks; k++) {
        int32_t end = k == n_chunks - 1 ? T : at + T / n_chunks;
        loom_row rows[64];
        int32_t pos[64];
        for (int32_t i = at; i < end; i++) {
            rows[i - at] = (loom_row){c, g->prompt[i], i, -1, LOOM_ROW_TAP};
            pos[i - at] = i;
        }
        if (end == T)
            rows[end - 1 - at].flags |= LOOM_ROW_LOGITS;
        loom_status rc =
            tm_forward_taps(p->e, rows, end - at, lg, taps, width, &err);
        ck_assert_msg(rc == LOOM_OK, "%s", err.msg);
        loom_view fv = loom_view_host_f32(taps, end - at, width);
        rc = loom_drafter_absorb(&p->ref, p->d, s, &fv, pos, end - at, &err);
        ck_assert_msg(rc == LOOM_OK, "%s", err.msg);
        at = end;
    }
    ck_assert_int_eq(loom_cpu_argmax(lg, VOCAB), g->first);
    tm_cache_free(p->e, c);
    free(taps);
    free(lg);
    return s;
}

/* Proposals of n streams, up to max each, with logits when `logits`. */
typedef struct props {
    int32_t tokens[4 * 16], parents[4 * 16], n_out[4];
    loom_proposals pr;
} props;

static void props_init(props *o, int32_t max, float *logits, int64_t rows)
{
    memset(o, 0, sizeof *o);
    o->pr.struct_size = sizeof o->pr;
    o->pr.max = max;
    o->pr.tokens = o->tokens;
    o->pr.parents = o->parents;
    o->pr.n_out = o->n_out;
    if (logits)
        o->pr.logits = loom_view_host_f32(logits, rows, VOCAB);
}

static void draft_ok(pair *p, loom_draft_stream **s, const int32_t *last,
                     int32_t n, props *o)
{
    loom_err err = {{0}};
    loom_status rc =
        loom_drafter_draft(&p->ref, p->d, s, last, n, &o->pr, &err);
    ck_assert_msg(rc == LOOM_OK, "draft: %s", err.msg);
}

/* The first block's logits, rows 1..B-1, against the reference's; the
 * drafts are their argmax. */
static void check_first_block(const char *dir)
{
    golden g;
    read_golden(&g);
    pair p;
    open_pair_ok(dir, &p);
    loom_draft_stream *s = prompt_stream(&p, &g, 1);
    float lg[(B - 1) * VOCAB];
    props o;
    props_init(&o, B - 1, lg, B - 1);
    draft_ok(&p, &s, &g.first, 1, &o);
    ck_assert_int_eq(o.n_out[0], B - 1);
    double d = rel_err(lg, g.logits, (size_t)(B - 1) * VOCAB);
    ck_assert_msg(d < 1e-4, "%s: first block's logits off by %g", dir, d);
    for (int j = 0; j < B - 1; j++) {
        ck_assert_int_eq(o.tokens[j],
                         loom_cpu_argmax(g.logits + j * VOCAB, VOCAB));
        ck_assert_int_eq(o.parents[j], -1);
    }
    loom_drafter_stream_free(&p.ref, p.d, s);
    close_pair(&p);
    free(g.logits);
}

START_TEST(the_first_block_matches_the_reference)
{
    check_first_block(fixture(DRAFTER));
}
END_TEST

/* int array `key` of golden.json into out (at most 64); returns the count. */
static int32_t golden_ints(const char *key, int32_t *out)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/golden.json", fixture(DRAFTER));
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    ck_assert_msg(j != NULL, "%s: %s", path, je.text);
    json_t *a = json_object_get(j, key);
    int32_t n = (int32_t)json_array_size(a);
    ck_assert_int_le(n, 64);
    for (int32_t i = 0; i < n; i++)
        out[i] = (int32_t)json_integer_value(json_array_get(a, i));
    json_decref(j);
    return n;
}

/* The reference's greedy speculative run, driven by hand: each round drafts
 * B-1 tokens, verifies [pending, drafts] as one window of the target,
 * accepts the drafts equal to the target's argmax, commits the kept rows
 * and absorbs their taps. Tokens and per-round acceptance lengths equal the
 * fixture's (and so plain greedy decoding). */
START_TEST(a_speculative_run_matches_the_reference)
{
    golden g;
    read_golden(&g);
    int32_t want[64], want_acc[64];
    int32_t n_want = golden_ints("speculative_greedy", want);
    int32_t n_rounds = golden_ints("acceptance_lengths", want_acc);
    pair p;
    open_pair_ok(fixture(DRAFTER), &p);
    int64_t width = 2 * p.e->info.hidden;
    int32_t T = g.n_prompt;
    float *taps = malloc((size_t)(T + 64) * (size_t)width * sizeof *taps);
    float lg[B * VOCAB];
    ck_assert_ptr_nonnull(taps);
    loom_cache *c = tm_new_cache(p.e);
    loom_draft_stream *s = NULL;
    loom_err err = {{0}};
    ck_assert_int_eq(loom_drafter_stream_new(&p.ref, p.d, &s, &err), LOOM_OK);
    loom_row rows[64];
    int32_t pos[64];
    for (int32_t i = 0; i < T; i++) {
        rows[i] = (loom_row){c, g.prompt[i], i, -1, LOOM_ROW_TAP};
        pos[i] = i;
    }
    rows[T - 1].flags |= LOOM_ROW_LOGITS;
    ck_assert_int_eq(tm_forward_taps(p.e, rows, T, lg, taps, width, &err),
                     LOOM_OK);
    loom_view fv = loom_view_host_f32(taps, T, width);
    ck_assert_int_eq(loom_drafter_absorb(&p.ref, p.d, s, &fv, pos, T, &err),
                     LOOM_OK);
    int32_t got[80], n_got = 0, at = T;
    got[n_got++] = (int32_t)loom_cpu_argmax(lg, VOCAB);
    for (int32_t r = 0; r < n_rounds; r++) {
        props o;
        props_init(&o, B - 1, NULL, 0);
        draft_ok(&p, &s, &got[n_got - 1], 1, &o);
        for (int32_t j = 0; j < B; j++) {
            int32_t tok = j == 0 ? got[n_got - 1] : o.tokens[j - 1];
            rows[j] = (loom_row){c, tok, at + j, -1,
                                 LOOM_ROW_LOGITS | LOOM_ROW_TAP |
                                     LOOM_ROW_SPECULATIVE};
            pos[j] = at + j;
        }
        ck_assert_msg(tm_forward_taps(p.e, rows, B, lg, taps, width, &err) ==
                          LOOM_OK,
                      "%s", err.msg);
        int32_t a = 0;
        while (a < B - 1 &&
               o.tokens[a] == loom_cpu_argmax(lg + (int64_t)a * VOCAB, VOCAB))
            a++;
        ck_assert_msg(a + 1 == want_acc[r], "round %d accepted %d, want %d", r,
                      a + 1, want_acc[r]);
        for (int32_t j = 0; j < a; j++)
            got[n_got++] = o.tokens[j];
        got[n_got++] = (int32_t)loom_cpu_argmax(lg + (int64_t)a * VOCAB, VOCAB);
        ck_assert_int_eq(tm_commit(p.e, c, a + 1, &err), LOOM_OK);
        fv = loom_view_host_f32(taps, a + 1, width);
        ck_assert_int_eq(
            loom_drafter_absorb(&p.ref, p.d, s, &fv, pos, a + 1, &err),
            LOOM_OK);
        at += a + 1;
    }
    ck_assert_int_eq(n_got, n_want);
    for (int32_t i = 0; i < n_want; i++)
        ck_assert_msg(got[i] == want[i], "token %d: %d, want %d", i, got[i],
                      want[i]);
    loom_drafter_stream_free(&p.ref, p.d, s);
    tm_cache_free(p.e, c);
    close_pair(&p);
    free(taps);
    free(g.logits);
}
END_TEST

/* A copy of the drafter fixture with config.json's root merged with `edit`
 * (JSON null deletes a key) and, in model.safetensors' header, the first
 * occurrence of `from` replaced by `to` (same length) when from is given. */
static const char *drafter_copy(const char *edit, const char *from,
                                const char *to)
{
    const char *dir = temp_dir();
    ck_assert_ptr_nonnull(dir);
    char src[1024], dst[1024];
    snprintf(src, sizeof src, "%s/model.safetensors", fixture(DRAFTER));
    FILE *f = fopen(src, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *bytes = malloc((size_t)n);
    ck_assert_ptr_nonnull(bytes);
    ck_assert_uint_eq(fread(bytes, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    if (from) {
        ck_assert_uint_eq(strlen(from), strlen(to));
        uint64_t hlen = 0;
        memcpy(&hlen, bytes, 8);
        char *hit = NULL;
        for (uint64_t i = 8; i + strlen(from) <= 8 + hlen && !hit; i++)
            if (memcmp(bytes + i, from, strlen(from)) == 0)
                hit = bytes + i;
        ck_assert_msg(hit != NULL, "no %s in the header", from);
        memcpy(hit, to, strlen(to));
    }
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    f = fopen(dst, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(bytes, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    free(bytes);

    snprintf(src, sizeof src, "%s/config.json", fixture(DRAFTER));
    json_error_t je;
    json_t *cfg = json_load_file(src, 0, &je);
    ck_assert_msg(cfg != NULL, "%s: %s", src, je.text);
    json_t *ed = json_loads(edit, 0, &je);
    ck_assert_msg(ed != NULL, "bad edit %s: %s", edit, je.text);
    const char *key;
    json_t *v;
    json_object_foreach(ed, key, v)
    {
        if (json_is_null(v))
            json_object_del(cfg, key);
        else
            json_object_set(cfg, key, v);
    }
    json_decref(ed);
    snprintf(dst, sizeof dst, "%s/config.json", dir);
    ck_assert_int_eq(json_dump_file(cfg, dst, JSON_INDENT(1)), 0);
    json_decref(cfg);
    return dir;
}

/* block_size and the ids inside or outside dflash_config, rope_theta at the
 * root instead of rope_parameters, sliding layers whose window and flags
 * leave every key in sight: the same drafter. */
START_TEST(config_variants_read_alike)
{
    check_first_block(drafter_copy(
        "{\"block_size\": null, \"dflash_config\": {\"block_size\": 4, "
        "\"mask_token_id\": 511, \"target_layer_ids\": [0, 2]}}",
        NULL, NULL));
    check_first_block(
        drafter_copy("{\"dflash_config\": null, \"mask_token_id\": 511, "
                     "\"target_layer_ids\": [0, 2], \"rope_parameters\": "
                     "null, \"rope_theta\": 10000000.0}",
                     NULL, NULL));
    /* sliding layers told to be non-causal, with a window past the block */
    check_first_block(drafter_copy(
        "{\"layer_types\": [\"sliding_attention\", \"sliding_attention\"], "
        "\"sliding_window\": 4096, \"is_causal\": false}",
        NULL, NULL));
}
END_TEST

/* Without target_layer_ids the taps are z-lab's default for the target's
 * layer count: 2 draft layers over 4 target layers, round(1 + i*0) = 1. */
START_TEST(default_taps_come_from_the_target)
{
    pair p;
    open_pair_ok(drafter_copy("{\"num_target_layers\": null, "
                              "\"dflash_config\": {\"mask_token_id\": 511}}",
                              NULL, NULL),
                 &p);
    loom_drafter_needs needs;
    loom_drafter_get_needs(&p.ref, p.d, &needs);
    ck_assert_int_eq(needs.n_taps, 2);
    ck_assert_int_eq(needs.taps[0], 1);
    ck_assert_int_eq(needs.taps[1], 1);
    ck_assert_int_eq(needs.block_size, B);
    ck_assert_int_eq(needs.mask_token, 511);
    close_pair(&p);
}
END_TEST

static void expect_refused(const char *dir, loom_status code,
                           const char *const *words, int n_words)
{
    pair p;
    loom_err err = {{0}};
    loom_status rc = open_pair(dir, &p, &err);
    ck_assert_msg(rc == code, "%s: got %d (%s), want %d", dir, rc, err.msg,
                  code);
    ck_assert_ptr_null(p.d);
    for (int i = 0; i < n_words; i++)
        ck_assert_msg(strstr(err.msg, words[i]) != NULL,
                      "\"%s\" does not say \"%s\"", err.msg, words[i]);
    close_pair(&p);
}

/* A drafter made for another target: refused, naming the drafter, the field
 * and the target's value. */
START_TEST(a_drafter_that_does_not_fit_is_refused)
{
    const char *dir = drafter_copy("{\"vocab_size\": 1024}", NULL, NULL);
    expect_refused(dir, LOOM_ERR_INVALID,
                   (const char *[]){"dflash", dir, "vocab_size", "1024",
                                    "target model's vocab size is 512"},
                   5);
    dir = drafter_copy("{\"num_target_layers\": 8}", NULL, NULL);
    expect_refused(dir, LOOM_ERR_INVALID,
                   (const char *[]){dir, "num_target_layers", "8",
                                    "target model's layer count is 4"},
                   4);
    dir = drafter_copy("{\"num_target_layers\": null, \"dflash_config\": "
                       "{\"mask_token_id\": 511, \"target_layer_ids\": [0, "
                       "4]}}",
                       NULL, NULL);
    expect_refused(dir, LOOM_ERR_INVALID,
                   (const char *[]){dir, "target_layer_ids[1] is 4",
                                    "target model has 4 layers"},
                   3);
    /* a target whose loom.target/1 predates lm_head */
    pair p;
    open_pair_ok(fixture(DRAFTER), &p);
    loom_target_i old = *p.ext_of_target;
    old.struct_size = (uint32_t)offsetof(loom_target_i, lm_head);
    loom_target t = {sizeof t, &p.e->info, p.e->model, &old};
    loom_drafter *d = NULL;
    loom_err err = {{0}};
    ck_assert_int_eq(loom_drafter_open(&p.ref, p.host, p.ckpt, &t, &d, &err),
                     LOOM_ERR_UNSUPPORTED);
    ck_assert_ptr_null(d);
    ck_assert_ptr_nonnull(strstr(err.msg, "lm_head"));
    close_pair(&p);

    dir = drafter_copy("{\"hidden_size\": 32}", NULL, NULL);
    expect_refused(dir, LOOM_ERR_INVALID,
                   (const char *[]){dir, "hidden_size is 32",
                                    "target model's hidden size is 64"},
                   3);
}
END_TEST

/* A tensor of the wrong shape or a missing one: refused naming it. */
START_TEST(malformed_weights_are_refused)
{
    /* k_proj [32, 64] as [64, 32]: the same bytes, the wrong shape */
    const char *dir =
        drafter_copy("{}",
                     "\"layers.1.self_attn.k_proj.weight\":{\"dtype\":"
                     "\"BF16\",\"shape\":[32,64]",
                     "\"layers.1.self_attn.k_proj.weight\":{\"dtype\":"
                     "\"BF16\",\"shape\":[64,32]");
    expect_refused(dir, LOOM_ERR_FORMAT,
                   (const char *[]){"layers.1.self_attn.k_proj"}, 1);
    dir = drafter_copy("{}", "\"norm.weight\"", "\"norx.weight\"");
    expect_refused(dir, LOOM_ERR_NOT_FOUND, (const char *[]){"norm.weight"}, 1);
    /* a norm of integers, the same bytes */
    dir = drafter_copy("{}", "\"hidden_norm.weight\":{\"dtype\":\"BF16\"",
                       "\"hidden_norm.weight\":{\"dtype\":\"I16\" ");
    expect_refused(dir, LOOM_ERR_FORMAT, (const char *[]){"hidden_norm"}, 1);
}
END_TEST

/* Proposals: the logits view is filled only when asked and the tokens do
 * not depend on it; max below B-1 proposes a prefix; two streams in one call
 * draft what each drafts alone; drafting leaves no block K/V behind (the
 * same draft twice); a context absorbed in chunks is the same context. */
START_TEST(proposals_and_streams)
{
    golden g;
    read_golden(&g);
    pair p;
    open_pair_ok(fixture(DRAFTER), &p);
    loom_draft_stream *s[2] = {prompt_stream(&p, &g, 1),
                               prompt_stream(&p, &g, 3)};
    float one[(B - 1) * VOCAB], two[2 * (B - 1) * VOCAB];
    props a, b;
    props_init(&a, B - 1, one, B - 1);
    draft_ok(&p, s, &g.first, 1, &a);

    /* again: the block's K/V did not stay */
    props_init(&b, B - 1, two, B - 1);
    draft_ok(&p, s, &g.first, 1, &b);
    ck_assert_int_eq(memcmp(one, two, sizeof one), 0);

    /* no view: the same tokens, nothing written there */
    props_init(&b, B - 1, NULL, 0);
    draft_ok(&p, s, &g.first, 1, &b);
    ck_assert_int_eq(memcmp(a.tokens, b.tokens, (B - 1) * sizeof(int32_t)), 0);

    /* a prefix: max 2 */
    for (size_t i = 0; i < sizeof two / sizeof *two; i++)
        two[i] = -7.0f;
    props_init(&b, 2, two, 2);
    draft_ok(&p, s, &g.first, 1, &b);
    ck_assert_int_eq(b.n_out[0], 2);
    ck_assert_int_eq(memcmp(b.tokens, a.tokens, 2 * sizeof(int32_t)), 0);
    ck_assert_int_eq(memcmp(two, one, 2 * VOCAB * sizeof(float)), 0);

    /* two streams at once (one absorbed in three chunks), another last
     * token for the second */
    int32_t last[2] = {g.first, 7};
    props_init(&b, B - 1, two, 2 * (B - 1));
    draft_ok(&p, s, last, 2, &b);
    ck_assert_int_eq(b.n_out[0], B - 1);
    ck_assert_int_eq(b.n_out[1], B - 1);
    ck_assert_double_lt(rel_err(two, one, (B - 1) * VOCAB), 1e-6);
    props c;
    float alone[(B - 1) * VOCAB];
    props_init(&c, B - 1, alone, B - 1);
    draft_ok(&p, s + 1, last + 1, 1, &c);
    ck_assert_double_lt(rel_err(two + (B - 1) * VOCAB, alone, (B - 1) * VOCAB),
                        1e-6);
    ck_assert_int_eq(
        memcmp(b.tokens + B - 1, c.tokens, (B - 1) * sizeof(int32_t)), 0);

    /* refusals: a last token outside the vocabulary, the same stream twice,
     * a logits view too small */
    loom_err err = {{0}};
    int32_t bad = VOCAB;
    props_init(&b, B - 1, NULL, 0);
    ck_assert_int_eq(loom_drafter_draft(&p.ref, p.d, s, &bad, 1, &b.pr, &err),
                     LOOM_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(err.msg, "last token 512"));
    loom_draft_stream *same[2] = {s[0], s[0]};
    ck_assert_int_eq(
        loom_drafter_draft(&p.ref, p.d, same, last, 2, &b.pr, &err),
        LOOM_ERR_INVALID);
    props_init(&b, B - 1, two, B - 2);
    ck_assert_int_eq(loom_drafter_draft(&p.ref, p.d, s, last, 1, &b.pr, &err),
                     LOOM_ERR_INVALID);
    /* absorb past the context's end */
    float feat[2 * 64] = {0};
    loom_view fv = loom_view_host_f32(feat, 1, 2 * 64);
    int32_t far = g.n_prompt + 1;
    ck_assert_int_eq(loom_drafter_absorb(&p.ref, p.d, s[0], &fv, &far, 1, &err),
                     LOOM_ERR_INVALID);

    for (int i = 0; i < 2; i++)
        loom_drafter_stream_free(&p.ref, p.d, s[i]);
    close_pair(&p);
    free(g.logits);
}
END_TEST

static Suite *dflash_suite(void)
{
    Suite *s = suite_create("dflash");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, the_first_block_matches_the_reference);
    tcase_add_test(tc, a_speculative_run_matches_the_reference);
    tcase_add_test(tc, config_variants_read_alike);
    tcase_add_test(tc, default_taps_come_from_the_target);
    tcase_add_test(tc, a_drafter_that_does_not_fit_is_refused);
    tcase_add_test(tc, malformed_weights_are_refused);
    tcase_add_test(tc, proposals_and_streams);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return run_suite(dflash_suite());
}
