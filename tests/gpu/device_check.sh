#!/bin/sh
# device_check.sh: issue 3's GPU checks in one prepared go, sized for a lent
# H200's time budget (about 10 minutes of commands), logs kept.
#
#   here, after the build:   tests/gpu/device_check.sh bundle
#       packs gpu_tests, gpu_bench, swap_stall and slot_plan_bench with the
#       libraries the GPU machine lacks into .gpu/ (ignored; carry it)
#   on the GPU machine:      tests/gpu/device_check.sh run
#       runs every check under a time limit, logs into $OUT (or ./gpu-logs)
#       and a one-line-per-check summary.txt; exits non-zero if one failed
#
# See ../shared/gpu/README.md for the machine and its ceilings.
set -u
cd "$(dirname "$0")/../.."

case "${1:-}" in
bundle)
  exec ../shared/gpu/bundle.sh build/tests/gpu_tests build/bench/gpu_bench \
    build/bench/swap_stall build/bench/slot_plan_bench
  ;;
run)
  out=${OUT:-gpu-logs}
  mkdir -p "$out"
  status=0
  # check NAME SECONDS COMMAND...: runs it with its log, records the outcome.
  check() {
    name=$1
    secs=$2
    shift 2
    start=$(date +%s)
    timeout "$secs" "$@" >"$out/$name.log" 2>&1
    rc=$?
    echo "$name rc=$rc $(($(date +%s) - start))s" >>"$out/summary.txt"
    [ "$rc" -eq 0 ] || status=1
  }
  : >"$out/summary.txt"
  check nvidia-smi 30 nvidia-smi
  check gpu_tests 240 .gpu/run.sh gpu_tests --log_level=test_suite
  check gpu_bench 240 .gpu/run.sh gpu_bench 15
  check swap_stall 150 .gpu/run.sh swap_stall --storage cuda --scheduler-threads 1
  check slot_plan_bench 30 .gpu/run.sh slot_plan_bench
  cat "$out/summary.txt"
  exit $status
  ;;
*)
  echo "usage: tests/gpu/device_check.sh bundle|run" >&2
  exit 2
  ;;
esac
