// core_driver: the scheduler's step loop over a block_pool_core, with the
// checks of every message and reply.
#include "core_driver.hpp"

#include <algorithm>
#include <unordered_set>

#include <boost/test/unit_test.hpp>

#include "kvactor/messages/error.hpp"

namespace kvactor::sim::test {

using detail::residency;

core_driver::core_driver(const scenario& s, std::uint64_t chaos_seed,
                         double supervisor_rate, std::size_t series_cap)
  : s_(s),
    cfg_(s.cache),
    core_(cfg_, static_cast<std::uint32_t>(cfg_.num_gpu_blocks)),
    b_(s, cfg_, kvactor::device{}, true, series_cap),
    rng_(chaos_seed),
    supervisor_rate_(supervisor_rate),
    device_kv_(cfg_.num_gpu_blocks * cfg_.block_size),
    host_kv_(cfg_.num_host_blocks * cfg_.block_size) {
}

void core_driver::copy_block(const std::vector<kv_row>& from, block_id src,
                             std::vector<kv_row>& to, block_id dst) {
  auto bs = cfg_.block_size;
  std::copy_n(from.begin() + std::uint64_t{src} * bs, bs,
              to.begin() + std::uint64_t{dst} * bs);
}

bool core_driver::mid_prefill(request_id id) const {
  auto seq = core_.find(id);
  auto len = prompt_len_.find(id);
  return seq != nullptr && len != prompt_len_.end()
         && seq->num_tokens < len->second;
}

void core_driver::write_computed() {
  for (auto& t : b_.computed()) {
    BOOST_REQUIRE(t.slot >= 0 && std::uint64_t(t.slot) < device_kv_.size());
    device_kv_[t.slot] = kv_row{t.token, t.position, true};
  }
  b_.clear_computed();
}

void core_driver::check_invariant(const char* where) {
  auto err = core_.check_invariant();
  if (err)
    BOOST_FAIL("step " << b_.step() << ", " << where << ": " << render(err));
}

void core_driver::maybe_supervise() {
  if (supervisor_rate_ <= 0
      || !std::bernoulli_distribution{supervisor_rate_}(rng_))
    return;
  auto want = std::uniform_int_distribution<std::uint64_t>{1, 4}(rng_);
  for (auto id : core_.choose_victims(want)) {
    auto seq = core_.find(id);
    BOOST_REQUIRE(seq != nullptr);
    auto cache_id = seq->cache_id;
    left_with_drafts_ += seq->drafts > 0;
    BOOST_REQUIRE(core_.preempt(id));
    supervisor_victims_.insert(id);
    // The pool names it in the reply to the scheduler's next step (ended);
    // the manager's notice comes before or after that reply.
    owed_.push_back(request_ended{id, cache_id, end_reason::preempted, 0});
    if (std::bernoulli_distribution{0.5}(rng_))
      b_.preempted_elsewhere(id, cache_id);
    else
      late_.emplace_back(id, cache_id);
  }
  check_invariant("supervisor preemption");
}

void core_driver::check_request(const step_request& req) {
  BOOST_TEST(req.admits.size() <= s_.max_admits_per_step);
  std::unordered_set<request_id> frees(req.frees.begin(), req.frees.end());
  BOOST_TEST(frees.size() == req.frees.size(), "a request freed twice");
  std::unordered_set<request_id> extends;
  for (auto& op : req.extends) {
    BOOST_TEST(extends.insert(op.id).second, "request " << op.id << " extended twice");
    BOOST_TEST(frees.count(op.id) == 0u, "request " << op.id << " freed and extended");
    auto seq = core_.find(op.id);
    // Running means resident, unless the supervisor took it meanwhile.
    BOOST_TEST(((seq != nullptr && seq->where == residency::resident)
                || supervisor_victims_.count(op.id) > 0),
               "extend of request " << op.id << ", which the pool does not run");
  }
  // Token ids for every extend (a prompt chunk's or a decoded token and its
  // drafts), so that full blocks enter the prefix index as they are
  // computed.
  std::uint64_t extended = 0;
  for (auto& op : req.extends) {
    extended += op.num_tokens;
    BOOST_TEST(op.num_tokens >= 1u);
    BOOST_TEST(op.num_tokens <= std::max<std::uint64_t>(1 + s_.draft_tokens,
                                                        s_.prefill_chunk));
    // Drafts follow a decoded token, never a chunk of a prompt.
    BOOST_TEST(op.num_draft <= s_.draft_tokens);
    BOOST_TEST((op.num_draft == 0 || op.num_tokens == op.num_draft + 1),
               "request " << op.id << ": " << op.num_draft << " drafts in "
                          << op.num_tokens << " tokens");
  }
  BOOST_TEST(req.tokens.size() == extended);
  // A verdict per request the pool holds drafts of, in the message of its
  // next extend (or of its free, finished), and none for any other: for
  // the drafts it holds, unless the supervisor took it meanwhile.
  std::unordered_set<request_id> verdicts;
  for (auto& v : req.verdicts) {
    BOOST_TEST(verdicts.insert(v.id).second, "two verdicts for request " << v.id);
    BOOST_TEST(extends.count(v.id) + frees.count(v.id) == 1u,
               "verdict for request " << v.id << " without its extend or free");
    auto seq = core_.find(v.id);
    BOOST_TEST(((seq != nullptr && seq->where == residency::resident
                 && seq->drafts > 0 && v.accepted <= seq->drafts)
                || supervisor_victims_.count(v.id) > 0),
               "verdict (" << v.accepted << " accepted) for request " << v.id
                           << ", whose drafts the pool does not hold");
  }
  for (auto id : extends) {
    auto seq = core_.find(id);
    if (seq != nullptr && seq->drafts > 0)
      BOOST_TEST(verdicts.count(id) == 1u,
                 "extend of request " << id << " with drafts unsettled");
  }
  std::unordered_set<request_id> admits;
  for (auto& a : req.admits) {
    BOOST_TEST(admits.insert(a.id).second, "request " << a.id << " admitted twice");
    // A waiting request holds nothing in the pool: it is not also running,
    // swapped or about to be freed.
    BOOST_TEST(core_.find(a.id) == nullptr,
               "admission of request " << a.id << ", which the pool holds");
    BOOST_TEST(frees.count(a.id) == 0u);
    BOOST_TEST(extends.count(a.id) == 0u);
    BOOST_TEST(a.initial_tokens == a.prompt.size());
    BOOST_TEST(a.prefill_chunk == s_.prefill_chunk);
  }
}

bool core_driver::send(const step_request& req, bool first) {
  check_request(req);
  if (first)
    maybe_supervise(); // while the message is on its way
  std::unordered_set<request_id> prefilling;
  for (auto& op : req.extends)
    if (mid_prefill(op.id))
      prefilling.insert(op.id);
  std::unordered_set<request_id> settled;
  for (auto& v : req.verdicts)
    settled.insert(v.id);
  for (auto id : req.frees)
    if (auto seq = core_.find(id); seq != nullptr && seq->drafts > 0)
      left_with_drafts_ += settled.count(id) == 0;
  auto res = core_.run_step(req, false);
  for (auto id : res.preempted)
    preempted_mid_prefill_ += prefilling.count(id);
  for (auto& a : req.admits)
    prompt_len_[a.id] = a.prompt.size();
  res.ended = std::move(owed_); // as the pool's ledger reports them
  owed_.clear();
  ++messages_;
  check_invariant("step message");
  for (auto& c : res.copies) // made before the reply, before the writes
    copy_block(device_kv_, c.src, device_kv_, c.dst);
  BOOST_TEST(res.free_blocks == core_.free_blocks());
  auto more = b_.apply(res);
  if (!more)
    BOOST_FAIL("apply: " << render(more.error()));
  for (auto& [id, cache_id] : late_) // the manager's notices, after the reply
    b_.preempted_elsewhere(id, cache_id);
  late_.clear();
  return *more;
}

void core_driver::swap_phase() {
  if (s_.preemption != preemption_mode::swap)
    return;
  maybe_supervise();
  auto victims = b_.swap_victims();
  for (auto id : victims) {
    auto seq = core_.find(id);
    BOOST_TEST(((seq != nullptr && seq->where == residency::resident)
                || supervisor_victims_.count(id) > 0),
               "swap out of request " << id << ", which the pool does not run");
    // The manager: reserve host blocks, the device copies, commit.
    auto prefilling = mid_prefill(id);
    auto with_drafts = seq != nullptr && seq->drafts > 0;
    auto moves = core_.swap_out_begin(id);
    if (!moves) {
      ++swap_out_failures_;
      swap_outs_of_preempted_ += has_code(moves.error(), errc::unknown_request);
      auto err = b_.swap_out_failed(id, moves.error());
      if (err)
        BOOST_FAIL("swap_out_failed: " << render(err));
      continue;
    }
    for (auto& m : *moves)
      copy_block(device_kv_, m.device_block, host_kv_, m.host_block);
    BOOST_REQUIRE(core_.swap_out_done(id, core_.find(id)->cache_id, true));
    swapped_mid_prefill_ += prefilling;
    swapped_with_drafts_ += with_drafts;
    check_invariant("swap out");
    b_.swapped_out(id);
  }
  if (!victims.empty())
    return;
  while (auto id = b_.next_swap_in()) {
    auto seq = core_.find(*id);
    BOOST_TEST(((seq != nullptr && seq->where == residency::swapped)
                || supervisor_victims_.count(*id) > 0),
               "swap in of request " << *id << ", which the pool has not swapped");
    auto moves = core_.swap_in_begin(*id);
    if (!moves) {
      auto more = b_.swap_in_failed(*id, moves.error());
      if (!more)
        BOOST_FAIL("swap_in_failed: " << render(more.error()));
      if (!*more)
        break;
      continue;
    }
    for (auto& m : *moves)
      copy_block(host_kv_, m.host_block, device_kv_, m.device_block);
    BOOST_REQUIRE(core_.swap_in_done(*id, core_.find(*id)->cache_id, true));
    check_invariant("swap in");
    b_.swapped_in(*id, core_.table(*core_.find(*id)));
  }
}

void core_driver::check_running() {
  // The first pick applies pending preemption notices and takes the request
  // swapped in last; after it, pick k is running request k.
  b_.pick_verify(0);
  auto n = b_.running();
  BOOST_TEST(n <= s_.max_running);
  peak_running_ = std::max<std::uint64_t>(peak_running_, n);
  std::set<request_id> seen;
  for (std::size_t k = 0; k < n; ++k) {
    auto t = b_.pick_verify(k);
    BOOST_REQUIRE(t);
    BOOST_TEST(seen.insert(t->id).second, "request " << t->id << " runs twice");
    auto owed = std::any_of(owed_.begin(), owed_.end(),
                            [&](auto& e) { return e.id == t->id; });
    if (owed)
      continue; // preempted since the last reply, which could not say so
    auto seq = core_.find(t->id);
    BOOST_REQUIRE_MESSAGE(seq != nullptr && seq->where == residency::resident,
                          "step " << b_.step() << ": request " << t->id
                                  << " runs but the pool does not hold it");
    auto want = core_.table(*seq);
    BOOST_TEST(t->table.blocks == want.blocks, "request " << t->id);
    BOOST_TEST(t->table.num_tokens == want.num_tokens, "request " << t->id);
    BOOST_TEST(t->tokens.size() == t->table.num_tokens);
    // What the read-back of a run that holds bytes compares.
    std::uint64_t wrong = 0;
    std::uint64_t first = 0;
    for (std::uint64_t pos = 0; pos < t->tokens.size(); ++pos) {
      auto& row = device_kv_[t->table.slot(pos)];
      if (!row.written || row.token != t->tokens[pos] || row.pos != pos)
        if (wrong++ == 0)
          first = pos;
    }
    kv_checked_ += t->tokens.size();
    kv_wrong_ += wrong;
    BOOST_TEST(wrong == 0u, "step " << b_.step() << ": request " << t->id
                                    << ": " << wrong << " of "
                                    << t->tokens.size()
                                    << " slots hold other K/V, the first at "
                                    << first);
  }
}

cache_manager_stats core_driver::stats() const {
  cache_manager_stats st;
  st.total_blocks = core_.num_blocks();
  st.free_blocks = core_.free_blocks();
  st.cached_blocks = core_.cached_blocks();
  st.draft_tokens = core_.counters().draft_tokens;
  st.draft_tokens_rejected = core_.counters().drafts_rejected;
  for (auto& t : core_.tenants()) {
    tenant_usage u;
    u.name = t.config.name;
    u.blocks_used = t.used;
    st.tenants.push_back(std::move(u));
  }
  return st;
}

void core_driver::step() {
  maybe_supervise();
  b_.start_step();
  auto req = b_.begin_step();
  for (bool first = true; send(req, first); first = false) {
    req = b_.more_admits();
    if (req.admits.empty())
      break;
  }
  write_computed(); // before a swap out moves the bytes
  swap_phase();
  check_running();
  b_.record(stats(), memory_pressure::low);
  b_.end_step();
  // Requests in flight: arrived, neither finished nor rejected.
  std::uint64_t left = 0;
  for (auto& f : b_.figures())
    left += f.arrived - f.finished - f.rejected;
  BOOST_TEST(b_.waiting() + b_.running() + b_.swapped() <= left);
}

bool core_driver::run(std::uint64_t max_steps) {
  for (std::uint64_t i = 0; i < max_steps && !b_.done(); ++i) {
    if (skip_min_gap_ > 0) {
      while (b_.skip_idle(skip_min_gap_, 1u << 16) > 0) {
      }
      if (b_.done())
        break;
    }
    step();
    BOOST_REQUIRE_MESSAGE(b_.stalled_steps() < 100,
                          "stalled at step " << b_.step() << ": " << b_.waiting()
                                             << " waiting");
  }
  return b_.done();
}

} // namespace kvactor::sim::test
