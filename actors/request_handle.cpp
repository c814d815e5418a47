// request_handle actor: extend with copy-on-write, stats, owner watch. Its
// memory comes from a slab (actor_slab.hpp) through a specialization of
// CAF's actor_storage for it, below.
#include "kvactor/actors/request_handle.hpp"

#include <cassert>
#include <cstddef>
#include <memory>
#include <type_traits>

#include <caf/actor_storage.hpp>
#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "kvactor/actors/crash_reason.hpp"
#include "kvactor/actors/incarnation_error.hpp"
#include "kvactor/actors/reply_book.hpp"
#include "kvactor/actors/stray_messages.hpp"
#include "kvactor/messages/error.hpp"
#include "kvactor/messages/error_context.hpp"

namespace kvactor {

namespace {

struct request_handle_state {
  static inline const char* name = "kvactor.request_handle";

  request_handle_args args;
  /// Told when the handle goes with an error (below).
  supervisor_actor supervisor;
  /// The handle, for its exit reason as it goes.
  caf::local_actor* self = nullptr;
  /// Requests it answers through a promise, still waiting for the pool (and
  /// through it the device). A promise dropped by a quitting actor is
  /// never answered in CAF 0.17, and its requester would wait forever: the
  /// actor quits only once they are answered - or, killed or crashed (no
  /// exit handler runs), answers them as it goes (below).
  detail::reply_book owed;
  /// The request ended (or its owner or manager died): quit once nothing
  /// is pending, with `exit_reason`.
  bool ending = false;
  caf::error exit_reason;

  request_id id() const noexcept {
    return args.info.request.id;
  }

  /// Runs as the handle goes, however it goes (CAF's on_exit, after quit
  /// stored the reason): a death with an error - killed, crashed, stopped
  /// - has the supervisor reclaim the request's blocks; the normal end
  /// every request has says nothing. (An attachable would do as much at
  /// the price of a heap node and a lock per handle, the node cold by the
  /// time it runs: ~0.12 us per free-and-allocate, alternated, at 1,000 and
  /// at 100,000 live requests.)
  ~request_handle_state() {
    if (self != nullptr && self->fail_state() && supervisor)
      caf::anon_send(supervisor, reclaim_atom::value, id(), args.info.cache_id);
    if (owed.size() > 0)
      owed.fail_all("the handle actor");
  }
};

using handle_ptr = request_handle_actor::stateful_pointer<request_handle_state>;

/// The actor CAF spawns for handle_fun.
using handle_impl = std::remove_pointer_t<handle_ptr>;

} // namespace
} // namespace kvactor

namespace caf {

/// CAF's actor_storage for the handle actor, with CAF's layout and duties -
/// the control block first, the actor one cache line in, the actor
/// destroyed when the last strong reference goes and the block when the
/// last weak one does - plus class-level new and delete, so that CAF's
/// `new actor_storage<T>` in make_actor and `delete` in block_dtor take the
/// memory from the handles' slab. (CAF 0.17.6's primary template has no
/// allocator hook; this is the one place kvactor relies on its layout, and
/// the static_asserts below check it.)
template <>
class actor_storage<kvactor::handle_impl> {
public:
  template <class... Us>
  actor_storage(actor_id aid, node_id nid, actor_system* sys, Us&&... xs)
    : ctrl(aid, nid, sys, data_dtor, block_dtor) {
    new (&data) kvactor::handle_impl(std::forward<Us>(xs)...);
  }

  ~actor_storage() {
    static_assert(sizeof(actor_control_block) < CAF_CACHE_LINE_SIZE,
                  "the control block fits one cache line");
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof" // as CAF's own template
    static_assert(offsetof(actor_storage, ctrl) == 0,
                  "the control block starts the storage");
    static_assert(offsetof(actor_storage, data) == CAF_CACHE_LINE_SIZE,
                  "the actor starts one cache line in");
#pragma GCC diagnostic pop
  }

  actor_storage(const actor_storage&) = delete;
  actor_storage& operator=(const actor_storage&) = delete;

  static void* operator new(std::size_t bytes);
  static void operator delete(void* ptr) noexcept;

