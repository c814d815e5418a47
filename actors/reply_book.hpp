// The replies an actor still owes: a request it answers later (after asking
// the pool or the device) holds a response promise, and CAF 0.17 drops an
// undelivered promise without a word when its actor exits - the requester
// would wait for ever. An actor that books its promises here answers every
// one still open with shutting_down on its way out.
// Internal (namespace detail).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include <caf/response_promise.hpp>
#include <caf/typed_response_promise.hpp>

#include "kvactor/actors/id_map.hpp"

namespace kvactor::detail {

/// What a promise answers, for the error that closes it: "gc", or
/// "allocate" of request 7.
struct owed_what {
  const char* what;
  bool of_request = false;
  std::uint64_t id = 0;
};

/// The open promises of one actor, each with what it answers.
class reply_book {
public:
  using ticket = std::uint64_t;

  template <class... Ts>
  ticket open(caf::typed_response_promise<Ts...>& rp, owed_what what) {
    auto t = ++last_;
    entry e{t, static_cast<caf::response_promise&>(rp), what};
    if (first_.t == 0) {
      first_ = std::move(e);
    } else {
      if (!more_)
        more_ = std::make_unique<id_map<entry, 4>>();
      (*more_)[t] = std::move(e);
    }
    ++size_;
    return t;
  }

  /// The promise under `t` is answered (or handed on): forgets it.
  void close(ticket t) {
    if (first_.t == t) {
      first_ = entry{};
      --size_;
    } else if (more_) {
      if (auto i = more_->find(t); i != more_->end()) {
        more_->erase(i);
        --size_;
      }
    }
  }

  /// Answers every open promise with shutting_down ("<who> exited before
  /// it answered allocate of request 7") and forgets them. Call it from
  /// the actor's exit handler, before it quits, and from a functor
  /// attached to it (which runs even when it is killed); the second call
  /// finds nothing left. `because`, when not empty, says why it exited
  /// ("...request 7: the cache stopped: its device actor ended (kill)").
  void fail_all(const char* who, const std::string& because = {});

  std::size_t size() const noexcept {
    return size_;
  }

private:
  struct entry {
    ticket t = 0; ///< 0: none
    caf::response_promise rp;
    owed_what what{};
  };

  ticket last_ = 0;
  std::size_t size_ = 0;
  /// One inline - a handle actor (which books what it passes on to the
  /// pool) is nearly always asked one thing at a time - and the rest in a
  /// map made on first need: a book that never holds two allocates
  /// nothing. The map (id_map, in chunks of 16: one per handle actor that
  /// ever held two) books and closes a promise - twice per allocate or free
  /// through the manager - allocating nothing beyond its chunks (a node per
  /// promise in std::unordered_map).
  entry first_;
  std::unique_ptr<id_map<entry, 4>> more_;
};

/// A promise booked in a reply_book: delivering or delegating it closes its
/// entry first. Copies share the ticket (closing twice is harmless), so it
/// can be captured by the handlers of the request it waits on.
template <class... Ts>
class booked_promise {
public:
  booked_promise(reply_book& book, caf::typed_response_promise<Ts...> rp,
                 owed_what what)
    : book_(&book), rp_(std::move(rp)) {
    ticket_ = book.open(rp_, what);
  }

  /// What a handler returns for the reply to follow.
  caf::typed_response_promise<Ts...> promise() const {
    return rp_;
  }

  template <class... Xs>
  void deliver(Xs&&... xs) {
    book_->close(ticket_);
    rp_.deliver(std::forward<Xs>(xs)...);
  }

  template <class Handle, class... Xs>
  void delegate(const Handle& dest, Xs&&... xs) {
    book_->close(ticket_);
    rp_.delegate(dest, std::forward<Xs>(xs)...);
  }

private:
  reply_book* book_;
  caf::typed_response_promise<Ts...> rp_;
  reply_book::ticket ticket_ = 0;
};

} // namespace kvactor::detail
