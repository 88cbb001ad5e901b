/* The loom subcommands; each lives in its own cmd_<name>.c. */
#ifndef LOOM_CLI_COMMANDS_H
#define LOOM_CLI_COMMANDS_H

int loom_cmd_plugins(int argc, char **argv);
int loom_cmd_inspect(int argc, char **argv);
/* Every tensor of MODEL with dtype, shape and bytes, and the total; JSON
 * when json != 0. Returns the exit code (cmd_tensors.c). */
int loom_cli_print_tensors(const char *model, int json);
#endif
