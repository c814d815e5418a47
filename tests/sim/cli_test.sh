#!/bin/sh
# cli_test.sh: multi_tenant_sim's command line as a user meets it - --help
# exits 0; bad arguments, a missing or malformed --config, a request that
# can never fit, a negative prefill_chunk, a host tier too large to book
# exit 2 (the scenario errors
# naming FILE:LINE: FIELD on stderr, and no output directory left behind);
# --steps 50 --out DIR writes the reports, the shipped chunked scenario
# prefills in chunks and reads back what it wrote, the chat scenario runs
# its sessions and shows their follow-ups' hit rate; SIGINT (SIGTERM) stops a long run, which exits 130
# (143) and still writes report.json marked interrupted.
# Usage: cli_test.sh PATH/TO/multi_tenant_sim
set -u
sim=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
. "$(dirname "$0")/../interrupt_wait.sh"

# expect_exit CODE NAME ARGS...: runs the simulator, stdout and stderr to
# $dir/NAME.out and $dir/NAME.err, and checks its exit status.
expect_exit() {
  want=$1
  name=$2
  shift 2
  "$sim" "$@" >"$dir/$name.out" 2>"$dir/$name.err"
  rc=$?
  [ "$rc" -eq "$want" ] || fail "$name: exit $rc, expected $want ($(head -c 300 "$dir/$name.err"))"
}

# expect_in FILE TEXT: FILE contains TEXT (fixed string).
expect_in() {
  grep -qF -- "$2" "$1" || fail "$(basename "$1"): no '$2' in: $(head -c 300 "$1")"
}

expect_exit 0 help --help
expect_in "$dir/help.out" "usage: multi_tenant_sim"
expect_in "$dir/help.out" "--no-progress"

expect_exit 2 unknown --bogus
expect_in "$dir/unknown.err" "unknown argument --bogus"
expect_in "$dir/unknown.err" "usage:"
expect_exit 2 steps0 --steps 0
expect_in "$dir/steps0.err" "--steps"
expect_exit 2 storage --storage floppy
expect_in "$dir/storage.err" "--storage"
expect_exit 2 noconfig --config "$dir/absent.json"
expect_in "$dir/noconfig.err" "$dir/absent.json: cannot open"
# An option is no file name: --config lacks its file here.
expect_exit 2 config_option --config --no-progress
expect_in "$dir/config_option.err" "--config needs a file"

# A malformed file: the comma missing at the end of line 2, found on line 3.
printf '{\n  "steps": 10\n  "seed": 1\n}\n' >"$dir/bad.json"
expect_exit 2 malformed --config "$dir/bad.json"
expect_in "$dir/malformed.err" "$dir/bad.json:3: malformed JSON after steps"

# A valid file but for one field: the default with a negative rate.
expect_exit 0 default --print-default
# Nowhere to write it: a failure, not an empty file and exit 0.
if [ -w /dev/full ]; then
  "$sim" --print-default >/dev/full 2>"$dir/full.err"
  rc=$?
  [ "$rc" -eq 1 ] || fail "print-default to /dev/full: exit $rc, expected 1"
  expect_in "$dir/full.err" "the default scenario could not be written"
fi
sed 's/"rate": 0.8,/"rate": -1,/' "$dir/default.out" >"$dir/neg.json"
line=$(grep -n '"rate": -1,' "$dir/neg.json" | cut -d: -f1)
[ -n "$line" ] || fail "no interactive rate in the default scenario"
expect_exit 2 negative --config "$dir/neg.json"
expect_in "$dir/negative.err" "$dir/neg.json:$line: workloads.interactive.rate: must be >= 0 (got -1)"

# A request that can never be admitted beside the admission watermark (32 of
# 64 blocks kept free; 600 + 8 tokens need 38 blocks of 16) is a scenario
# error naming its workload, not a stall found 1000 steps into the run.
cat >"$dir/watermark.json" <<'JSON'
{
  "cache": {"block_size": 16, "storage": "none", "num_gpu_blocks": 64,
            "model": {"num_layers": 1, "num_kv_heads": 1, "head_dim": 8},
            "admission": {"watermark": 0.5},
            "tenants": [{"name": "a"}]},
  "steps": 10,
  "workloads": {
    "a": {"rate": 1, "prompt_len": 600, "output_len": 8}
  }
}
JSON
expect_exit 2 watermark --config "$dir/watermark.json" --no-progress --out "$dir/wm"
line=$(grep -n '"a": {' "$dir/watermark.json" | cut -d: -f1)
expect_in "$dir/watermark.err" "$dir/watermark.json:$line: workloads.a: its longest request (608 tokens, 38 blocks of 16) cannot fit the pool (64 blocks, 0 reserved for other tenants, 32 kept free for admissions by cache.admission.watermark 0.5)"
if grep -q "ran " "$dir/watermark.out"; then fail "watermark: simulated before failing"; fi
[ ! -e "$dir/wm" ] || fail "watermark: left $dir/wm behind"

