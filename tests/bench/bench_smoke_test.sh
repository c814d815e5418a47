#!/bin/sh
# bench_smoke_test.sh: every CPU benchmark the README's table names runs at
# a tiny size, exits 0 and prints its figures. scale aborted at once for
# several sessions (its client actors ended, and with them the requests
# they owned) and nothing ran it; a figure nobody can reproduce is no
# figure. Sizes only: the timings themselves are the benchmarks' business.
# Usage: bench_smoke_test.sh DIR (where the bench binaries are)
set -u
dir=$1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
failures=0

# run NAME MIN_LINES ARGS...: exit 0 and at least MIN_LINES lines out.
run() {
  name=$1
  min=$2
  shift 2
  if [ ! -x "$dir/$name" ]; then
    echo "FAIL: $name: no binary at $dir/$name"
    failures=$((failures + 1))
    return
  fi
  timeout 120 "$dir/$name" "$@" >"$out" 2>&1
  rc=$?
  lines=$(wc -l <"$out")
  if [ "$rc" -ne 0 ] || [ "$lines" -lt "$min" ]; then
    echo "FAIL: $name $*: exit $rc, $lines lines (at least $min expected):"
    tail -5 "$out"
    failures=$((failures + 1))
  else
    echo "ok: $name $*"
  fi
}

run critical_steady 1 --requests 20 --extends 2
grep -q '"pressure":"low"' "$out" || {
  echo "FAIL: critical_steady: no low-pressure run"
  failures=$((failures + 1))
}
run scale 2 --sizes 100,200 --blocks 10000 --ops 2000 --rounds 2 --scheduler-threads 1
grep -q '"failed_operations":0' "$out" || {
  echo "FAIL: scale: failed operations"
  failures=$((failures + 1))
}
run facade_latency 1 --requests 50 --extends 20 --tables 1
grep -q '"table":' "$out" || {
  echo "FAIL: facade_latency: no table reads"
  failures=$((failures + 1))
}
run step_floor 1 --steps 1000
run swap_stall 1 --storage host --swap-mib 4 --requests 8 --extends 50 --rounds 2
run retention 2 --steps 200
run view_snapshot 1 --tokens 256 --max-len 1024 --views 4
run writer_race 1 0 threads=2 requests=50 blocks=256
run lineage_cost 3 --chain 4 --steps 16 --requests 16 --discards 1
run slot_plan_bench 1 --blocks 1024 --tokens 256 --runs 10
run gc_stall 5 --requests 200 --blocks 2000 --seconds 1 --gc-interval-ms 100
grep -q '"phase":"explicit_gc"' "$out" || {
  echo "FAIL: gc_stall: no explicit gc() line"
  failures=$((failures + 1))
}

[ "$failures" -eq 0 ] || exit 1
echo "all benchmarks ran"
