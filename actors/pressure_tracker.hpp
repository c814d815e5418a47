// pressure_tracker: memory-pressure levels from blocks in use, with
// hysteresis. A level is entered when usage reaches its threshold and left
// when usage falls `hysteresis` below it, so a pool hovering at a mark does
// not flap. CAF-free; the pool uses marks() to report only crossings, the
// supervisor update() to compute the level.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kvactor/config/cache_config.hpp"
#include "kvactor/messages/types.hpp"

namespace kvactor::detail {

class pressure_tracker {
public:
  pressure_tracker(const pressure_config& cfg, std::uint64_t total_blocks)
    : total_(total_blocks) {
    double th[3] = {cfg.medium, cfg.high, cfg.critical};
    for (int i = 0; i < 3; ++i) {
      enter_[i] = mark(th[i]);
      leave_[i] = mark(std::max(0.0, th[i] - cfg.hysteresis));
      marks_.push_back(enter_[i]);
      marks_.push_back(leave_[i]);
    }
    std::sort(marks_.begin(), marks_.end());
    marks_.erase(std::unique(marks_.begin(), marks_.end()), marks_.end());
  }

  memory_pressure level() const noexcept {
    return level_;
  }

  /// Feeds the blocks in use; returns true if the level changed.
  bool update(std::uint64_t used) noexcept {
    auto lvl = static_cast<int>(level_);
    // Leave levels whose lower mark usage fell below; enter those reached.
    while (lvl > 0 && used < leave_[lvl - 1])
      --lvl;
    while (lvl < 3 && used >= enter_[lvl])
      ++lvl;
    auto next = static_cast<memory_pressure>(lvl);
    if (next == level_)
      return false;
    level_ = next;
    return true;
  }

  /// The block counts at which the level may change, ascending: usage that
  /// stays between two neighbouring marks never changes the level.
  const std::vector<std::uint64_t>& marks() const noexcept {
    return marks_;
  }

  /// Which interval between marks `used` lies in (0 = below the first).
  std::size_t band(std::uint64_t used) const noexcept {
    return static_cast<std::size_t>(
      std::upper_bound(marks_.begin(), marks_.end(), used) - marks_.begin());
  }

  /// Blocks in use at which `level` is entered (level > low).
  std::uint64_t enter_mark(memory_pressure level) const noexcept {
    return enter_[static_cast<int>(level) - 1];
  }

  /// Blocks in use below which `level` is left (level > low).
  std::uint64_t leave_mark(memory_pressure level) const noexcept {
    return leave_[static_cast<int>(level) - 1];
  }

  /// What preemption at critical pressure brings usage under: the high
  /// mark, and out of critical too - with a hysteresis wider than the gap
  /// between the two marks, usage just under the high mark still reads
  /// critical, and a relief that stopped there would leave it so.
  std::uint64_t relief_target() const noexcept {
    return std::min(enter_mark(memory_pressure::high),
                    leave_mark(memory_pressure::critical));
  }

private:
  std::uint64_t mark(double fraction) const noexcept {
    return pressure_mark(fraction, total_);
  }

  std::uint64_t total_;
  std::uint64_t enter_[3];
  std::uint64_t leave_[3];
  std::vector<std::uint64_t> marks_;
  memory_pressure level_ = memory_pressure::low;
};

} // namespace kvactor::detail
