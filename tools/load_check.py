#!/usr/bin/env python3
"""Load check for `loom serve`: N concurrent streaming clients, M requests
each, against a server this script starts (or one given by --url).

Reports requests/s, tokens/s, errors (must be 0), and the server's resident
memory after a warm-up round and after the run; fails when errors > 0 or
when RSS grew by more than --rss-bound-mib (default 16 MiB) over the run,
i.e. the steady state must not leak per request.

Usage:
  tools/load_check.py --loom build/loom --model tests/fixtures/models/qwen35-tiny
  tools/load_check.py --url http://127.0.0.1:8888 --clients 16 --requests 50
"""
import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.parse


def rss_bytes(host, port, pid):
    """Server RSS: from /proc when we started it, else from /metrics."""
    if pid:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    c = http.client.HTTPConnection(host, port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    m = re.search(r"^loom_resident_bytes (\d+)", text, re.M)
    return int(m.group(1)) if m else 0


def live_streams(host, port):
    c = http.client.HTTPConnection(host, port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    a = re.search(r"^loom_streams_active (\d+)", text, re.M)
    q = re.search(r"^loom_streams_queued (\d+)", text, re.M)
    return int(a.group(1)) + int(q.group(1))


def stream_once(host, port, body, headers, abandon=False):
    """One streaming request; returns (ok, completion tokens, error text).
    With abandon, the client hangs up after the first event."""
    c = http.client.HTTPConnection(host, port, timeout=120)
    try:
        c.request("POST", "/v1/completions", body=body, headers=headers)
        r = c.getresponse()
        if r.status != 200:
            return False, 0, f"status {r.status}: {r.read()[:200]!r}"
        if abandon:
            first = r.read1(64) if hasattr(r, "read1") else r.read(64)
            c.sock.close()
            return first.startswith(b"data: "), 0, "no first event"
        raw = r.read().decode("utf-8", "replace")
        events = [e for e in raw.split("\n\n") if e]
        if not events or events[-1] != "data: [DONE]":
            return False, 0, "stream did not end with [DONE]"
        usage = None
        for e in events[:-1]:
            chunk = json.loads(e[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
        if not usage:
            return False, 0, "no usage chunk"
        return True, usage["completion_tokens"], ""
    except Exception as e:  # a dropped connection is an error, not a crash
        return False, 0, repr(e)
    finally:
        c.close()


def run_round(host, port, clients, requests, max_tokens, headers,
              abandon_every=0):
    lock = threading.Lock()
    stats = {"ok": 0, "errors": 0, "tokens": 0, "first_error": ""}

    def worker(k):
        for i in range(requests):
            body = json.dumps({
                "prompt": f"client {k} request {i}: In the beginning",
                "max_tokens": max_tokens, "temperature": 0.7, "seed": k * 1000 + i,
                "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}})
            abandon = abandon_every > 0 and (k * requests + i) % abandon_every == 0
            ok, toks, err = stream_once(host, port, body, headers, abandon)
            with lock:
                if ok:
                    stats["ok"] += 1
                    stats["tokens"] += toks
                else:
                    stats["errors"] += 1
                    stats["first_error"] = stats["first_error"] or err

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats["seconds"] = time.monotonic() - t0
    return stats


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loom", help="loom executable (starts a server)")
    ap.add_argument("--model", default="tests/fixtures/models/qwen35-tiny")
    ap.add_argument("--url", help="an already running server instead")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=25)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--api-key", default="")
    ap.add_argument("--rss-bound-mib", type=float, default=16.0)
    ap.add_argument("--abandon-every", type=int, default=0,
                    help="every K-th client hangs up after its first event")
    args = ap.parse_args()

    proc = None
    if args.url:
        u = urllib.parse.urlparse(args.url)
        host, port = u.hostname, u.port or 80
    elif args.loom:
        proc = subprocess.Popen(
            [args.loom, "serve", args.model, "--port", "0", "--parallel",
             str(args.parallel), "--queue", str(max(64, args.clients * 2))],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = proc.stdout.readline()
        m = re.search(r"listening on http://([^:/]+):(\d+)", line)
        if not m:
            proc.kill()
            sys.exit(f"server did not start: {line!r}")
        host, port = m.group(1), int(m.group(2))
    else:
        ap.error("give --loom or --url")
    headers = {"Content-Type": "application/json"}
    if args.api_key:
        headers["Authorization"] = f"Bearer {args.api_key}"
    pid = proc.pid if proc else None

    try:
        rss0 = rss_bytes(host, port, pid)
        warm = run_round(host, port, args.clients, 1, args.max_tokens, headers)
        rss1 = rss_bytes(host, port, pid)
        s = run_round(host, port, args.clients, args.requests, args.max_tokens,
                      headers, args.abandon_every)
        # streams whose clients hung up must be gone shortly after
        active = -1
        for _ in range(100):
            active = live_streams(host, port)
            if active == 0:
                break
            time.sleep(0.1)
        rss2 = rss_bytes(host, port, pid)
    finally:
        if proc:
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=60)
            print(f"server exit status on SIGTERM: {rc}")

    total = args.clients * args.requests
    errors = s["errors"] + warm["errors"]
    growth = (rss2 - rss1) / 2**20
    print(f"clients {args.clients} x requests {args.requests} = {total} streams, "
          f"max_tokens {args.max_tokens}, parallel {args.parallel}")
    print(f"time {s['seconds']:.2f} s: {s['ok'] / s['seconds']:.1f} req/s, "
          f"{s['tokens'] / s['seconds']:.0f} generated tok/s")
    print(f"errors {errors}" + (f" (first: {s['first_error'] or warm['first_error']})"
                                if errors else ""))
    print(f"server RSS: start {rss0 / 2**20:.1f} MiB, after warm-up "
          f"{rss1 / 2**20:.1f} MiB, after run {rss2 / 2**20:.1f} MiB "
          f"(growth {growth:+.1f} MiB, bound {args.rss_bound_mib:.0f} MiB)")
    print(f"streams still active after the run: {active}")
    bad = (errors > 0 or growth > args.rss_bound_mib or active != 0 or
           (proc and rc != 0))
    print("FAIL" if bad else "PASS")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
