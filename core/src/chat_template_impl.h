/* The chat template's syntax tree, shared by chat_template.c (lexer,
 * parser, API) and chat_template_eval.c (the interpreter). */
#ifndef LOOM_CHAT_TEMPLATE_IMPL_H
#define LOOM_CHAT_TEMPLATE_IMPL_H

#include <jansson.h>

#include <loom/chat_template.h>

typedef enum ct_kind {
    /* expressions */
    CT_LIT,     /* lit */
    CT_NAME,    /* name */
    CT_ATTR,    /* a.name */
    CT_ITEM,    /* a[b] */
    CT_SLICE,   /* a[b:c:d], absent parts NULL */
    CT_CALL,    /* a(args, kw=...) */
    CT_FILTER,  /* a | name(args) */
    CT_TEST,    /* a is [not] name(args); neg */
    CT_NOT,     /* not a */
    CT_NEG,     /* -a */
    CT_BINOP,   /* a op b: + - * / // % ** ~ == != < > <= >= in notin */
    CT_AND,     /* a and b */
    CT_OR,      /* a or b */
    CT_COND,    /* b if a else c */
    CT_LIST,    /* [args] (and tuples) */
    CT_DICT,    /* {args[2i]: args[2i+1]} */
    /* statements */
    CT_TEXT,    /* name holds the text */
    CT_OUTPUT,  /* {{ a }} */
    CT_IF,      /* if a: body else: orelse */
    CT_FOR,     /* for targets in a [if b]: body else: orelse */
    CT_SET,     /* set target(s) = a, or a block set (body) */
    CT_BREAK,
    CT_CONTINUE,
    CT_MACRO,   /* macro name(params=defaults): body */
    CT_BLOCK,   /* a plain body (generation blocks) */
} ct_kind;

typedef struct ct_node ct_node;

typedef struct ct_list {
    ct_node **v;
    size_t n, cap;
} ct_list;

struct ct_node {
    ct_kind kind;
    int line;
    char op[8];      /* CT_BINOP */
    int neg;         /* CT_TEST: "is not" */
    char *name;      /* name, attribute, filter, test, macro, or text */
    size_t name_len; /* CT_TEXT */
    json_t *lit;     /* CT_LIT */
    ct_node *a, *b, *c;
    ct_list args;    /* positional args, list items, dict pairs */
    ct_list kwargs;  /* CT_LIT nodes named by kwnames */
    char **kwnames;
    size_t n_kw;
    /* CT_FOR: targets (names); CT_SET: targets (a name, or ns + attr);
     * CT_MACRO: params */
    char **targets;
    size_t n_targets;
    char *attr; /* CT_SET: ns.attr */
    ct_list body, orelse;
};

struct loom_chat_template {
    ct_list body;
    char *bos, *eos; /* NULL when tokenizer_config.json has none */
};

void loom__ct_free_list(ct_list *l);

/* Renders the parsed body into *out (malloc'd). */
loom_status loom__ct_render(const loom_chat_template *t, json_t *vars,
                            char **out, loom_err *err);

#endif
