// progress: the simulator's progress on stderr - a bar redrawn in place when
// stderr is a terminal, else a line after the first step and every 10%
// (logs stay readable, and show early that the run is under way).
// Called from one thread at a time.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include <unistd.h>

namespace kvactor::sim {

struct progress_state {
  std::uint64_t step = 0;
  std::uint64_t steps = 0; ///< arrival steps; past them the run drains
  std::size_t running = 0;
  std::size_t waiting = 0;
  std::uint64_t used_blocks = 0;
  std::uint64_t total_blocks = 0;
  const char* pressure = "low";
};

class progress {
public:
  explicit progress(bool enabled = true)
    : enabled_(enabled), tty_(enabled && isatty(STDERR_FILENO) == 1) {
  }

  void update(const progress_state& s) {
    if (!enabled_)
      return;
    if (tty_)
      draw(s);
    else
      log(s);
  }

  /// Ends the bar's line (if one is drawn) and prints `note`, if any.
  void finish(const std::string& note = {}) {
    if (!enabled_)
      return;
    if (tty_ && drawn_)
      std::fputs("\r\033[K", stderr);
    if (!note.empty())
      std::fprintf(stderr, "%s\n", note.c_str());
    std::fflush(stderr);
    drawn_ = false;
  }

private:
  void draw(const progress_state& s) {
    auto now = std::chrono::steady_clock::now();
    if (drawn_ && now - last_ < std::chrono::milliseconds{100})
      return;
    last_ = now;
    drawn_ = true;
    constexpr int width = 30;
    char bar[width + 1];
    auto frac = s.steps == 0 ? 1.0 : std::min(1.0, double(s.step) / double(s.steps));
    auto filled = static_cast<int>(frac * width);
    for (int i = 0; i < width; ++i)
      bar[i] = i < filled ? '#' : '.';
    bar[width] = '\0';
    if (s.step <= s.steps)
      std::fprintf(stderr,
                   "\r\033[K[%s] %3.0f%% step %llu/%llu  running %zu  waiting "
                   "%zu  blocks %llu/%llu  pressure %s",
                   bar, frac * 100, ull(s.step), ull(s.steps), s.running,
                   s.waiting, ull(s.used_blocks), ull(s.total_blocks), s.pressure);
    else
      std::fprintf(stderr,
                   "\r\033[K[%s] draining: step %llu  running %zu  waiting %zu  "
                   "blocks %llu/%llu  pressure %s",
                   bar, ull(s.step), s.running, s.waiting, ull(s.used_blocks),
                   ull(s.total_blocks), s.pressure);
    std::fflush(stderr);
  }

  void log(const progress_state& s) {
    std::string what;
    if (!started_) {
      started_ = true;
      what = "started:";
    } else if (s.step <= s.steps) {
      auto tenth = s.steps == 0 ? 10 : s.step * 10 / s.steps;
      if (tenth <= last_tenth_)
        return;
      last_tenth_ = tenth;
      what = std::to_string(tenth * 10) + "%";
    } else if (!draining_) {
      draining_ = true;
      last_drain_k_ = (s.step - s.steps) / 1000;
      what = "draining:";
    } else if ((s.step - s.steps) / 1000 > last_drain_k_) {
      // Each 1000 drain steps - once, when a skipped idle gap jumps many.
      last_drain_k_ = (s.step - s.steps) / 1000;
      what = "draining:";
    } else {
      return;
    }
    std::fprintf(stderr,
                 "progress: %s step %llu/%llu  running %zu  waiting %zu  blocks "
                 "%llu/%llu  pressure %s\n",
                 what.c_str(), ull(s.step), ull(s.steps), s.running, s.waiting,
                 ull(s.used_blocks), ull(s.total_blocks), s.pressure);
    std::fflush(stderr);
  }

  static unsigned long long ull(std::uint64_t x) {
    return static_cast<unsigned long long>(x);
  }

  bool enabled_;
  bool tty_;
  bool drawn_ = false;
  bool started_ = false;
  bool draining_ = false;
  std::uint64_t last_tenth_ = 0;
  std::uint64_t last_drain_k_ = 0;
  std::chrono::steady_clock::time_point last_;
};

} // namespace kvactor::sim
