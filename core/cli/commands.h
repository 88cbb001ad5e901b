/* The loom subcommands; each lives in its own cmd_<name>.c. */
#ifndef LOOM_CLI_COMMANDS_H
#define LOOM_CLI_COMMANDS_H

#include <jansson.h>

int loom_cmd_plugins(int argc, char **argv);
int loom_cmd_inspect(int argc, char **argv);
/* `loom logits MODEL --ids ... --out FILE.f32` (cmd_logits.c). */
int loom_cmd_logits(int argc, char **argv);
/* `loom serve`: the OpenAI-compatible HTTP server (cmd_serve.c). */
int loom_cmd_serve(int argc, char **argv);
/* Every tensor of MODEL with dtype, shape and bytes, and the total; JSON
 * when json != 0. Returns the exit code (cmd_tensors.c). */
int loom_cli_print_tensors(const char *model, int json);
/* The same listing as a JSON object (NULL when out of memory). */
struct loom_st;
json_t *loom_cli_tensors_json(const struct loom_st *st, const char *dir);
/* `loom tokenize MODEL TEXT`, `loom detokenize MODEL IDS`, `loom chat-format
 * MODEL messages.json` (cmd_tokenize.c). */
int loom_cmd_tokenize(int argc, char **argv);
int loom_cmd_detokenize(int argc, char **argv);
int loom_cmd_chat_format(int argc, char **argv);
/* `loom bench-tokenizer MODEL FILE` (cmd_bench_tokenizer.c). */
int loom_cmd_bench_tokenizer(int argc, char **argv);
/* `loom run MODEL -p TEXT | --ids ...` (cmd_run.c) and `loom bench MODEL
 * --streams 1,8,32` (cmd_bench.c): generation through the lane. */
int loom_cmd_run(int argc, char **argv);
int loom_cmd_bench(int argc, char **argv);
/* `loom chat MODEL`: an interactive multi-turn chat (cmd_chat.c). */
int loom_cmd_chat(int argc, char **argv);
#endif
