# interrupt_wait.sh: sourced by the tests of the programs that handle Ctrl-C
# (cli/interrupt.cpp: the simulator, the replay). Needs a fail() of the
# sourcing script.
#
# interrupt_and_wait NAME PID ERRFILE: sends SIGINT to PID (a background job
# of the caller), waits for it to exit (20 s at most, then kills it) and
# checks that it exited 130, quoting ERRFILE otherwise.
interrupt_and_wait() {
  kill -INT "$2" 2>/dev/null
  _waited=0
  while kill -0 "$2" 2>/dev/null && [ "$_waited" -lt 200 ]; do
    sleep 0.1
    _waited=$((_waited + 1))
  done
  if kill -0 "$2" 2>/dev/null; then
    kill -KILL "$2"
    fail "$1: still running 20 s after SIGINT"
  fi
  wait "$2"
  _rc=$?
  [ "$_rc" -eq 130 ] || fail "$1: exit $_rc, expected 130 ($(head -c 300 "$3"))"
}
