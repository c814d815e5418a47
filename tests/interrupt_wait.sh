# interrupt_wait.sh: sourced by the tests of the programs that handle Ctrl-C
# (cli/interrupt.cpp: the simulator, the replay). Needs a fail() of the
# sourcing script.
#
# wait_until NAME PID WHAT CONDITION...: runs CONDITION (a command) every
# 0.1 s until it succeeds; fails, naming WHAT, if PID exits first or 60 s
# pass, and returns 1 then.
wait_until() {
  _name=$1
  _pid=$2
  _what=$3
  shift 3
  _waited=0
  until "$@"; do
    if ! kill -0 "$_pid" 2>/dev/null; then
      fail "$_name: exited before $_what"
      return 1
    fi
    if [ "$_waited" -ge 600 ]; then
      fail "$_name: not $_what within 60 s"
      return 1
    fi
    sleep 0.1
    _waited=$((_waited + 1))
  done
}
#
# interrupt_and_wait NAME PID ERRFILE [TERM]: sends SIGINT (SIGTERM) to PID
# (a background job of the caller), waits for it to exit (20 s at most,
# then kills it) and checks that it exited 130 (143), quoting ERRFILE
# otherwise.
interrupt_and_wait() {
  _sig=${4:-INT}
  _want=130
  [ "$_sig" = TERM ] && _want=143
  kill -"$_sig" "$2" 2>/dev/null
  _waited=0
  while kill -0 "$2" 2>/dev/null && [ "$_waited" -lt 200 ]; do
    sleep 0.1
    _waited=$((_waited + 1))
  done
  if kill -0 "$2" 2>/dev/null; then
    kill -KILL "$2"
    fail "$1: still running 20 s after SIG$_sig"
  fi
  wait "$2"
  _rc=$?
  [ "$_rc" -eq "$_want" ] || fail "$1: exit $_rc, expected $_want ($(head -c 300 "$3"))"
}
