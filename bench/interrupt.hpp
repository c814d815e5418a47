// interrupt: Ctrl-C for the replay benchmark. The first SIGINT sets a flag
// the run loops check: the run stops at its next step and its figures are
// still printed, marked interrupted. Another one two seconds or more later
// kills at once (one sooner is the same request again: `timeout -s INT`
// signals the process and its process group).
#pragma once

namespace kvactor::bench {

/// Installs the SIGINT handler (async-signal-safe: lock-free atomics and
/// clock_gettime; signal and raise for the second one).
void install_interrupt_handler();

/// Whether a SIGINT came since install_interrupt_handler().
bool interrupted() noexcept;

} // namespace kvactor::bench
