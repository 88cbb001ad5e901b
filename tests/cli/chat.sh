#!/usr/bin/env bash
# `loom chat` under a pseudo-terminal (a small driver on Python's pty): two
# turns, each reply equal to `loom run --ids` on the conversation rendered
# by `loom chat-format` (so the history and the template are applied), then
# /exit with status 0; end of input leaves too. Loading shows progress on
# the terminal.
set -u
loom=$1
fixtures=$2
build=$(dirname "$loom")
if [ ! -e "$build/plugins/libloom-qwen35.so" ]; then
  echo "qwen35 plugin not built: skipped"; exit 77
fi
command -v python3 >/dev/null || { echo "no python3: skipped"; exit 77; }
exec python3 - "$loom" "$fixtures/models/qwen35-tiny" <<'PY'
import json, os, pty, select, subprocess, sys, tempfile, time

loom, model = sys.argv[1], sys.argv[2]
N = "8"
fails = 0
def check(name, ok):
    global fails
    print(("ok: " if ok else "FAIL: ") + name)
    fails += 0 if ok else 1

pid, fd = pty.fork()
if pid == 0:
    os.execv(loom, [loom, "chat", model, "-n", N, "--temperature", "0",
                    "--threads", "1", "--system", "You are terse."])

def read_prompt(timeout=60):
    """Output up to the next '> ' prompt that is followed by silence."""
    buf = b""
    end = time.time() + timeout
    while time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.3)
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
        elif buf.endswith(b"\r\n> ") or buf == b"> " or buf.endswith(b"\n> "):
            return buf
    return buf

def reply_of(out, sent):
    out = out.replace(b"\r\n", b"\n")
    echo = sent.encode() + b"\n"
    assert out.startswith(echo), out
    return out[len(echo):-len(b"\n> ")].decode()

banner = read_prompt()
check("a banner and a prompt on the terminal", b"/exit" in banner and banner.endswith(b"> "))
check("load progress on a terminal, up to the total",
      b"loom chat: loading" in banner and b"MB (100%)" in banner)

def reference(messages):
    with tempfile.TemporaryDirectory() as d:
        m = os.path.join(d, "m.json")
        with open(m, "w") as f:
            json.dump(messages, f)
        text = subprocess.run([loom, "chat-format", model, m], check=True,
                              capture_output=True).stdout
        t = os.path.join(d, "t.txt")
        with open(t, "wb") as f:
            f.write(text)
        ids = subprocess.run([loom, "tokenize", model, "-f", t], check=True,
                             capture_output=True, text=True).stdout
        ids = ids.strip().strip("[]").replace(" ", "")
        out = subprocess.run([loom, "run", model, "--ids", ids, "-n", N,
                              "--temperature", "0", "--threads", "1"],
                             check=True, capture_output=True).stdout
        return out.decode()[:-1]  # run ends the text with a newline

history = [{"role": "system", "content": "You are terse."}]
for msg in ["Hello there", "And a second question"]:
    os.write(fd, msg.encode() + b"\n")
    got = reply_of(read_prompt(), msg)
    history.append({"role": "user", "content": msg})
    want = reference(history)
    check("turn %d streams the reply of the whole conversation" % (len(history) // 2),
          got == want and len(got) > 0)
    history.append({"role": "assistant", "content": got})

os.write(fd, b"/exit\n")
_, status = os.waitpid(pid, 0)
check("/exit leaves with status 0", os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0)

p = subprocess.run([loom, "chat", model, "-n", "2", "--threads", "1"],
                   input=b"hi\n", capture_output=True, timeout=60)
check("end of input leaves with status 0, no prompt off a terminal",
      p.returncode == 0 and b"> " not in p.stdout and len(p.stdout) > 1)
print("%s" % ("all passed" if not fails else "%d failed" % fails))
sys.exit(1 if fails else 0)
PY
