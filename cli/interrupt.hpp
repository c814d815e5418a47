// interrupt: Ctrl-C for the command-line programs (the simulator, the
// replay benchmark). The first SIGINT sets a flag their run loops check:
// the run stops at its next step and writes or prints what ran, marked
// interrupted. Another one two seconds or more later kills at once (one
// sooner is the same request again: `timeout -s INT` signals the process
// and its process group).
#pragma once

#include <atomic>

namespace kvactor::cli {

/// Installs the SIGINT handler (async-signal-safe: lock-free atomics and
/// clock_gettime; signal and raise for the second one).
void install_interrupt_handler();

/// The flag the first SIGINT sets (for loops that take it by reference).
const std::atomic<bool>& interrupt_flag() noexcept;

/// Whether a SIGINT came since install_interrupt_handler().
bool interrupted() noexcept;

} // namespace kvactor::cli
