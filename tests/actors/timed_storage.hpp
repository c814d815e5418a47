// A storage on one simulated stream whose ops take the times a test gives
// them, on the deterministic scheduler's clock: op k starts when the op
// before it ended (or when issued) and runs durations[k]. A bounded wait
// moves the clock to the op's end, or by its limit if that comes first.
// The bytes move at once (the host backend inside); only the timing is
// simulated. For stall bounds of healthy but slow work.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>

#include <caf/scheduler/test_coordinator.hpp>

#include "kvactor/device/storage.hpp"

namespace kvactor::test {

class timed_storage final : public storage {
public:
  explicit timed_storage(std::unique_ptr<storage> inner)
    : storage(inner->layout()), inner_(std::move(inner)) {
  }

  /// Set before any op: the clock the ops run on.
  caf::scheduler::test_coordinator* sched = nullptr;
  /// The next ops' run times, in order (0 once used up).
  std::deque<std::chrono::milliseconds> durations;

  storage_kind kind() const noexcept override {
    return inner_->kind();
  }
  kvactor::device where() const noexcept override {
    return inner_->where();
  }
  void* layer_base(std::uint32_t l) noexcept override {
    return inner_->layer_base(l);
  }
  void* host_layer_base(std::uint32_t l) noexcept override {
    return inner_->host_layer_base(l);
  }
  caf::expected<ticket> copy_blocks(const std::vector<block_copy>& p) override {
    return issue(inner_->copy_blocks(p));
  }
  caf::expected<ticket> swap_out(const std::vector<block_move>& m) override {
    return issue(inner_->swap_out(m));
  }
  caf::expected<ticket> swap_in(const std::vector<block_move>& m) override {
    return issue(inner_->swap_in(m));
  }
  caf::expected<ticket> write_slots(std::uint32_t layer, const void* k,
                                    const void* v, const std::int64_t* s,
                                    std::size_t n) override {
    return issue(inner_->write_slots(layer, k, v, s, n));
  }
  caf::expected<ticket> gather_blocks(std::uint32_t layer,
                                      const std::vector<block_id>& b,
                                      std::size_t n, void* k, void* v) override {
    return issue(inner_->gather_blocks(layer, b, n, k, v));
  }
  bool done(ticket t) override {
    return ends_.at(t) <= now();
  }
  caf::error wait(ticket t) override {
    advance_to(ends_.at(t));
    return caf::none;
  }
  caf::error wait_one_for(ticket t, std::chrono::nanoseconds limit,
                          bool& timed_out) override {
    auto end = ends_.at(t);
    timed_out = end > now() + limit;
    if (timed_out)
      sched->clock().current_time += limit;
    else
      advance_to(end);
    return caf::none;
  }
  void set_wake(std::function<void()>) override {
  }

private:
  caf::actor_clock::time_point now() const {
    return sched->clock().current_time;
  }
  void advance_to(caf::actor_clock::time_point x) {
    if (x > now())
      sched->clock().current_time = x;
  }
  caf::expected<ticket> issue(caf::expected<ticket> t) {
    if (!t)
      return t;
    inner_->wait(*t);
    auto start = std::max(now(), last_end_);
    auto d = durations.empty() ? std::chrono::milliseconds{0} : durations.front();
    if (!durations.empty())
      durations.pop_front();
    last_end_ = start + d;
    ends_[++issued_] = last_end_;
    return issued_;
  }

  std::unique_ptr<storage> inner_;
  ticket issued_ = 0;
  caf::actor_clock::time_point last_end_{};
  std::map<ticket, caf::actor_clock::time_point> ends_;
};

} // namespace kvactor::test