  actor_control_block ctrl;
  char pad[CAF_CACHE_LINE_SIZE - sizeof(actor_control_block)];
  union {
    kvactor::handle_impl data;
  };

private:
  static void data_dtor(abstract_actor* ptr) {
    ptr->on_destroy();
    std::destroy_at(static_cast<kvactor::handle_impl*>(ptr));
  }

  static void block_dtor(actor_control_block* ptr) {
    delete reinterpret_cast<actor_storage*>(ptr);
  }
};

} // namespace caf

namespace kvactor {
namespace {

using handle_storage = caf::actor_storage<handle_impl>;

/// The handles' slab: never destroyed (a handle may be released after
/// main's objects are gone).
detail::actor_slab& slab() {
  static auto* instance = new detail::actor_slab(sizeof(handle_storage));
  return *instance;
}

/// Quits. (It monitors nobody: the manager watches owners, one monitor per
/// owner, and ends the handles itself when it stops.)
void finish(handle_ptr self) {
  self->quit(self->state.exit_reason);
}

/// Quits now, or once the pending requests are answered.
void end(handle_ptr self, caf::error reason) {
  auto& st = self->state;
  if (!st.ending) {
    st.ending = true;
    st.exit_reason = std::move(reason);
  }
  if (st.owed.size() == 0)
    finish(self);
}

/// One pending request answered.
void answered(handle_ptr self) {
  auto& st = self->state;
  if (st.ending && st.owed.size() == 0)
    finish(self);
}

caf::error ended_error(const request_handle_state& st) {
  return detail::ended_error(st.id());
}

/// Grows the request through the pool, which has shared blocks copied
/// (copy-on-write) before it replies, so the caller never appends into a
/// block another request still reads.
caf::result<block_table> grow(handle_ptr self, std::uint64_t n,
                              std::vector<token_id> tokens) {
  auto& st = self->state;
  if (st.ending)
    return ended_error(st);
  detail::booked_promise<block_table> rp{
    st.owed, self->make_response_promise<block_table>(),
    detail::owed_what{tokens.empty() ? "extend" : "append", true, st.id()}};
  const bool named = !tokens.empty();
  auto fail = [self, rp, named](caf::error& err) mutable {
    // The pool's own errors name the request; CAF's (the pool ended) not.
    rp.deliver(as_ours(std::string{named ? "append" : "extend"} + " of request "
                         + std::to_string(self->state.id()),
                       err, errc::shutting_down));
    answered(self);
  };
  self->request(st.args.pool, caf::infinite, extend_atom::value, st.id(),
                st.args.info.cache_id, n, std::move(tokens))
    .then(
      [self, rp](extension& ext) mutable {
        // Copy-on-write copies, if any, are done: the pool waited for them.
        rp.deliver(std::move(ext.table));
        answered(self);
      },
      fail);
  return rp.promise();
}

request_handle_actor::behavior_type handle_fun(handle_ptr self,
                                               request_handle_args args,
                                               supervisor_actor supervisor) {
  detail::handle_stray_messages(self);
  detail::name_crashes(self, "request handle"); // no heap: fits std::function
  auto& st = self->state;
  st.args = std::move(args);
  st.supervisor = std::move(supervisor);
  st.self = self;
  // An exit message (the manager stopping) also waits for pending answers.
  // The handle quits without a reason only on end_atom (its request ended
  // through the manager): the supervisor reclaims after any other exit, so
  // an exit message without a reason still counts as a stop.
  self->set_exit_handler([self](const caf::exit_msg& msg) {
    end(self, msg.reason ? msg.reason
                         : caf::make_error(caf::exit_reason::user_shutdown));
  });
  return {
    [self](table_atom) -> caf::result<block_table> {
      auto& st = self->state;
      if (st.ending)
        return ended_error(st);
      return self->delegate(st.args.pool, table_atom::value, st.id(),
                            st.args.info.cache_id);
    },
    [self](extend_atom, std::uint64_t n) {
      return grow(self, n, {});
    },
    [self](append_atom, std::vector<token_id>& tokens) {
      auto n = tokens.size();
      return grow(self, n, std::move(tokens));
    },

    [self](stats_atom) -> caf::result<cache_handle_stats> {
      auto& st = self->state;
      if (st.ending)
        return ended_error(st);
      detail::booked_promise<cache_handle_stats> rp{
        st.owed, self->make_response_promise<cache_handle_stats>(),
        detail::owed_what{"stats", true, st.id()}};
      // The pool's figures: it stamps last_access whichever path grew the
      // request (this handle, the manager or a step).
      self->request(st.args.pool, caf::infinite, stats_atom::value, st.id(),
                    st.args.info.cache_id)
        .then(
          [self, rp](cache_handle_stats& s) mutable {
            s.memory_bytes = s.blocks_allocated * self->state.args.bytes_per_block;
            s.prefix_hit_tokens = self->state.args.hit_tokens;
            rp.deliver(s);
            answered(self);
          },
          [self, rp](caf::error& err) mutable {
            rp.deliver(as_ours("stats of request "
                                 + std::to_string(self->state.id()),
                               err, errc::shutting_down));
            answered(self);
          });
      return rp.promise();
    },
    [self](info_atom) {
      return self->state.args.info;
    },
    [self](free_atom) -> caf::result<std::uint32_t> {
      auto& st = self->state;
      // Ended: the id may name a new request by now.
      if (st.ending)
        return ended_error(st);
      // The manager frees only the incarnation this handle serves: a free
      // still in this mailbox when the request ended must not end the id's
      // next request.
      return self->delegate(st.args.manager, free_atom::value, st.id(),
                            st.args.info.cache_id);
    },
    [self](unclaimed_atom) {
      auto& st = self->state;
      // As from its sender: the manager takes it only from the request's
      // owner (the facade's bridge, for a reply nobody received) or from
      // itself (an owner that died). From anyone else - whoever holds this
      // handle - it would end a request its owner still uses, and take
      // what it wrote out of the prefix index.
      auto from = caf::actor_cast<caf::actor>(self->current_sender());
      if (!st.ending && from)
        caf::send_as(from, st.args.manager, unclaimed_atom::value, st.id(),
                     st.args.info.cache_id);
    },
    [self](end_atom, end_reason) {
      // Only the manager ends a handle, with its request: from anyone else
      // this would leave the request live and its handle gone, unreclaimed.
      if (caf::actor_cast<caf::actor_addr>(self->current_sender())
          != self->state.args.manager.address())
        return;
      end(self, caf::none);
    },
  };
}

} // namespace

detail::actor_slab::counts handle_slab_counts() {
  return slab().snapshot();
}

void prefetch_handle(const request_handle_actor& h) noexcept {
  if (!h)
    return;
  // ctrl() is arithmetic on the pointer: nothing of the actor is read.
  auto p = reinterpret_cast<const char*>(
    caf::actor_cast<caf::abstract_actor*>(h)->ctrl());
  for (std::size_t at = 0; at < sizeof(handle_storage); at += CAF_CACHE_LINE_SIZE)
    __builtin_prefetch(p + at);
}

bool is_going(const request_handle_actor& h) noexcept {
  auto p = caf::actor_cast<caf::abstract_actor*>(h);
  return p == nullptr || p->getf(caf::abstract_actor::is_shutting_down_flag);
}

request_handle_actor spawn_request_handle(caf::actor_system& sys,
                                          request_handle_args args,
                                          const supervisor_actor& supervisor) {
  // Lazily: the actor starts on its first message - a call, its end, or
  // an exit (a kill too: the supervisor still hears of it) - instead of as
  // a job of its own at spawn, which the workers then took turns stealing.
  // Its state (what its destructor reads to have the supervisor reclaim)
  // is set up at that start: every path that lets a handle go sends it a
  // message first (end_atom, or an exit from the manager).
  // A step admitting 20,000 requests had the manager register them in 445
  // ms with two workers, 135 ms so.
  return sys.spawn<caf::lazy_init>(handle_fun, std::move(args), supervisor);
}

} // namespace kvactor

void* caf::actor_storage<kvactor::handle_impl>::operator new(std::size_t bytes) {
  assert(bytes == kvactor::slab().block_bytes());
  (void) bytes;
  return kvactor::slab().take();
}

void caf::actor_storage<kvactor::handle_impl>::operator delete(void* ptr) noexcept {
  kvactor::slab().give(ptr);
}
