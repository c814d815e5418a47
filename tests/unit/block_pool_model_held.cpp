// The block pool model test's copies in flight (the harness:
// block_pool_model.hpp): extends and steps that hold their copy-on-write
// copies leave them to settle, made or failed at random, before any other
// operation - now and then after a request ended (which the contract lets
// happen between: settle_copies has nothing to undo for it), now and then
// in two parts. Each runs on block_pool_core and pool_reference_model,
// requires the same answer from both and counts what it covered.
#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "block_pool_model.hpp"

namespace kvactor::test::block_pool_model {

void harness::settle_or_end() {
  if (chance(15))
    return end_copier();
  if (in_flight_.size() > 1 && chance(50)) {
    // The device answers for some copies first (the pool actor settles a
    // step's copies at once; the contract does not ask it).
    auto k = static_cast<std::ptrdiff_t>(1 + below(in_flight_.size() - 1));
    std::vector<block_copy> first(in_flight_.begin(), in_flight_.begin() + k);
    in_flight_.erase(in_flight_.begin(), in_flight_.begin() + k);
    settle(first, chance(50));
    cov_("held copies settled in parts");
    return;
  }
  auto copies = std::exchange(in_flight_, {});
  settle(copies, chance(50));
}

request_id harness::copier() const {
  // A copy's destination is in its request's table and nowhere else.
  for (auto& c : in_flight_)
    for (auto& [id, seq] : model_.sequences())
      if (std::find(seq.blocks.begin(), seq.blocks.end(), c.dst)
          != seq.blocks.end())
        return id;
  return 0;
}

void harness::end_copier() {
  auto id = copier();
  if (id == 0 || chance(20))
    id = live_id();
  else
    cov_("held copy's request ended");
  switch (below(4)) {
    case 0:
      expect_release("release", core_.release(id), model_.release(id));
      break;
    case 1:
      expect_release("discard", core_.discard(id), model_.discard(id));
      break;
    case 2: {
      bool unindex = chance(50);
      expect_release("preempt", core_.preempt(id, unindex),
                     model_.preempt(id, unindex));
      break;
    }
    default: {
      auto it = model_.sequences().find(id);
      auto cache_id = it == model_.sequences().end() ? 0 : it->second.cache_id;
      expect_release("reclaim", core_.reclaim(id, cache_id),
                     model_.reclaim(id, cache_id));
    }
  }
}

void harness::settle(const std::vector<block_copy>& copies, bool made) {
  std::size_t live = 0; // copies whose request is still there
  for (auto& c : copies)
    for (auto& [id, seq] : model_.sequences())
      live += std::find(seq.blocks.begin(), seq.blocks.end(), c.dst)
              != seq.blocks.end();
  auto want = model_.settle_copies(copies, made);
  auto got = core_.settle_copies(copies, made);
  MODEL_REQUIRE(got == want, where() << "settle_copies(" << str(copies) << ", "
                                     << made << ") undid " << str(got)
                                     << " vs " << str(want));
  if (made) {
    if (live > 0)
      cov_("held copy committed");
    if (live < copies.size())
      cov_("held commit after free");
  } else {
    if (!want.empty())
      cov_("held copy undone");
    if (live < copies.size())
      cov_("held undo after free");
    for (auto id : want)
      if (written_past(id))
        cov_("held undo hands back a block written past");
  }
}

bool harness::written_past(request_id id) const {
  auto& seqs = model_.sequences();
  auto& seq = seqs.at(id);
  auto fill = seq.num_tokens % p_.block_size;
  for (auto& [other, s] : seqs)
    if (other != id && !s.blocks.empty()
        && s.blocks.back() == seq.blocks.back()
        && (s.num_tokens % p_.block_size == 0
            || s.num_tokens % p_.block_size > fill))
      return true;
  return false;
}

} // namespace kvactor::test::block_pool_model
