#!/bin/sh
# replay_sigint_test.sh: Ctrl-C stops `replay` and still prints the line of
# the mode that ran, marked "interrupted": true, for the steps it ran; no
# further mode or repetition runs and the exit status is 130. The trace
# (written here, no python needed) is one request decoding 3,000,000
# tokens: seconds of steps in every mode. SIGINT is sent once the handler
# is installed (the process catches signal 2, per /proc/PID/status), never
# before: sent earlier it would kill the process outright, or be ignored
# (a background job of a script ignores SIGINT until it installs a
# handler). Skipped (exit 77) without /proc.
# Usage: replay_sigint_test.sh PATH/TO/replay
set -u
replay=$1
if [ ! -r /proc/self/status ]; then
  echo "no /proc/PID/status to see the handler installed: skipped"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
. "$(dirname "$0")/../interrupt_wait.sh"

n=3000000
awk -v n="$n" 'BEGIN {
  printf "{\"type\":\"header\",\"block_size\":1024,\"num_blocks\":4096,\"max_model_len\":%d}\n", n + 1
  printf "{\"type\":\"req\",\"id\":0,\"arrival_step\":0,\"sys_prompt\":-1,\"prompt_len\":1,\"output_len\":%d,\"prompt\":[1],\"output\":[", n
  for (i = 0; i < n; i++) printf "%s%d", (i ? "," : ""), i % 1000
  printf "]}\n"
}' >"$dir/trace.jsonl"

# catches_sigint PID: whether PID catches SIGINT (bit 1 of SigCgt).
catches_sigint() {
  mask=$(sed -n 's/^SigCgt:[[:space:]]*//p' "/proc/$1/status" 2>/dev/null)
  [ -n "$mask" ] && [ $((0x$mask & 2)) -ne 0 ]
}

# run NAME ARGS...: starts replay on the trace, sends SIGINT once its
# handler is installed and some steps ran, and waits (20 s at most).
run() {
  name=$1
  shift
  "$replay" --trace "$dir/trace.jsonl" "$@" >"$dir/$name.json" 2>"$dir/$name.err" &
  pid=$!
  wait_until "$name" "$pid" "its SIGINT handler was installed" catches_sigint "$pid" \
    || head -c 300 "$dir/$name.err"
  sleep 0.5
  interrupt_and_wait "$name" "$pid" "$dir/$name.err"
}

# check NAME MODE TEXT...: NAME printed one line, of MODE, interrupted, for
# fewer steps than the trace has, and holding each TEXT.
check() {
  name=$1
  mode=$2
  shift 2
  lines=$(wc -l <"$dir/$name.json")
  if [ "$lines" -ne 1 ]; then
    fail "$name: $lines JSON lines, expected 1 (no further mode runs)"
    return
  fi
  line=$(head -n 1 "$dir/$name.json")
  for want in "\"mode\":\"$mode\"" '"interrupted":true' '"finished":0' '"requests":1' "$@"; do
    case "$line" in
      *"$want"*) ;;
      *) fail "$name: no $want in: $(printf '%s' "$line" | head -c 300)" ;;
    esac
  done
  steps=$(printf '%s' "$line" | sed -n 's/.*"steps":\([0-9]*\).*/\1/p')
  [ -n "$steps" ] && [ "$steps" -lt "$n" ] || fail "$name: steps '$steps', expected fewer than $n"
  echo "$name: interrupted after $steps of $n steps"
}

# The actor scheduler (step mode; facade, second in "both", must not run),
# the facade's loop, and the core's with --repeat (no further repetition).
run both --mode both --scheduler-threads 1
check both step
run facade --mode facade --scheduler-threads 1
check facade facade
run core --mode core --repeat 3
check core core '"repeat":3'

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all SIGINT checks passed"
