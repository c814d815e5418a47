#!/bin/sh
# replay_parity_test.sh: REPLAY.md's default trace (trace.py, seed 0) through
# the replayer's pool core and its step message, checked against the figures
# vLLM v1's KV-cache manager reaches on it: 432 preemptions, a prefix hit
# rate of at least 0.357, every request finished - and both modes making
# the same decisions (the core twice, --repeat 2, which checks its runs
# agree). A change to the policy that moves any of these shows here. Skips (exit 77) without python3 or ../shared/bench/trace.py.
# Usage: replay_parity_test.sh PATH/TO/replay PATH/TO/trace.py
set -eu
replay=$1
trace_py=$2
if ! command -v python3 >/dev/null 2>&1 || [ ! -f "$trace_py" ]; then
  echo "python3 or $trace_py missing: skipped"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 "$trace_py" -o "$dir/trace.jsonl" >/dev/null
"$replay" --trace "$dir/trace.jsonl" --mode core --repeat 2 >"$dir/core.json"
"$replay" --trace "$dir/trace.jsonl" --mode step --scheduler-threads 1 >"$dir/step.json"
python3 - "$dir/core.json" "$dir/step.json" <<'EOF'
import json, sys
failures = []
runs = [json.load(open(path)) for path in sys.argv[1:]]
for r in runs:
    mode = r["mode"]
    print(f"{mode}: {r['preemptions']} preemptions, hit rate "
          f"{r['prefix_hit_rate']:.4f}, {r['finished']} finished, {r['steps']} steps, "
          f"{r['usable_blocks']} of {r['num_blocks']} blocks usable")
    if r["preemptions"] != 432:
        failures.append(f"{mode}: {r['preemptions']} preemptions, vLLM's policy gives 432")
    if r["prefix_hit_rate"] < 0.357:
        failures.append(f"{mode}: hit rate {r['prefix_hit_rate']:.4f} < 0.357")
    if r["finished"] != r["requests"]:
        failures.append(f"{mode}: {r['finished']} of {r['requests']} finished")
core, step = runs
if core.get("repeat") != 2 or len(core.get("bookkeeping_ms_runs", [])) != 2:
    failures.append("core --repeat 2: no repeat or bookkeeping_ms_runs in its line")
for key in ("preemptions", "prefix_hit_rate", "finished", "steps",
            "peak_blocks_used", "avg_blocks_used", "block_ops"):
    if core[key] != step[key]:
        failures.append(f"{key}: core {core[key]} but step {step[key]}")
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
EOF
