// The batcher at a tenant's quota (recompute mode), replies hand-made: the
// request that gives way is chosen once the step's outcome is applied, so
// neither one that finishes this step nor one the cache itself preempted
// is picked - and a tenant the step already preempted in frees nothing
// more.
#include <vector>

#include "batcher.hpp"
#include "kvactor/messages/error.hpp"
#include "sim_support.hpp"

using namespace kvactor;
using namespace kvactor::sim;
using namespace kvactor::sim::test;

namespace {

/// One tenant with a quota, two requests running, three output tokens.
struct two_running {
  scenario s = parse_ok(R"({
    "cache": {"block_size": 4,
              "model": {"num_layers": 1, "num_kv_heads": 1, "head_dim": 8,
                        "dtype": "fp16"},
              "storage": "none", "num_gpu_blocks": 64,
              "tenants": [{"name": "a", "max_blocks": 16}]},
    "steps": 1, "max_admits_per_step": 2, "max_running": 2,
    "workloads": {"a": {"rate": 6, "prompt_len": 4, "output_len": 3}}
  })");
  batcher b{s, s.cache, device{}, false};
  std::vector<request_id> ids; // oldest first

  two_running() {
    b.start_step();
    auto req = b.begin_step();
    step_result r;
    r.free_blocks = 60;
    block_id next = 0;
    for (auto& a : req.admits) {
      admission ad;
      ad.id = a.id;
      ad.cache_id = a.id;
      ad.table.block_size = 4;
      ad.table.num_tokens = a.prompt.size();
      ad.table.blocks = {next, static_cast<block_id>(next + 1)};
      next += 2;
      r.admitted.push_back(ad);
      ids.push_back(a.id);
    }
    BOOST_REQUIRE(ids.size() == 2u);
    BOOST_REQUIRE(b.apply(r));
    b.end_step();
  }

  /// A step whose reply is `r` (free_blocks filled in).
  void step(step_result r) {
    b.start_step();
    b.begin_step();
    r.free_blocks = 60;
    BOOST_REQUIRE(b.apply(r));
    b.end_step();
  }

  step_request next_step() {
    b.start_step();
    return b.begin_step();
  }

  op_failure at_quota(request_id id) {
    return op_failure{id, make_error(errc::quota_exceeded, "tenant a")};
  }
};

bool has(const std::vector<request_id>& xs, request_id id) {
  return std::find(xs.begin(), xs.end(), id) != xs.end();
}

} // namespace

BOOST_AUTO_TEST_SUITE(batcher_at_quota)

BOOST_AUTO_TEST_CASE(a_request_finishing_this_step_is_not_the_one_to_give_way) {
  two_running t;
  t.step(step_result{}); // both extend
  // Both compute their last token; the older one's extend hits the quota.
  step_result r;
  r.failed = {t.at_quota(t.ids[0])};
  t.step(r);
  auto& f = t.b.figures()[0];
  BOOST_TEST(f.finished == 1u);           // the newer one finished
  BOOST_TEST(f.preempted_by_quota == 1u); // the older one made room
  auto next = t.next_step();
  BOOST_TEST(has(next.frees, t.ids[0]));
  BOOST_TEST(has(next.frees, t.ids[1])); // freed as finished
}

BOOST_AUTO_TEST_CASE(a_tenant_the_cache_preempted_in_frees_nothing_more) {
  two_running t;
  // The older one hits the quota while the cache preempts the newer one.
  step_result r;
  r.failed = {t.at_quota(t.ids[0])};
  r.preempted = {t.ids[1]};
  t.step(r);
  auto& f = t.b.figures()[0];
  BOOST_TEST(f.preempted_in_step == 1u);
  BOOST_TEST(f.preempted_by_quota == 0u);
  BOOST_TEST(t.b.running() == 1u);
  auto next = t.next_step();
  BOOST_TEST(next.frees.empty());
  BOOST_REQUIRE(next.extends.size() == 1u); // the refused one tries again
  BOOST_TEST(next.extends[0].id == t.ids[0]);
}

BOOST_AUTO_TEST_SUITE_END()