# A scenario only the starting cache finds wrong - storage auto without a
# block count, on a machine without a GPU - names the field's line too, and
# leaves no output directory behind. (With a GPU it runs: nothing to check.)
sed -e 's/"storage": "host"/"storage": "auto"/' \
  -e 's/"num_gpu_blocks": 4096/"num_gpu_blocks": 0/' "$dir/default.out" >"$dir/auto0.json"
"$sim" --config "$dir/auto0.json" --steps 5 --out "$dir/made/auto0" --no-progress \
  >"$dir/auto0.out" 2>"$dir/auto0.err"
rc=$?
if [ "$rc" -ne 0 ]; then
  [ "$rc" -eq 2 ] || fail "auto0: exit $rc, expected 2 ($(head -c 300 "$dir/auto0.err"))"
  line=$(grep -n '"num_gpu_blocks": 0' "$dir/auto0.json" | cut -d: -f1)
  expect_in "$dir/auto0.err" "$dir/auto0.json:$line: cache.num_gpu_blocks: "
  [ ! -e "$dir/made" ] || fail "auto0: left $dir/made behind"
fi

# prefill_chunk is checked like the other keys: file, line, field.
sed 's/"max_running": 256,/"max_running": 256, "prefill_chunk": -1,/' \
  "$dir/default.out" >"$dir/chunk_neg.json"
line=$(grep -n '"prefill_chunk": -1' "$dir/chunk_neg.json" | cut -d: -f1)
[ -n "$line" ] || fail "no max_running in the default scenario"
expect_exit 2 chunk_neg --config "$dir/chunk_neg.json" --no-progress
expect_in "$dir/chunk_neg.err" "$dir/chunk_neg.json:$line: prefill_chunk: expected a non-negative integer (got -1)"

# The shipped chunked scenario runs, prefills in chunks, and reads back
# what it wrote (host storage).
scenarios="$(dirname "$0")/../../examples/scenarios"
expect_exit 0 chunked --config "$scenarios/chunked.json" --steps 60 \
  --out "$dir/chunked" --no-progress
expect_in "$dir/chunked.out" "chunked prefill: 256 tokens past the cached prefix"
expect_in "$dir/chunked.out" " 0 mismatched"
expect_in "$dir/chunked/report.json" '"prefill_chunk": 256'

# The shipped speculative scenario runs, drafts, and reads back what it
# wrote, drafts and the tokens written over rejected ones included.
expect_exit 0 speculative --config "$scenarios/speculative.json" --steps 60 \
  --out "$dir/speculative" --no-progress
expect_in "$dir/speculative.out" "speculative decoding: 4 drafts per decode step"
expect_in "$dir/speculative.out" " 0 mismatched"
expect_in "$dir/speculative/report.json" '"draft_tokens": 4'

# The shipped chat scenario runs its sessions to their last turn (during
# the drain), prints the follow-ups' hit rate apart, and reads back what
# it wrote; a bad conversation key names its file, line and field.
expect_exit 0 chat --config "$scenarios/chat.json" --steps 200 \
  --out "$dir/chat" --no-progress
expect_in "$dir/chat.out" "open sessions' turns still arriving"
expect_in "$dir/chat.out" "prefix hit rate at first admission: first turns "
expect_in "$dir/chat.out" " 0 mismatched"
expect_in "$dir/chat/report.json" '"follow_up_hit_rate": '
sed 's/"turns": \[1, 6\]/"turns": [0, 6]/' "$scenarios/chat.json" >"$dir/turns0.json"
line=$(grep -n '"turns": \[0, 6\]' "$dir/turns0.json" | cut -d: -f1)
[ -n "$line" ] || fail "no turns in chat.json"
expect_exit 2 turns0 --config "$dir/turns0.json" --no-progress
expect_in "$dir/turns0.err" "$dir/turns0.json:$line: workloads.chat.conversation.turns: min must be >= 1 (got 0)"

