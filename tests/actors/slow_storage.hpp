// slow_storage: the host backend with a GPU's timing, for the actor tests -
// work is done at once, but each ticket completes only when the test says
// (complete, complete_one), fail() turns it into a faulted device, and the
// throw_* controls make its calls throw (an embedder's backend that does).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/kv_cache_manager_actor.hpp"
#include "kvactor/config/cache_config.hpp"
#include "kvactor/device/storage.hpp"
#include "kvactor/messages/error.hpp"

namespace kvactor::test {

/// Where a slow_storage's resources were released (teardown tests): each
/// host buffer and the storage itself, and whether on a thread running a
/// wake (storage::in_wake) - CUDA's host callback, where the cuda backend
/// must release nothing. Thread-safe.
class release_log {
public:
  void buffer_freed(bool in_wake) {
    std::lock_guard<std::mutex> guard{mtx_};
    ++buffers_;
    buffers_in_wake_ += in_wake ? 1 : 0;
    cv_.notify_all();
  }
  void storage_gone(bool in_wake) {
    std::lock_guard<std::mutex> guard{mtx_};
    storage_gone_ = true;
    storage_in_wake_ = in_wake;
    cv_.notify_all();
  }
  /// Waits up to `limit` for the storage and `buffers` buffers to go.
  bool wait_for(int buffers, std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lock{mtx_};
    return cv_.wait_for(lock, limit, [&] {
      return storage_gone_ && buffers_ >= buffers;
    });
  }
  int buffers_in_wake() {
    std::lock_guard<std::mutex> guard{mtx_};
    return buffers_in_wake_;
  }
  bool storage_in_wake() {
    std::lock_guard<std::mutex> guard{mtx_};
    return storage_in_wake_;
  }

private:
  std::mutex mtx_;
  std::condition_variable cv_;
  int buffers_ = 0;
  int buffers_in_wake_ = 0;
  bool storage_gone_ = false;
  bool storage_in_wake_ = false;
};

/// The host backend with asynchronous completion and injectable faults:
/// each operation does its work at once, but its ticket stays pending until
/// complete() (which calls the wake, as CUDA's host callback does) or
/// fail() (which, like a CUDA fault, calls no wake and makes every later
/// call fail).
class slow_storage final : public storage {
public:
  explicit slow_storage(std::unique_ptr<storage> inner)
    : storage(inner->layout()), inner_(std::move(inner)) {
  }

  ~slow_storage() override {
    if (log)
      log->storage_gone(in_wake());
  }

  /// Set: host buffers and the storage report their release there.
  std::shared_ptr<release_log> log;

  /// How many host buffers (staging) were asked for.
  std::size_t host_buffers_asked = 0;

  /// Whether the device actor told the storage its work stalled
  /// (mark_stalled); shared, to outlive the storage.
  std::shared_ptr<std::atomic<bool>> told_stalled
    = std::make_shared<std::atomic<bool>>(false);

  storage_kind kind() const noexcept override {
    return inner_->kind();
  }
  kvactor::device where() const noexcept override {
    return inner_->where();
  }
  void* layer_base(std::uint32_t layer) noexcept override {
    return inner_->layer_base(layer);
  }
  void* host_layer_base(std::uint32_t layer) noexcept override {
    return inner_->host_layer_base(layer);
  }
  caf::expected<ticket> copy_blocks(const std::vector<block_copy>& pairs) override {
    return issue([&] { return inner_->copy_blocks(pairs); });
  }
  caf::expected<ticket> swap_out(const std::vector<block_move>& moves) override {
    return issue([&] { return inner_->swap_out(moves); });
  }
  caf::expected<ticket> swap_in(const std::vector<block_move>& moves) override {
    return issue([&] { return inner_->swap_in(moves); });
  }
  caf::expected<ticket> write_slots(std::uint32_t layer, const void* key,
                                    const void* value, const std::int64_t* slots,
                                    std::size_t n) override {
    return issue([&] { return inner_->write_slots(layer, key, value, slots, n); });
  }
  caf::expected<ticket> gather_blocks(std::uint32_t layer,
                                      const std::vector<block_id>& blocks,
                                      std::size_t n, void* key_out,
                                      void* value_out) override {
    return issue(
      [&] { return inner_->gather_blocks(layer, blocks, n, key_out, value_out); });
  }
  bool done(ticket t) override {
    return failed_ || t <= completed_;
  }
  caf::error wait(ticket t) override {
    if (failed_)
      return fault();
    while (completed_ < t) // blocks until done, as a GPU would
      mark(completed_ + 1);
    return failed_later_ ? fault() : caf::none;
  }
  bool finished(ticket t) override {
    if (throw_in_finished_ > 0 && --throw_in_finished_ == 0)
      throw std::runtime_error("slow_storage: finished() threw as the test "
                               "asked");
    return failed_ || t <= completed_ || early_.count(t) > 0;
  }
  caf::error wait_one(ticket t) override {
    if (throw_waits_)
      throw std::runtime_error("slow_storage: wait_one() threw as the test "
                               "asked");
    if (failed_)
      return fault();
    mark(t); // blocks until t alone is done
    return failed_later_ ? fault() : caf::none;
  }
  caf::error wait_one_for(ticket t, std::chrono::nanoseconds limit,
                          bool& timed_out) override {
    if (throw_waits_)
      throw std::runtime_error("slow_storage: wait_one_for() threw as the "
                               "test asked");
    timed_out = stalled_ && !finished(t);
    if (timed_out)
      return caf::none; // as a stalled GPU would, once `limit` passed
    return storage::wait_one_for(t, limit, timed_out);
  }
  void set_wake(std::function<void()> wake) override {
    wake_ = std::move(wake);
  }
  void mark_stalled() noexcept override {
    *told_stalled = true;
  }
  std::shared_ptr<std::uint8_t> host_buffer(std::size_t bytes) override {
    ++host_buffers_asked;
    auto buf = inner_->host_buffer(bytes);
    if (!buf || !log)
      return buf;
    auto raw = buf.get();
    return std::shared_ptr<std::uint8_t>(
      raw, [buf = std::move(buf), log = log](std::uint8_t*) mutable {
        auto in = in_wake();
        buf.reset();
        log->buffer_freed(in);
      });
  }

