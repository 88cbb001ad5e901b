/* The sampling options of the generating commands (see cli_sample.h). */
#include "cli_sample.h"

#include <math.h>
#include <string.h>

#include <jansson.h>
#include <loom/checkpoint.h>

#define NUM(name, arg, dst, help)                                              \
    (loom_cli_opt)                                                             \
    {                                                                          \
        0, name, arg, LOOM_OPT_NUM, dst, -HUGE_VAL, HUGE_VAL, NULL, NULL, help \
    }

void loom_cli_sample_init(loom_cli_sample *s)
{
    memset(s, 0, sizeof *s);
    s->temp = s->top_p = s->min_p = s->rep = s->pres = s->freq = NAN;
    loom_cli_opt *t = s->table;
    *t++ = NUM("temperature", "T", &s->temp,
               "0 is greedy (default: generation_config.json's when\n"
               "it samples, else 0)");
    *t++ = (loom_cli_opt){0,         "top-k",
                          "K",       LOOM_OPT_INT,
                          &s->top_k, INT32_MIN,
                          INT32_MAX, &s->has_top_k,
                          NULL,      "keep the K best tokens (0: off)"};
    *t++ = NUM("top-p", "P", &s->top_p,
               "keep the smallest set of mass P (1: off)");
    *t++ = NUM("min-p", "P", &s->min_p,
               "keep tokens of at least P x the best's probability");
    *t++ = NUM("repeat-penalty", "R", &s->rep,
               "penalize prompt and generated tokens (1: off)");
    *t++ = NUM("presence-penalty", "X", &s->pres,
               "OpenAI-style, over generated tokens");
    *t++ = NUM("frequency-penalty", "X", &s->freq,
               "OpenAI-style, over generated tokens");
    *t++ = (loom_cli_opt){
        0,        "seed",
        "S",      LOOM_OPT_U64,
        &s->seed, 0,
        0,        &s->has_seed,
        NULL,     "sampling seed (default: random, shown by --stats)"};
}

void loom_cli_sample_apply(const loom_cli_sample *s, loom_engine *e,
                           loom_sample_params *sp)
{
    loom_sample_params_default(sp);
    sp->temperature = 0.0f;
    json_t *gc = loom_checkpoint_generation_config(e->ckpt);
    if (gc && json_is_true(json_object_get(gc, "do_sample"))) {
        json_t *v = json_object_get(gc, "temperature");
        sp->temperature =
            json_is_number(v) ? (float)json_number_value(v) : 1.0f;
        v = json_object_get(gc, "top_k");
        if (json_is_integer(v) && json_integer_value(v) >= 0)
            sp->top_k = (int32_t)json_integer_value(v);
        v = json_object_get(gc, "top_p");
        if (json_is_number(v))
            sp->top_p = (float)json_number_value(v);
        v = json_object_get(gc, "min_p");
        if (json_is_number(v))
            sp->min_p = (float)json_number_value(v);
        v = json_object_get(gc, "repetition_penalty");
        if (json_is_number(v))
            sp->repeat_penalty = (float)json_number_value(v);
    }
    if (!isnan(s->temp))
        sp->temperature = (float)s->temp;
    if (s->has_top_k)
        sp->top_k = (int32_t)s->top_k;
    if (!isnan(s->top_p))
        sp->top_p = (float)s->top_p;
    if (!isnan(s->min_p))
        sp->min_p = (float)s->min_p;
    if (!isnan(s->rep))
        sp->repeat_penalty = (float)s->rep;
    if (!isnan(s->pres))
        sp->presence_penalty = (float)s->pres;
    if (!isnan(s->freq))
        sp->frequency_penalty = (float)s->freq;
    sp->seed = s->seed;
    sp->has_seed = s->has_seed;
}
