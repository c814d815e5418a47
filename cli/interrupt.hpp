// interrupt: Ctrl-C (SIGINT), and SIGTERM (kill, timeout, a container
// stopping), for the command-line programs (the simulator, the replay
// benchmark). The first signal sets a flag their run loops check: the run
// stops at its next step and writes or prints what ran, marked
// interrupted. Another one two seconds or more later kills at once (one
// sooner is the same request again: `timeout -s INT` signals the process
// and its process group).
#pragma once

#include <atomic>

namespace kvactor::cli {

/// Installs the SIGINT and SIGTERM handler (async-signal-safe: lock-free
/// atomics and clock_gettime; signal and raise for the second one).
void install_interrupt_handler();

/// The flag the first signal sets (for loops that take it by reference).
const std::atomic<bool>& interrupt_flag() noexcept;

/// Whether a signal came since install_interrupt_handler().
bool interrupted() noexcept;

/// The exit status of a run the first signal stopped: 128 + its number,
/// as a shell reports a process that signal killed (130 for SIGINT, 143
/// for SIGTERM).
int interrupted_exit_status() noexcept;

} // namespace kvactor::cli