  // -- the test's controls -------------------------------------------------------

  /// Everything issued completes; the wake is called.
  void complete() {
    completed_ = issued_;
    early_.clear();
    if (wake_)
      wake_();
  }

  /// Ticket `t` alone completes (as work on another stream may, ahead of
  /// earlier tickets); the wake is called.
  void complete_one(ticket t) {
    mark(t);
    if (wake_)
      wake_();
  }

  /// The device faults: no wake, and from now on every call fails.
  void fail() {
    failed_ = true;
  }

  /// The device fails, but not for good (cuda: a refused launch or event
  /// call): new work fails at once, while work already issued still runs
  /// until complete() and reports the failure once done.
  void fail_later() {
    failed_later_ = true;
  }

  /// The device stalls: a bounded wait (wait_one_for) for work not yet
  /// complete times out; complete() still ends it.
  void stall() {
    stalled_ = true;
  }

  /// The next operation throws (an embedder's backend that does): the
  /// device actor calling it crashes.
  void throw_next() {
    throw_next_ = true;
  }

  /// The `k`th call of finished() from now throws (k >= 1; once).
  void throw_in_finished(int k) {
    throw_in_finished_ = k;
  }

  /// From now on wait_one() and wait_one_for() throw.
  void throw_waits() {
    throw_waits_ = true;
  }

  /// Whether a wake is set (a device actor's, until its successor's).
  bool has_wake() const noexcept {
    return static_cast<bool>(wake_);
  }

  std::uint64_t pending() const noexcept {
    return issued_ - completed_ - early_.size();
  }

  /// The tickets issued and not yet complete, oldest first.
  std::vector<ticket> incomplete() const {
    std::vector<ticket> out;
    for (auto t = completed_ + 1; t <= issued_; ++t)
      if (early_.count(t) == 0)
        out.push_back(t);
    return out;
  }

private:
  static caf::error fault() {
    return make_error(errc::device_failure, "slow_storage: injected fault");
  }

  /// Ticket `t` completed: the low-water mark moves over every ticket now
  /// complete in order; the others are remembered one by one.
  void mark(ticket t) {
    if (t <= completed_)
      return;
    early_.insert(t);
    while (early_.count(completed_ + 1) > 0)
      early_.erase(++completed_);
  }

  template <class Op>
  caf::expected<ticket> issue(Op op) {
    if (failed_ || failed_later_)
      return fault();
    if (throw_next_) {
      throw_next_ = false;
      throw std::runtime_error("slow_storage: thrown as the test asked");
    }
    auto t = op();
    if (!t)
      return t; // rejected whole: nothing was issued
    inner_->wait(*t);
    return ++issued_;
  }

  std::unique_ptr<storage> inner_;
  std::function<void()> wake_;
  ticket issued_ = 0;
  ticket completed_ = 0;   // every ticket <= completed_ is complete
  std::set<ticket> early_; // complete tickets above completed_
  bool failed_ = false;
  bool failed_later_ = false; // fail_later(): new work fails, issued work runs
  bool stalled_ = false;
  bool throw_next_ = false;
  int throw_in_finished_ = 0; // counts down to the call that throws
  bool throw_waits_ = false;
};

/// A slow_storage over the host backend `cfg` asks for.
inline std::shared_ptr<slow_storage> make_slow(const cache_config& cfg) {
  auto opts = storage_options_for(cfg);
  opts.kind = "host";
  auto made = make_storage(opts);
  if (!made)
    BOOST_FAIL("make_storage: " << render(made.error()));
  return std::make_shared<slow_storage>(std::move(*made));
}

} // namespace kvactor::test
