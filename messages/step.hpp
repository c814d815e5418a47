// The hot path: one scheduler step's cache work (frees, extends, admissions)
// in one message and one reply, instead of a round trip per request.
#pragma once

#include <cstdint>
#include <vector>

#include <caf/error.hpp>
#include <caf/meta/type_name.hpp>

#include "kvactor/messages/protocol.hpp"
#include "kvactor/messages/types.hpp"

namespace kvactor {

/// Grow request `id` by `num_tokens`, the last `num_draft` of them draft
/// tokens (speculative decoding: slots now, in the prefix index only once a
/// later step's verdict keeps them; at most max_draft_tokens). A request
/// with drafts unsettled does not grow: its extend fails (invalid_request).
struct extend_op {
  request_id id = 0;
  std::uint32_t num_tokens = 0;
  std::uint32_t num_draft = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, extend_op& x) {
  return f(caf::meta::type_name("extend_op"), x.id, x.num_tokens,
           x.num_draft);
}

/// The verification of request `id`'s draft tokens: the first `accepted`
/// stay (the blocks they complete enter the prefix index), the rest go -
/// the request shrinks by them, and blocks left empty return to the pool.
struct draft_verdict {
  request_id id = 0;
  std::uint32_t accepted = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, draft_verdict& x) {
  return f(caf::meta::type_name("draft_verdict"), x.id, x.accepted);
}

/// One step, executed in this order in one message:
/// 0. `verdicts` settle the draft tokens of the previous step's extends (a
///    shrunk table is reported in `changed`: blocks[first...] are gone),
///    each request's at most once: a second verdict for the same id fails
///    alone (invalid_request, "appears twice in the step's verdicts");
/// 1. `frees` end (finished requests; blocks return, hashed ones stay
///    cached), then `discards` end the same way but take what they wrote
///    out of the prefix index, also where others hold it (requests whose
///    K/V a failed forward pass may have left unwritten; what their
///    admission found cached stays, pins and all); both are reported in
///    `freed`. One that ended by other hands since
///    the scheduler last looked - the supervisor preempts at critical
///    pressure, and may pick a request that just finished - fails
///    unknown_request in `failed`: it is done all the same (its end came
///    as `(preempt_atom, request_ended)` or a lifecycle event), not to be
///    admitted again;
/// 2. `extends` run in list order (oldest request first), each request at
///    most once: a second entry for the same id fails (invalid_request,
///    "appears twice in the step's extends"). When one lacks a block and
///    `preempt_on_shortage` is set, the newest not yet preempted request of
///    the list that the step has not extended yet (the last one; possibly
///    itself) is preempted - its blocks freed, its id reported in
///    `preempted` - and the extend retried, which is vLLM's policy;
///    otherwise the extend fails alone. Requests of the list that hold no
///    device blocks now (being swapped, swapped out, unknown) are passed
///    over as victims: preempting them frees nothing. They fail on their own
///    extends;
/// 3. `admits` are allocated in order, only if nothing was preempted in this
///    step (unless `admit_after_preemption`); admission stops at the first
///    request that does not fit (first come, first served).
/// `tokens` is either empty (unnamed tokens) or holds every extend's token
/// ids back to back, in list order (then the blocks they fill are hashed and
/// enter the prefix index). Flat, so a step costs a handful of allocations
/// however many requests it grows.
struct step_request {
  std::vector<request_id> frees;
  std::vector<extend_op> extends;
  std::vector<token_id> tokens;
  std::vector<allocation_request> admits;
  bool preempt_on_shortage = true;
  bool admit_after_preemption = false;
  /// Run first (step 0 above); last here so older brace-initializers of
  /// the other fields still compile.
  std::vector<draft_verdict> verdicts;
  /// Run after `frees` (step 1 above).
  std::vector<request_id> discards;
  /// The sender's promise that the K/V of all its earlier steps are
  /// written (its forward passes run one at a time, each done before its
  /// next step): the blocks of the requests its steps admitted that the
  /// supervisor preempted since - draining, under
  /// pressure.preempt_grace_ms - come free first thing in this step,
  /// rather than when the grace runs out. Leave it false where passes
  /// overlap steps (an asynchronous scheduler) or several threads step
  /// through one sender (the facade's steps all share one).
  bool earlier_steps_written = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_request& x) {
  return f(caf::meta::type_name("step_request"), x.frees, x.extends, x.tokens,
           x.admits, x.preempt_on_shortage, x.admit_after_preemption,
           x.verdicts, x.discards, x.earlier_steps_written);
}

/// A request whose table changed: blocks[first...] are now `blocks` (new
/// blocks appended, a shared last block replaced by its private copy, or -
/// `blocks` empty - the table cut to `first` blocks by a draft verdict).
struct table_delta {
  request_id id = 0;
  std::uint32_t first = 0;
  std::vector<block_id> blocks;
  std::uint64_t num_tokens = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, table_delta& x) {
  return f(caf::meta::type_name("table_delta"), x.id, x.first, x.blocks,
           x.num_tokens);
}

/// An admitted request.
struct admission {
  request_id id = 0;
  std::uint64_t cache_id = 0;
  std::uint64_t hit_tokens = 0; ///< prompt tokens found in the prefix cache
  block_table table;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, admission& x) {
  return f(caf::meta::type_name("admission"), x.id, x.cache_id, x.hit_tokens,
           x.table);
}

/// An operation of the step that failed (and changed nothing: an extend
/// whose copy-on-write copy the device did not make is undone, and fails
/// with the device's error code, its text naming the request and that it
/// was undone). The error's text names the op and the request ("extend of
/// request 7: ..."). An admit or extend past what one request may
/// hold fails with exceeds_capacity: it neither blocks admission nor
/// preempts anything.
struct op_failure {
  request_id id = 0;
  caf::error error;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, op_failure& x) {
  return f(caf::meta::type_name("op_failure"), x.id, x.error);
}

/// What a step did.
struct step_result {
  std::vector<request_id> freed;
  /// Tables that changed, in the order they did: a request cut by its
  /// verdict and then extended has two entries (apply them in order). An
  /// extend that fits in the request's last block changes no block and
  /// has no entry: its tokens are the scheduler's to count.
  std::vector<table_delta> changed;
  std::vector<block_copy> copies;    ///< copy-on-write, done before the reply
  /// Newest first, as chosen. A preemption stands even when the extend it
  /// made room for is undone later by a failed copy-on-write copy.
  std::vector<request_id> preempted;
  /// Write the K/V of each before the next step - also of one the
  /// supervisor preempted meanwhile (its notice may come first): another
  /// admission of this step may have hit its blocks.
  std::vector<admission> admitted;
  /// In the order the step ran them - verdicts, frees, discards, extends
  /// (a victim's preemption where it happened), admits - then the admits
  /// the pool refused before the step ran for naming another device, then
  /// the extends a failed copy-on-write undid (and, through the facade's
  /// step(), last the admits never sent for a max_sequence_length the
  /// contiguous layout cannot hold): a request whose verdict and
  /// extend both failed has its verdict's failure first. An admit failing
  /// `out_of_blocks` is not here: admission stops at it (`blocked`); one
  /// failing otherwise (`quota_exceeded` included) is, and admission goes
  /// on behind it.
  std::vector<op_failure> failed;
  /// The first admit that did not fit (admission stopped there), when
  /// admission_blocked is set; read it only then - 0 is a request id too.
  /// A step that preempted (without admit_after_preemption) tries no
  /// admit: then it is the first admit, which may well have fit.
  request_id blocked = 0;
  /// Admission stopped at `blocked`: it and every admit after it in the
  /// request were not admitted (nor are they in `failed`, but for those
  /// refused before the step ran: for naming another device, or through
  /// the facade for the contiguous layout's length) - wait again.
  bool admission_blocked = false;
  /// As of the reply (after copy-on-write copies finished), cached blocks
  /// counted as free, draining ones (pressure.preempt_grace_ms) not.
  std::uint64_t free_blocks = 0;
  std::uint64_t used_blocks = 0;
  /// Requests the sender admitted through its steps that ended other than
  /// by its own steps since its last step reply - a free or preemption
  /// through the manager or a handle (the sender's own included), a
  /// reclaim, another sender's step - oldest first, each once. Reported
  /// here so a scheduler learns of them in order with what this step did;
  /// lifecycle subscribers and owner notices hear of them too, from the
  /// manager, possibly after this reply. A step sent anonymously owns
  /// nothing and is told nothing.
  std::vector<request_ended> ended;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_result& x) {
  return f(caf::meta::type_name("step_result"), x.freed, x.changed, x.copies,
           x.preempted, x.admitted, x.failed, x.blocked, x.admission_blocked,
           x.free_blocks, x.used_blocks, x.ended);
}

} // namespace kvactor
