#!/bin/sh
# replay_errors_test.sh: replay's bad input as a user meets it. A trace the
# reader refuses exits 1 with FILE:LINE: FIELD, as does one with no
# request; a pool whose bookkeeping the host cannot hold (2^31 - 1 blocks,
# some 150 GB, under a 4 GiB address-space limit here) is refused naming
# the count in every mode - core mode included, which said only
# "std::bad_alloc". A request larger than a --num-blocks pool names the
# flag (the message named only the trace's line), and a stdout that takes
# no line (/dev/full) fails the run (it exited 0).
# Usage: replay_errors_test.sh PATH/TO/replay
set -u
replay=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

req='{"type":"req","id":0,"arrival_step":0,"sys_prompt":-1,"prompt_len":1,"output_len":1,"prompt":[1],"output":[2]}'

printf '{"type":"header","block_size":16,"num_blocks":-8,"max_model_len":16}\n%s\n' \
  "$req" >"$dir/bad.jsonl"
"$replay" --trace "$dir/bad.jsonl" >"$dir/bad.out" 2>"$dir/bad.err"
rc=$?
[ "$rc" -eq 1 ] || fail "bad header: exit $rc, expected 1"
grep -qF "$dir/bad.jsonl:1: num_blocks: expected a non-negative integer (got -8)" \
  "$dir/bad.err" || fail "bad header: $(cat "$dir/bad.err")"

# A header and no request: nothing to measure (it printed zeros, exit 0).
printf '\n{"type":"header","block_size":16,"num_blocks":8,"max_model_len":16,"num_requests":0}\n' \
  >"$dir/empty.jsonl"
"$replay" --trace "$dir/empty.jsonl" >"$dir/empty.out" 2>"$dir/empty.err"
rc=$?
[ "$rc" -eq 1 ] || fail "no requests: exit $rc, expected 1"
grep -qF "$dir/empty.jsonl:2: no requests after the header: nothing to replay" \
  "$dir/empty.err" || fail "no requests: $(cat "$dir/empty.err")"

printf '{"type":"header","block_size":1024,"num_blocks":2147483647,"max_model_len":16}\n%s\n' \
  "$req" >"$dir/huge.jsonl"
for mode in core step facade; do
  (ulimit -v 4194304 && exec "$replay" --trace "$dir/huge.jsonl" --mode "$mode") \
    >"$dir/$mode.out" 2>"$dir/$mode.err"
  rc=$?
  [ "$rc" -eq 1 ] || fail "$mode: exit $rc, expected 1 ($(head -c 300 "$dir/$mode.err"))"
  grep -qF "num_gpu_blocks: no host memory for the block pool's bookkeeping of 2147483646 device and 0 host blocks" \
    "$dir/$mode.err" || fail "$mode: $(head -c 300 "$dir/$mode.err")"
done

# Two tokens of one-token blocks, in --num-blocks 2 less the null block.
req2='{"type":"req","id":0,"arrival_step":0,"sys_prompt":-1,"prompt_len":1,"output_len":2,"prompt":[1],"output":[2,2]}'
printf '{"type":"header","block_size":1,"num_blocks":8,"max_model_len":16}\n%s\n' \
  "$req2" >"$dir/ok.jsonl"
"$replay" --trace "$dir/ok.jsonl" --mode core --num-blocks 2 \
  >"$dir/small.out" 2>"$dir/small.err"
rc=$?
[ "$rc" -eq 1 ] || fail "small --num-blocks: exit $rc, expected 1"
grep -qF "request 0 needs 2 blocks of 1 tokens, more than the pool's 1) (the pool's size from --num-blocks, less vLLM's null block)" \
  "$dir/small.err" || fail "small --num-blocks: $(cat "$dir/small.err")"

if [ -w /dev/full ]; then
  for mode in core step facade; do
    "$replay" --trace "$dir/ok.jsonl" --mode "$mode" >/dev/full 2>"$dir/full.err"
    rc=$?
    [ "$rc" -eq 1 ] || fail "$mode >/dev/full: exit $rc, expected 1"
    grep -qF "replay: cannot write to stdout" "$dir/full.err" \
      || fail "$mode >/dev/full: $(cat "$dir/full.err")"
  done
fi

[ "$failures" -eq 0 ] && echo "replay_errors_test: all passed"
[ "$failures" -eq 0 ]
