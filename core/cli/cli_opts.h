/* The one option parser of every subcommand: a table of options, parsed as
 * people type them (--opt value, --opt=value, -n 3, -n3, -- ends options)
 * and printed as aligned help. */
#ifndef LOOM_CLI_OPTS_H
#define LOOM_CLI_OPTS_H

#include <stdint.h>
#include <stdio.h>

typedef enum loom_cli_kind {
    LOOM_OPT_FLAG, /* int *: set to 1 (or to .lo when .lo is nonzero) */
    LOOM_OPT_STR,  /* const char **: the value */
    LOOM_OPT_INT,  /* int64_t *: an integer in [lo, hi] */
    LOOM_OPT_NUM,  /* double *: a finite number in [lo, hi] */
    LOOM_OPT_U64,  /* uint64_t *: an unsigned integer */
    LOOM_OPT_LIST, /* const char **: repeatable, up to .hi values, count in
                    *.count */
    LOOM_OPT_CALL, /* .call(.dst, value) returns 0, or -1 with a message */
} loom_cli_kind;

typedef struct loom_cli_opt {
    char short_name;       /* 0: none */
    const char *long_name; /* without the leading "--"; NULL ends a table */
    const char *arg;       /* the value's name in help; NULL for a flag */
    loom_cli_kind kind;
    void *dst;
    double lo, hi;
    int *count; /* LOOM_OPT_LIST; else, when set, 1 once given */
    int (*call)(void *dst, const char *opt, const char *value);
    const char *help; /* "\n" continues on an indented line; NULL: hidden */
} loom_cli_opt;

/* A command: its name ("run"), its usage and description (printed before
 * the options), its option tables (each ends with a zeroed entry), and the
 * positional arguments it takes (min..max; NULL-padded in pos). */
#define LOOM_CLI_MAX_TABLES 4
typedef struct loom_cli_cmd {
    const char *name;
    const char *usage;
    const loom_cli_opt *tables[LOOM_CLI_MAX_TABLES];
    int min_pos, max_pos;
} loom_cli_cmd;

/* Parses argv[1..]: fills the options' destinations and pos[0..max_pos-1]
 * (the rest NULL). Returns -1 to go on, or the command's exit code: 0
 * after --help (help on stdout), 2 on a usage error (the message on
 * stderr, naming the option). */
int loom_cli_parse(const loom_cli_cmd *c, int argc, char **argv,
                   const char **pos);
/* Prints usage and every option, aligned. */
void loom_cli_help(const loom_cli_cmd *c, FILE *out);

#endif
