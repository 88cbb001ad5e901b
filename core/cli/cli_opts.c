/* The one option parser of every subcommand (see cli_opts.h). */
#include "cli_opts.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const loom_cli_opt *find_long(const loom_cli_cmd *c, const char *name,
                                     size_t len)
{
    for (int t = 0; t < LOOM_CLI_MAX_TABLES && c->tables[t]; t++)
        for (const loom_cli_opt *o = c->tables[t]; o->long_name; o++)
            if (strlen(o->long_name) == len &&
                !strncmp(o->long_name, name, len))
                return o;
    return NULL;
}

static const loom_cli_opt *find_short(const loom_cli_cmd *c, char ch)
{
    for (int t = 0; t < LOOM_CLI_MAX_TABLES && c->tables[t]; t++)
        for (const loom_cli_opt *o = c->tables[t]; o->long_name; o++)
            if (o->short_name && o->short_name == ch)
                return o;
    return NULL;
}

/* Stores VALUE (NULL for a flag) into O's destination; 0, or -1 with a
 * message naming OPT as the user wrote it. */
static int store(const loom_cli_cmd *c, const loom_cli_opt *o, const char *opt,
                 const char *v)
{
    char *end;
    switch (o->kind) {
    case LOOM_OPT_FLAG:
        *(int *)o->dst = o->lo != 0 ? (int)o->lo : 1;
        break;
    case LOOM_OPT_STR:
        *(const char **)o->dst = v;
        break;
    case LOOM_OPT_LIST:
        if (*o->count >= (int)o->hi) {
            fprintf(stderr, "loom %s: at most %d %s options\n", c->name,
                    (int)o->hi, opt);
            return -1;
        }
        ((const char **)o->dst)[(*o->count)++] = v;
        return 0;
    case LOOM_OPT_INT: {
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (errno || end == v || *end) {
            fprintf(stderr, "loom %s: %s: '%s' is not an integer\n", c->name,
                    opt, v);
            return -1;
        }
        if ((double)x < o->lo || (double)x > o->hi) {
            fprintf(stderr, "loom %s: %s: %lld is not in [%.0f, %.0f]\n",
                    c->name, opt, x, o->lo, o->hi);
            return -1;
        }
        *(int64_t *)o->dst = x;
        break;
    }
    case LOOM_OPT_NUM: {
        errno = 0;
        double x = strtod(v, &end);
        if (errno || end == v || *end || !isfinite(x)) {
            fprintf(stderr, "loom %s: %s: '%s' is not a number\n", c->name, opt,
                    v);
            return -1;
        }
        if (x < o->lo || x > o->hi) {
            fprintf(stderr, "loom %s: %s: %g is not in [%g, %g]\n", c->name,
                    opt, x, o->lo, o->hi);
            return -1;
        }
        *(double *)o->dst = x;
        break;
    }
    case LOOM_OPT_U64: {
        errno = 0;
        unsigned long long x = strtoull(v, &end, 0);
        if (errno || end == v || *end || v[0] == '-') {
            fprintf(stderr, "loom %s: %s: '%s' is not an unsigned integer\n",
                    c->name, opt, v);
            return -1;
        }
        *(uint64_t *)o->dst = x;
        break;
    }
    case LOOM_OPT_CALL:
        if (o->call(o->dst, opt, v) != 0)
            return -1;
        break;
    }
    if (o->count)
        *o->count = 1;
    return 0;
}

static int usage_error(const loom_cli_cmd *c)
{
    fprintf(stderr, "(see loom %s --help)\n", c->name);
    return 2;
}

int loom_cli_parse(const loom_cli_cmd *c, int argc, char **argv,
                   const char **pos)
{
    int n_pos = 0, only_pos = 0;
    for (int k = 0; k < c->max_pos; k++)
        pos[k] = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        /* "-" alone is a positional argument (stdin, by convention) */
        if (only_pos || a[0] != '-' || !a[1]) {
            if (n_pos == c->max_pos) {
                fprintf(stderr, "loom %s: unexpected argument '%s'\n", c->name,
                        a);
                return usage_error(c);
            }
            pos[n_pos++] = a;
            continue;
        }
        if (!strcmp(a, "--")) {
            only_pos = 1;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            loom_cli_help(c, stdout);
            return 0;
        }
        const loom_cli_opt *o;
        const char *inline_v = NULL;
        char opt[64];
        if (a[1] == '-') {
            const char *eq = strchr(a + 2, '=');
            size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
            o = find_long(c, a + 2, len);
            snprintf(opt, sizeof opt, "--%.*s", (int)len, a + 2);
            if (eq)
                inline_v = eq + 1;
        } else {
            o = find_short(c, a[1]);
            snprintf(opt, sizeof opt, "-%c", a[1]);
            if (a[2])
                inline_v = a + 2;
        }
        if (!o) {
            fprintf(stderr, "loom %s: unknown option %s\n", c->name, opt);
            return usage_error(c);
        }
        if (!o->arg) {
            if (inline_v) {
                fprintf(stderr, "loom %s: %s takes no value\n", c->name, opt);
                return usage_error(c);
            }
            if (store(c, o, opt, NULL) != 0)
                return 2;
            continue;
        }
        const char *v = inline_v;
        if (!v) {
            if (i + 1 >= argc) {
                fprintf(stderr, "loom %s: %s needs a value (%s)\n", c->name,
                        opt, o->arg);
                return usage_error(c);
            }
            v = argv[++i];
        }
        if (store(c, o, opt, v) != 0)
            return 2;
    }
    if (n_pos < c->min_pos) {
        loom_cli_help(c, stderr);
        return 2;
    }
    return -1;
}

/* "  -p, --prompt TEXT" into buf; returns its length. */
static int option_head(const loom_cli_opt *o, char *buf, size_t cap)
{
    return snprintf(buf, cap, "  %c%c%s--%s%s%s", o->short_name ? '-' : ' ',
                    o->short_name ? o->short_name : ' ',
                    o->short_name ? ", " : "  ", o->long_name,
                    o->arg ? " " : "", o->arg ? o->arg : "");
}

void loom_cli_help(const loom_cli_cmd *c, FILE *out)
{
    fputs(c->usage, out);
    int width = 0;
    char head[160];
    for (int t = 0; t < LOOM_CLI_MAX_TABLES && c->tables[t]; t++)
        for (const loom_cli_opt *o = c->tables[t]; o->long_name; o++) {
            if (!o->help)
                continue;
            int n = option_head(o, head, sizeof head);
            if (n > width)
                width = n;
        }
    if (width == 0)
        return;
    fputs("\noptions:\n", out);
    width += 2;
    for (int t = 0; t < LOOM_CLI_MAX_TABLES && c->tables[t]; t++)
        for (const loom_cli_opt *o = c->tables[t]; o->long_name; o++) {
            if (!o->help)
                continue;
            option_head(o, head, sizeof head);
            fprintf(out, "%-*s", width, head);
            for (const char *h = o->help; *h; h++) {
                fputc(*h, out);
                if (*h == '\n')
                    fprintf(out, "%*s", width, "");
            }
            fputc('\n', out);
        }
    fprintf(out, "%-*s%s\n", width, "  -h, --help", "this help");
}
