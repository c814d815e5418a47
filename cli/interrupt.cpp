// interrupt: the SIGINT / SIGTERM handler and its flag (interrupt.hpp).
#include "cli/interrupt.hpp"

#include <atomic>
#include <csignal>
#include <cstring>
#include <ctime>

namespace kvactor::cli {

namespace {

std::atomic<bool> flag{false};
std::atomic<int> first_signal{0};
std::atomic<long long> first_at_ns{0};
static_assert(std::atomic<bool>::is_always_lock_free
                && std::atomic<int>::is_always_lock_free
                && std::atomic<long long>::is_always_lock_free,
              "the signal handler needs lock-free atomics");

long long monotonic_ns() {
  timespec ts; // clock_gettime is async-signal-safe
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

extern "C" void on_signal(int sig) {
  auto now = monotonic_ns(); // > 0: the monotonic clock counts from boot
  // The first signal claims its time first: one that comes on another
  // thread a moment later then finds a time to measure from (claimed
  // after, it read 0 and killed the process at once). The signal before
  // the flag: who sees the flag reads the signal.
  long long unset = 0;
  if (first_at_ns.compare_exchange_strong(unset, now)) {
    first_signal.store(sig);
    flag.store(true);
    return;
  }
  if (now - first_at_ns.load() >= 2000000000LL) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

} // namespace

void install_interrupt_handler() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  // Neither signal interrupts the handler on its own thread.
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGINT);
  sigaddset(&sa.sa_mask, SIGTERM);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int interrupted_exit_status() noexcept {
  auto sig = first_signal.load();
  return 128 + (sig != 0 ? sig : SIGINT);
}

const std::atomic<bool>& interrupt_flag() noexcept {
  return flag;
}

bool interrupted() noexcept {
  return flag.load(std::memory_order_relaxed);
}

} // namespace kvactor::cli
