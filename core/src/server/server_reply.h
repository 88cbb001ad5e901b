/* A chat reply split as it is generated (server_reply.c): reasoning inside
 * <think>...</think>, content, and tool calls in the Qwen3 / Qwen3.5
 * (<tool_call>...</tool_call>, JSON or <function=...> inside) and Nemotron
 * (<TOOLCALL>[...]</TOOLCALL>) formats. */
#ifndef LOOM_SERVER_REPLY_H
#define LOOM_SERVER_REPLY_H

#include <stddef.h>

#include <jansson.h>

#include "server_http.h"

typedef struct srv_reply {
    int split_reasoning; /* look for <think>...</think> */
    int parse_tools;     /* look for tool calls */
    int mode;            /* content, reasoning, inside a tool block */
    int began;           /* content other than white space was seen */
    int skip_nl;         /* drop newlines opening the next content */
    int held_nl;         /* reasoning newlines held back (maybe trailing) */
    int reasoned;        /* a think block was seen */
    const char *close;   /* the open tool block's closing tag */
    const char *open;    /* ... and its opening tag */
    srv_buf pend;        /* text not yet classified */
    srv_buf held_ws;     /* content white space held before a possible call */
    /* what came out since the last srv_reply_clear */
    srv_buf reasoning, content;
    json_t *calls; /* [{"id","type","function":{"name","arguments"}}] */
    int n_calls;   /* calls in all, for ids and indexes */
    char id_base[48];
} srv_reply;

/* THINK_OPEN: the prompt ends inside an opened think block (the template's
 * generation prompt opened it). ID_BASE makes the calls' ids. */
void srv_reply_init(srv_reply *r, int split_reasoning, int think_open,
                    int parse_tools, const char *id_base);
void srv_reply_free(srv_reply *r);
/* Feeds generated text; 0, or -1 out of memory. */
int srv_reply_feed(srv_reply *r, const char *s, size_t n);
/* The text has ended: what is held comes out (an unclosed tool block as
 * content). */
int srv_reply_finish(srv_reply *r);
/* Empties reasoning, content and calls (after they were sent). */
void srv_reply_clear(srv_reply *r);

/* The calls in a tool block's BODY (tags excluded): a JSON object or array
 * of {"name", "arguments"|"parameters"}, or <function=NAME> blocks of
 * <parameter=KEY> values. NULL when it is none of those. */
json_t *srv_tool_calls_parse(const char *body, size_t n);

#endif
