/* The loom command line: dispatches `loom CMD ...` to its subcommand. */
#include <stdio.h>
#include <string.h>

#include <loom/plugin.h>

#include "commands.h"

typedef int (*cmd_fn)(int argc, char **argv);

struct command {
    const char *name;
    cmd_fn fn;
    const char *summary;
};

static const struct command commands[] = {
    {"plugins", loom_cmd_plugins, "list the plugins found and those refused"},
    {"inspect", loom_cmd_inspect,
     "show the plugin chosen for a checkpoint and its geometry"},
    {"tokenize", loom_cmd_tokenize, "print the token ids of a text"},
    {"detokenize", loom_cmd_detokenize, "print the text of token ids"},
    {"chat-format", loom_cmd_chat_format,
     "render messages with the checkpoint's chat template"},
    {"logits", loom_cmd_logits, "write the logits of one forward to a file"},
    {"run", loom_cmd_run, "generate text or ids"},
    {"chat", loom_cmd_chat, "an interactive chat on a terminal"},
    {"bench", loom_cmd_bench, "measure prefill and decode speed"},
    {"bench-tokenizer", loom_cmd_bench_tokenizer, "measure encoding speed"},
    {"serve", loom_cmd_serve, "OpenAI-compatible HTTP server"},
};

static void usage(FILE *out)
{
    fprintf(out,
            "loom %s: an LLM inference engine\n\n"
            "usage: loom COMMAND [options]\n\ncommands:\n",
            LOOM_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        fprintf(out, "  %-16s %s\n", commands[i].name, commands[i].summary);
    fprintf(out,
            "\n`loom COMMAND --help` describes a command's options.\n"
            "Plugins are searched in --plugin-path DIR, $LOOM_PLUGIN_PATH, "
            "the plugins/ directory beside the executable, then "
            "../lib/loom/plugins beside it (an installed prefix).\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("loom %s (plugin ABI %d.%d)\n", LOOM_VERSION, LOOM_ABI_MAJOR,
               LOOM_ABI_MINOR);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++) {
        if (strcmp(argv[1], commands[i].name) != 0)
            continue;
        return commands[i].fn(argc - 1, argv + 1);
    }
    fprintf(stderr, "loom: unknown command '%s' (see loom --help)\n", argv[1]);
    return 2;
}
