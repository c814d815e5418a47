#!/bin/sh
# tests/tsan/run.sh: runs kvactor's test binaries under ThreadSanitizer with
# caf_hb_shim preloaded (why: caf_hb_shim.cpp), one process per binary, and
# prints each one's count of reports. Build the binaries first, in a tree
# of their own:
#   cmake -S . -B /tmp/tsan -DCMAKE_BUILD_TYPE=Debug \
#     -DCMAKE_CXX_FLAGS="-O1 -g -fsanitize=thread" \
#     -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread \
#     -DKVACTOR_WITH_CUDA=OFF -DKVACTOR_BUILD_BENCH=OFF
#   cmake --build /tmp/tsan --target facade_tests actor_tests sim_tests remote_tests
# usage: tests/tsan/run.sh BUILD_DIR [binary...]   (default: facade_tests)
# Logs: $TSAN_LOGS (default /tmp/tsan-logs)/<binary>.tsan.<pid> and .out.
# Reports whose stacks are all inside libcaf (its work-stealing queue when
# a test uses CAF's own scheduler, libcaf_io's decoding) are CAF's, not
# kvactor's: look for two accesses in kvactor's code.
set -u
build=${1:?usage: run.sh BUILD_DIR [binary...]}
shift
[ $# -gt 0 ] || set -- facade_tests
here=$(cd "$(dirname "$0")" && pwd)
logs=${TSAN_LOGS:-/tmp/tsan-logs}
mkdir -p "$logs"
shim="$logs/caf_hb_shim.so"
g++ -O1 -g -shared -fPIC -o "$shim" "$here/caf_hb_shim.cpp" -ldl || exit 1
status=0
for b in "$@"; do
  rm -f "$logs/$b".tsan.*
  LD_PRELOAD="$shim" \
  TSAN_OPTIONS="halt_on_error=0 second_deadlock_stack=1 history_size=4 log_path=$logs/$b.tsan" \
    "$build/tests/$b" > "$logs/$b.out" 2>&1
  rc=$?
  n=$(cat "$logs/$b".tsan.* 2>/dev/null | grep -c "WARNING: ThreadSanitizer")
  echo "$b: exit $rc, $n reports (exit 66: reports only; logs in $logs)"
  [ "$rc" -eq 0 ] || [ "$rc" -eq 66 ] || status=1
done
exit $status
