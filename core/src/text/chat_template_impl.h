/* The chat template's internals, shared by its files: chat_template_lex.c
 * (tokens), chat_template_parse.c (syntax tree), chat_template_value.c
 * (values with Python semantics), chat_template_eval.c (the interpreter) and
 * chat_template.c (the public API). */
#ifndef LOOM_CHAT_TEMPLATE_IMPL_H
#define LOOM_CHAT_TEMPLATE_IMPL_H

#include <jansson.h>

#include <loom/chat_template.h>

typedef enum ct_kind {
    /* expressions */
    CT_LIT,    /* lit */
    CT_NAME,   /* name */
    CT_ATTR,   /* a.name */
    CT_ITEM,   /* a[b] */
    CT_SLICE,  /* a[b:c:d], absent parts NULL */
    CT_CALL,   /* a(args, kw=...) */
    CT_FILTER, /* a | name(args) */
    CT_TEST,   /* a is [not] name(args); neg */
    CT_NOT,    /* not a */
    CT_NEG,    /* -a */
    CT_BINOP,  /* a op b: + - * / // % ** ~ == != < > <= >= in notin */
    CT_AND,    /* a and b */
    CT_OR,     /* a or b */
    CT_COND,   /* b if a else c */
    CT_LIST,   /* [args] (and tuples) */
    CT_DICT,   /* {args[2i]: args[2i+1]} */
    /* statements */
    CT_TEXT,   /* name holds the text */
    CT_OUTPUT, /* {{ a }} */
    CT_IF,     /* if a: body else: orelse */
    CT_FOR,    /* for targets in a [if b]: body else: orelse */
    CT_SET,    /* set target(s) = a, or a block set (body) */
    CT_BREAK,
    CT_CONTINUE,
    CT_MACRO, /* macro name(params=defaults): body */
    CT_BLOCK, /* a plain body (generation blocks) */
} ct_kind;

/* Bounds on one template and one render, so that hostile templates and
 * messages fail with an error instead of exhausting the stack, memory or
 * time: */
enum {
    CT_MAX_NEST = 100,         /* parser: nested (), [], {}, not, -, blocks */
    CT_MAX_HEIGHT = 400,       /* parser: depth of one syntax tree */
    CT_MAX_DEPTH = 600,        /* evaluator: nested evaluations */
    CT_MAX_VALUE_DEPTH = 4096, /* nesting of a value a template stores */
};
#define CT_MAX_STEPS 10000000LL           /* evaluation steps per render */
#define CT_MAX_STR   ((size_t)64 << 20)   /* bytes of one string or output */
#define CT_MAX_ITEMS ((size_t)1 << 22)    /* items of one list (expanded) */
#define CT_MAX_BYTES ((long long)1 << 30) /* bytes built per render */

typedef struct ct_node ct_node;

/* The variable a {% filter %} block's body is held in (CT_OUTPUT with neg
 * set): not a name a template can write. */
#define CT_FILTER_BODY "(filter body)"

typedef struct ct_list {
    ct_node **v;
    size_t n, cap;
} ct_list;