# A short run writes its reports.
expect_exit 0 short --steps 50 --out "$dir/short" --no-progress
for f in report.json timeseries.csv usage.gp; do
  [ -s "$dir/short/$f" ] || fail "short: no $f"
done
expect_in "$dir/short/report.json" '"completed": true'
rows=$(($(wc -l <"$dir/short/timeseries.csv") - 1))
[ "$rows" -ge 50 ] || fail "short: $rows rows in timeseries.csv, expected >= 50"

# A config path that is not UTF-8 (a Latin-1 file name) still gets its
# report.json, the bad byte replaced.
latin=$(printf 'lat\351n.json')
cp "$dir/default.out" "$dir/$latin"
expect_exit 0 latin --config "$dir/$latin" --steps 20 --storage none \
  --out "$dir/latin" --no-progress
[ -s "$dir/latin/report.json" ] || fail "latin: no report.json"

# An output directory that cannot be made stops the run before it starts.
expect_exit 2 badout --steps 50 --out "$dir/short/report.json/x" --no-progress
expect_in "$dir/badout.err" "--out: $dir/short/report.json/x: cannot create"
# The same from a scenario names its file and line.
sed "s|\"output_dir\": \"sim-out\"|\"output_dir\": \"$dir/short/report.json/x\"|" \
  "$dir/default.out" >"$dir/badout.json"
line=$(grep -n '"output_dir"' "$dir/badout.json" | cut -d: -f1)
expect_exit 2 badout_scenario --config "$dir/badout.json" --steps 50 --no-progress
expect_in "$dir/badout_scenario.err" "$dir/badout.json:$line: output_dir: $dir/short/report.json/x: cannot create"
if grep -q "ran " "$dir/badout.out"; then fail "badout: simulated before failing"; fi

# A host tier whose bookkeeping this host cannot hold (2^31 - 1 blocks,
# some 150 GB, under a 4 GiB address-space limit) is named at its own line,
# not at num_gpu_blocks'.
sed -e 's/"storage": "host",/"storage": "none",\
    "num_host_blocks": 2147483647,/' "$dir/default.out" >"$dir/hosttier.json"
line=$(grep -n '"num_host_blocks"' "$dir/hosttier.json" | cut -d: -f1)
(ulimit -v 4194304 && exec "$sim" --config "$dir/hosttier.json" --steps 5 \
  --out "$dir/hosttier" --no-progress) >"$dir/hosttier.out" 2>"$dir/hosttier.err"
rc=$?
[ "$rc" -eq 2 ] || fail "hosttier: exit $rc, expected 2 ($(head -c 300 "$dir/hosttier.err"))"
expect_in "$dir/hosttier.err" "$dir/hosttier.json:$line: cache.num_host_blocks: no host memory for the block pool's bookkeeping of 4096 device and 2147483647 host blocks"

# SIGINT (or SIGTERM) during a long run: it stops at the next step,
# reports, exits 130 (143). The signal goes once the first step is logged
# (stderr is no terminal, so progress prints lines): sent earlier, before
# the handler is installed, it would kill the process outright - a fixed
# sleep did on a loaded machine.
interrupt_run() { # NAME SIGNAL
  "$sim" --steps 100000000 --storage none --out "$dir/$1" \
    >"$dir/$1.out" 2>"$dir/$1.err" &
  pid=$!
  wait_until "$1" "$pid" "its first step" \
    grep -q "^progress: started:" "$dir/$1.err"
  interrupt_and_wait "$1" "$pid" "$dir/$1.err" "$2"
  [ -s "$dir/$1/report.json" ] || fail "$1: no report.json"
  expect_in "$dir/$1/report.json" '"interrupted": true'
  expect_in "$dir/$1/report.json" '"completed": false'
  expect_in "$dir/$1.out" "INTERRUPTED"
  rows=$(($(wc -l <"$dir/$1/timeseries.csv") - 1))
  [ "$rows" -gt 0 ] || fail "$1: no step ran before the interrupt"
}
interrupt_run int INT
interrupt_run term TERM

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all command-line checks passed"
