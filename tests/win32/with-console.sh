#!/usr/bin/env bash
# Runs a command (a Windows program under Wine) with a terminal on its
# stdin, so that Wine gives it a console to send console events through;
# its output goes through a pipe, not through Wine's console renderer.
# Usage: with-console.sh PROGRAM ARGS...   (exit status: the program's)
set -euo pipefail
cmd=$(printf '%q ' "$@")
SHELL=/bin/bash exec script -qec "set -o pipefail; $cmd 2>&1 | cat" /dev/null
