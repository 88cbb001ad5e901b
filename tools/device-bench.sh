#!/usr/bin/env bash
# device-bench.sh STAGE [PARTS...]: runs on the GPU machine, from the
# repository root there, with a build staged by tools/device-stage.sh in
# STAGE (e.g. .stage/main); writes few files under $OUT (a device call
# returns only so many): all.txt (the log), cpu.jsonl and gpu.jsonl (one
# tag line, then loom bench's lines). PARTS, in the order given, any of:
#   cpu    membw at 1 / 4 / 16 threads; 0.8B decode at 1 / 4 / 16 threads and
#          prefill of 128 / 2,048 at 16; Nemotron-H 13 layers; the KJV model
#   tests  every tests/gpu suite staged (their summaries into all.txt)
#   gpu    one stream of 2B and 9B BF16 with tools/cublas_graph_bench.py
#          beside each (and again split by --time-device), a 16-row prompt
#          on the one-stream engine (PREV alternated), and a 16-row window
#          on the tensor-core engine, and 9B affine-4 at one stream
#   quick  one stream of 2B and 9B (PREV alternated, --time-device) and 8
#          streams: two builds compared in a short call
#   ncu    per-kernel times and DRAM bytes of a 16-row prompt and one-row
#          steps on 9B (tools/ncu_forwards.py; NCU_GEOS, NCU_ARGS: others)
# Without PARTS: cpu tests gpu. Set PREV to a second staged loom to run the
# CPU prefill of each size, the GPU's one-stream decode and its 16-row
# prompts with both, alternated.
set -u
stage=${1:?usage: device-bench.sh STAGE [cpu|tests|gpu|quick|ncu]...}
shift
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(cpu tests gpu)
. "$stage/setup.sh"
L=$stage/loom
A=$OUT/all.txt
log() { echo "== $(date +%T) $*" >>"$A"; }
cb() {
  local tag=$1 bin=$2
  shift 2
  echo "{\"tag\": \"$tag\"}" >>"$OUT/cpu.jsonl"
  "$bin" bench "$@" --device cpu 2>>"$A" | tail -n 1 >>"$OUT/cpu.jsonl"
}
gb() {
  local tag=$1
  shift
  echo "{\"tag\": \"$tag\"}" >>"$OUT/gpu.jsonl"
  "$L" bench "$@" --device cuda 2>>"$A" | grep '"streams"' >>"$OUT/gpu.jsonl"
}
# gb with this build, then (PREV set) the same run with PREV's, tagged _prev
gb2() {
  local tag=$1
  shift
  gb "$tag" "$@"
  if [ -n "${PREV:-}" ]; then L=$PREV gb "${tag}_prev" "$@"; fi
}
{ nvidia-smi -L; lscpu | grep -E "Model name|Core|Socket|NUMA node\(s\)"; } >>"$A" 2>&1
for part in "${parts[@]}"; do
  log "$part"
  case $part in
  cpu)
    if cc -O2 -pthread tools/membw.c -o /tmp/membw 2>>"$A"; then
      for T in 1 4 16; do echo "membw $T: $(/tmp/membw 2048 $T 2>&1 | tail -1)" >>"$A"; done
    else
      echo "membw: no C compiler here, not measured" >>"$A"
    fi
    python3 tools/make_qwen35_bench.py /tmp/c08 --geometry 0.8b >/dev/null
    python3 tools/make_nemotron_bench.py /tmp/nem --layers 13 >/dev/null
    for _ in 1 2; do
      for T in 1 4 16; do
        cb "dec08_t$T" "$L" /tmp/c08 --streams 1 --prompt 8 --gen 24 --threads $T
      done
    done
    for P in 128 2048; do
      for _ in 1 2; do
        cb "pre08_$P" "$L" /tmp/c08 --streams 1 --prompt $P --gen 2 --threads 16
        [ -n "${PREV:-}" ] && cb "pre08_${P}_prev" "$PREV" /tmp/c08 --streams 1 --prompt $P --gen 2 --threads 16
      done
    done
    for T in 1 4 16; do
      cb "decnem_t$T" "$L" /tmp/nem --streams 1 --prompt 8 --gen 16 --threads $T
    done
    for P in 128 512; do
      cb "prenem_$P" "$L" /tmp/nem --streams 1 --prompt $P --gen 2 --threads 16
      [ -n "${PREV:-}" ] && cb "prenem_${P}_prev" "$PREV" /tmp/nem --streams 1 --prompt $P --gen 2 --threads 16
    done
    for T in 1 16; do
      cb "kjv_t$T" "$L" models/kjv-qwen35 --streams 1 --prompt 128 --gen 128 --threads $T
    done
    rm -rf /tmp/c08 /tmp/nem
    ;;
  tests)
    for t in "$stage"/gpu_test_*; do
      n=$(basename "$t")
      timeout 300 "$t" >"/tmp/$n.log" 2>&1
      echo "$n rc $?: $(grep -E 'Checks|skipped' "/tmp/$n.log" | tail -1)" >>"$A"
    done
    ;;
  gpu)
    for geo in 2b 9b; do
      python3 tools/make_qwen35_bench.py /tmp/b --geometry $geo >/dev/null
      gb2 "$geo" /tmp/b --streams 1,1 --prompt 8 --gen 128
      gb "${geo}_timed" /tmp/b --streams 1,1 --prompt 8 --gen 128 --time-device
      python3 tools/cublas_graph_bench.py --geometry $geo 2>&1 | tail -2 >>"$A"
      # a 16-row prompt on the one-stream engine (its time to first token)
      for _ in 1 2; do
        gb2 "${geo}_p16" /tmp/b --streams 1,1,1 --prompt 16 --gen 2
      done
      gb "${geo}_window" /tmp/b --streams 1,1,8 --prompt 16 --gen 4
      rm -rf /tmp/b
    done
    # 9B affine-4, one stream (its ratio to the BF16 figure above)
    timeout 200 python3 tools/make_qwen35_bench.py /tmp/b --geometry 9b --affine4 >/dev/null &&
      gb 9b_q4 /tmp/b --streams 1,1 --prompt 8 --gen 128
    rm -rf /tmp/b
    ;;
  quick)
    # one stream of 2B and 9B BF16 only (QUICK_GEOS: fewer), with PREV
    # alternated, and split by --time-device: a short call's comparison of
    # two builds
    for geo in ${QUICK_GEOS:-2b 9b}; do
      python3 tools/make_qwen35_bench.py /tmp/b --geometry $geo >/dev/null
      for _ in 1 2; do
        gb2 "$geo" /tmp/b --streams 1,1 --prompt 8 --gen 128
      done
      gb2 "${geo}_timed" /tmp/b --streams 1,1 --prompt 8 --gen 128 --time-device
      gb2 "${geo}_8" /tmp/b --streams 8 --prompt 8 --gen 64
      rm -rf /tmp/b
    done
    ;;
  ncu)
    # NCU_GEOS (default 9b) and NCU_ARGS (default a 16-row prompt, then
    # one-row steps) pick what is profiled
    for geo in ${NCU_GEOS:-9b}; do
      python3 tools/make_qwen35_bench.py /tmp/b --geometry "$geo" >/dev/null
      nargs=${NCU_ARGS:---streams 1,1,1 --prompt 16 --gen 2}
      log "ncu $geo $nargs"
      # shellcheck disable=SC2086
      timeout 200 ncu --clock-control none \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum \
        --csv --print-units base "$L" bench /tmp/b --device cuda \
        $nargs >/tmp/ncu.csv 2>>"$A"
      python3 tools/ncu_forwards.py /tmp/ncu.csv >>"$A" 2>&1
      rm -rf /tmp/b
    done
    ;;
  *) echo "unknown part $part" >>"$A" ;;
  esac
done
log "done"
