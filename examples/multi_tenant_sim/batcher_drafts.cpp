// batcher: speculative decoding (scenario draft_tokens). A decoding request
// extends by its pending token and k' drafts (extend_op::num_draft); the
// verifier's verdict, drawn as the step is sent, is known once the step's
// pass ran, and goes to the cache in the request's next step message with
// its next extend (step_request::verdicts run first), or with its free when
// it finished. Drafts the verifier accepts carry the request's next output
// tokens; rejected ones carry other ids, so their K/V differ from what the
// request writes into the same slots once the verdict cut them.
#include "batcher.hpp"

#include <unordered_map>

#include "kvactor/messages/error.hpp"

namespace kvactor::sim {

void batcher::draw_drafts(live& l) {
  l.drafts.clear();
  l.accepted = 0;
  l.draft_at = l.in_cache() + 1; // after the pending token
  if (l.prefilling() || verifier_.k() == 0)
    return;
  auto n = verifier_.drafts_for(l.req.output.size() - l.generated);
  l.accepted = verifier_.accept(n);
  auto vocab = scenario_.workloads[l.req.workload].vocab_size;
  for (std::uint32_t j = 0; j < n; ++j) {
    auto real = l.req.output[l.generated + j];
    l.drafts.push_back(j < l.accepted ? real
                                      : draft_verifier::rejected_id(real, vocab));
  }
}

std::uint64_t batcher::send_verdict(live& l, step_request& out) {
  if (!l.unsettled)
    return 0;
  auto n = static_cast<std::uint32_t>(l.drafts.size());
  out.verdicts.push_back(draft_verdict{l.req.id, l.accepted});
  sent_verdicts_.push_back(sent_verdict{l.req.id, l.req.workload, n, l.accepted});
  // The verdict runs first in the step: the cache then holds what it keeps
  // (end_step counted the accepted drafts in), and gives back the blocks
  // that held only rejected ones. The reply's delta, if any, cuts the
  // blocks; the count is known now.
  auto bs = cfg_.block_size;
  auto freed = blocks_for(l.held(), bs) - blocks_for(l.in_cache(), bs);
  l.table.num_tokens = l.in_cache();
  l.unsettled = false; // the reply says how it went (settle_verdicts)
  return freed;
}

std::vector<bool> batcher::settle_verdicts(const step_result& res) {
  std::vector<bool> theirs(res.failed.size(), false);
  if (sent_verdicts_.empty())
    return theirs;
  // Verdicts run first in a step, so a verdict's failure comes before any
  // other of its request's. It fails only with unknown_request (the request
  // is gone, and its extend or free fails alike, later) or invalid_request
  // (a verdict the cache could not apply); its request's extend fails
  // otherwise after a verdict went through (at a quota, short of blocks).
  std::unordered_map<request_id, std::size_t> pending;
  for (std::size_t i = 0; i < sent_verdicts_.size(); ++i)
    pending.emplace(sent_verdicts_[i].id, i);
  std::vector<const op_failure*> failure(sent_verdicts_.size(), nullptr);
  for (std::size_t k = 0; k < res.failed.size(); ++k) {
    auto& f = res.failed[k];
    auto i = pending.find(f.id);
    if (i == pending.end()
        || !(has_code(f.error, errc::unknown_request)
             || has_code(f.error, errc::invalid_request)))
      continue;
    theirs[k] = true;
    failure[i->second] = &f;
    pending.erase(i);
  }
  for (std::size_t i = 0; i < sent_verdicts_.size(); ++i) {
    auto& v = sent_verdicts_[i];
    auto& d = figures_[v.workload].drafts;
    if (failure[i] != nullptr) {
      // Its request left the cache (the supervisor preempted it) and its
      // drafts with it.
      d.dropped += v.drafts;
      if (!has_code(failure[i]->error, errc::unknown_request))
        warn("verdict refused: request " + std::to_string(v.id) + ": "
             + render(failure[i]->error));
    } else {
      d.accepted += v.accepted;
      d.rejected += v.drafts - v.accepted;
    }
  }
  sent_verdicts_.clear();
  return theirs;
}

void batcher::drop_drafts(live& l) {
  if (l.unsettled)
    figures_[l.req.workload].drafts.dropped += l.drafts.size();
  l.unsettled = false;
  l.drafts.clear();
  l.accepted = 0;
}

} // namespace kvactor::sim