struct ct_node {
    ct_kind kind;
    int line;
    int height;      /* levels of expression below and including this node */
    char op[8];      /* CT_BINOP */
    int neg;         /* CT_TEST: "is not" */
    char *name;      /* name, attribute, filter, test, macro, or text */
    size_t name_len; /* CT_TEXT */
    json_t *lit;     /* CT_LIT */
    ct_node *a, *b, *c;
    ct_list args;   /* positional args, list items, dict pairs */
    ct_list kwargs; /* CT_LIT nodes named by kwnames */
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
/* strdup is POSIX, not C11. */
char *loom__ct_strdup(const char *s);

/* ---- tokens (chat_template_lex.c) */
typedef enum tk_type {
    TK_TEXT,
    TK_VAR_BEGIN,
    TK_VAR_END,
    TK_BLOCK_BEGIN,
    TK_BLOCK_END,
    TK_NAME,
    TK_STRING,
    TK_INT,
    TK_FLOAT,
    TK_OP,
    TK_EOF,
} tk_type;

typedef struct tk {
    tk_type type;
    int line;
    char *s; /* text, name, string value or operator */
    size_t len;
    json_int_t i;
    double f;
} tk;

/* Splits SRC (universal newlines already applied) into tokens, ending with
 * TK_EOF. Errors name the template line. */
loom_status loom__ct_lex(const char *src, size_t len, tk **out, size_t *n,
                         loom_err *err);
void loom__ct_tokens_free(tk *v, size_t n);

/* ---- syntax tree (chat_template_parse.c) */
/* Parses the tokens into BODY; on failure BODY is left empty. */
loom_status loom__ct_parse(tk *v, size_t n, ct_list *body, loom_err *err);

/* ---- values and their Python spellings (chat_template_value.c) */
typedef struct ct_buf {
    char *p;
    size_t n, cap;
    int oom; /* 1: out of memory; 2: the text would pass CT_MAX_STR */
} ct_buf;
void loom__ct_sb_add(ct_buf *b, const char *s, size_t len);
void loom__ct_sb_str(ct_buf *b, const char *s);
/* The buffer's text as a new string (NULL when it ran out of memory); the
 * buffer is freed and left empty. */
json_t *loom__ct_sb_take(ct_buf *b);
const char *loom__ct_type_name(json_t *v); /* Python's name; NULL: undefined */
int loom__ct_truthy(json_t *v);
int loom__ct_is_num(json_t *v); /* int, float or bool */
double loom__ct_num(json_t *v);
int loom__ct_is_int(json_t *v); /* int or bool */
json_int_t loom__ct_inum(json_t *v);
/* json.dumps(v, ensure_ascii=False, indent=INDENT or None when < 0) */
void loom__ct_to_json(ct_buf *b, json_t *v, int indent, int level);
/* json.dumps with its other arguments: separators (NULL: the defaults for
 * the indent), sort_keys, ensure_ascii */
typedef struct ct_json_opts {
    int indent; /* < 0: None */
    const char *item_sep, *key_sep;
    int sort_keys, ascii;
} ct_json_opts;
void loom__ct_to_json_opts(ct_buf *b, json_t *v, const ct_json_opts *o,
                           int level);
/* str(v), or repr for strings inside containers when !TOP */
void loom__ct_py_str(ct_buf *b, json_t *v, int top);
json_t *loom__ct_str_of(json_t *v);
int loom__ct_equal(json_t *a, json_t *b);
size_t loom__ct_u8_count(const char *s, size_t len);
size_t loom__ct_u8_offset(const char *s, size_t len, size_t idx);
size_t loom__ct_u8_len_at(const char *s, size_t len);
/* str.strip/lstrip/rstrip (CHARS NULL: white space) */
json_t *loom__ct_strip(json_t *v, json_t *chars, int left, int right);
json_t *loom__ct_split(json_t *v, json_t *sep, json_int_t maxsplit);
json_t *loom__ct_replace(json_t *v, json_t *from, json_t *to, json_int_t count);
/* mode 0 lower, 1 upper, 2 title, 3 capitalize (Unicode simple case
 * mappings, as Python's str methods for all but a few special cases) */
json_t *loom__ct_change_case(json_t *v, int mode);
/* v[a:b:step] of a list or str; NULL on a zero step */
json_t *loom__ct_slice(json_t *v, json_t *a, json_t *b, json_t *step);
/* v[k] of a dict, list or str; NULL when absent */
json_t *loom__ct_item(json_t *v, json_t *k);

/* ---- the filters kept apart from the interpreter (chat_template_filter.c):
 * sort, dictsort, unique, sum, max, min, round, format, indent, center,
 * batch, tojson, e/escape. */
int loom__ct_filter_known(const char *name);
/* Applies filter NAME to V with positional ARGS and keyword arguments
 * (names KW, values KWV; NULL values for undefined). LINE is for messages. */
loom_status loom__ct_filter(const char *name, int line, json_t *v,
                            json_t **args, size_t na, char **kw, json_t **kwv,
                            size_t n_kw, json_t **out, loom_err *err);
/* strftime_now(FORMAT): the local time now, as Python's strftime. */
json_t *loom__ct_strftime_now(json_t *format);

/* Renders the parsed body into *out (malloc'd). */
loom_status loom__ct_render(const loom_chat_template *t, json_t *vars,
                            char **out, loom_err *err);

#endif
