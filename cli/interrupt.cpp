// interrupt: the SIGINT handler and its flag (interrupt.hpp).
#include "cli/interrupt.hpp"

#include <atomic>
#include <csignal>
#include <cstring>
#include <ctime>

namespace kvactor::cli {

namespace {

std::atomic<bool> flag{false};
std::atomic<long long> first_at_ns{0};
static_assert(std::atomic<bool>::is_always_lock_free
                && std::atomic<long long>::is_always_lock_free,
              "the SIGINT handler needs lock-free atomics");

long long monotonic_ns() {
  timespec ts; // clock_gettime is async-signal-safe
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

extern "C" void on_sigint(int) {
  auto now = monotonic_ns();
  if (!flag.exchange(true)) {
    first_at_ns.store(now);
    return;
  }
  if (now - first_at_ns.load() >= 2000000000LL) {
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
  }
}

} // namespace

void install_interrupt_handler() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
}

const std::atomic<bool>& interrupt_flag() noexcept {
  return flag;
}

bool interrupted() noexcept {
  return flag.load(std::memory_order_relaxed);
}

} // namespace kvactor::cli
