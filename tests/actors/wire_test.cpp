// The protocol on the wire: one message of each shape the interfaces send or
// reply with goes through CAF's binary serializer and back intact (what a
// remote peer relies on; tests/remote crosses a real connection).
#include "fixture.hpp"

#include <caf/all.hpp>

using namespace kvactor;
using namespace kvactor::test;

namespace {

/// One message of each shape the interfaces send or reply with.
std::vector<std::pair<std::string, caf::message>>
protocol_messages(cache_fixture& f, const request_handle_actor& h) {
  auto req = make_prompt_request(f.cfg, 7, make_tokens(6, 1));
  req.tenant = "b";
  req.priority = priority::high;
  req.expected_output_tokens = 300;
  req.prefill_chunk = 5;
  req.cache_salt = 0xfeed;
  block_table table{{3, 1, 4}, 10, 4};
  request_info info{42, true, make_request(f.cfg, 7, 10)};
  step_request step;
  step.frees = {1, 2};
  step.extends = {extend_op{3, 4, 2}};
  step.tokens = {5, 6, 7, 8};
  step.verdicts = {draft_verdict{9, 1}};
  step.discards = {10};
  step.earlier_steps_written = true;
  step.admits = {req};
  step.admit_after_preemption = true;
  step_result res;
  res.freed = {1};
  res.changed = {table_delta{3, 1, {9}, 8}};
  res.copies = {block_copy{1, 9}};
  res.preempted = {4};
  res.admitted = {admission{7, 43, 4, table}};
  res.failed = {op_failure{5, make_error(errc::out_of_blocks, "need 4")}};
  res.blocked = 6;
  res.admission_blocked = true;
  res.ended = {request_ended{8, 44, end_reason::preempted, 2}};
  cache_manager_stats ms;
  ms.total_blocks = 64;
  ms.cache_hit_rate = 0.25;
  ms.tenants = {tenant_usage{"b", 3, 10, 2, 1, 12, 4, 1, 0}};
  pool_stats ps;
  ps.used_blocks = 5;
  ps.draft_tokens = 6;
  ps.draft_tokens_rejected = 2;
  ms.draft_tokens = 6;
  ms.draft_tokens_rejected = 2;
  ps.draining_blocks = 3;
  ms.draining_blocks = 3;
  ps.tenants = ms.tenants;
  kv_event_batch kv{3, 4, {kv_event{true, 11, 0, 2, "b", {1, 2, 3, 4}}}, 1.5e9};
  slot_write w{1, {0, -1}, std::vector<std::uint8_t>(64, 1),
               std::vector<std::uint8_t>(64, 2)};
  gathered_kv g{0, 2, std::vector<std::uint8_t>(64, 3),
                std::vector<std::uint8_t>(64, 4)};
  using m = std::pair<std::string, caf::message>;
  return {
    m{"allocate", caf::make_message(allocate_atom::value, req)},
    m{"allocate reply", caf::make_message(h, table)},
    m{"allocate naming its incarnation",
      caf::make_message(allocate_atom::value, req, info_atom::value)},
    m{"its reply", caf::make_message(h, info)},
    m{"extend", caf::make_message(extend_atom::value, request_id{7}, std::uint64_t{3})},
    m{"append", caf::make_message(append_atom::value, request_id{7}, std::vector<token_id>{1, 2})},
    m{"pool extend", caf::make_message(extend_atom::value, request_id{7}, std::uint64_t{42},
                                       std::uint64_t{2}, std::vector<token_id>{1, 2})},
    m{"drafts", caf::make_message(draft_atom::value, request_id{7}, std::uint64_t{2},
                                  std::vector<token_id>{1, 2}, std::uint32_t{1})},
    m{"verdict", caf::make_message(settle_atom::value, request_id{7}, std::uint32_t{1})},
    m{"discard", caf::make_message(discard_atom::value, request_id{7})},
    m{"pool discard", caf::make_message(discard_atom::value, request_id{7}, std::uint64_t{42})},
    m{"pool extend reply", caf::make_message(extension{table, {block_copy{1, 2}}})},
    m{"fork", caf::make_message(fork_atom::value, request_id{1}, request_id{2})},
    m{"step", caf::make_message(step_atom::value, step)},
    m{"step reply", caf::make_message(res)},
    m{"step lane", caf::make_message(step_atom::value)},
    m{"step lane reply", caf::make_message(step_actor{f.pool})},
    m{"step effects", caf::make_message(step_atom::value,
                                        step_effects{{1}, {4}, {without_prompt(req)}, {43}, {2}, {5}},
                                        caf::actor_cast<caf::actor>(f.self))},
    m{"registry", caf::make_message(registry_atom::value,
                                    caf::actor_cast<caf::actor>(f.mgr),
                                    storage_info{"host", device{}, 64, 8, 512})},
    m{"manager stats", caf::make_message(ms)},
    m{"pool stats", caf::make_message(ps)},
    m{"handle stats", caf::make_message(cache_handle_stats{1024, 2, 7, 0.875, 99})},
    m{"gc reply", caf::make_message(cache_gc_stats{1024, 1, 2, 0.5})},
    m{"lookup reply", caf::make_message(h, info)},
    m{"list reply", caf::make_message(std::vector<handle_entry>{handle_entry{7, h, info}})},
    m{"subscribe", caf::make_message(subscribe_atom::value, topic::lifecycle,
                                     caf::actor_cast<caf::actor>(f.self))},
    m{"pressure event", caf::make_message(pressure_atom::value,
                                          pressure_event{memory_pressure::high,
                                                         memory_pressure::medium, 52, 64})},
    m{"level", caf::make_message(memory_pressure::critical)},
    m{"ended", caf::make_message(ended_atom::value,
                                 request_ended{7, 42, end_reason::reclaimed, 3})},
    m{"end", caf::make_message(end_atom::value, end_reason::preempted)},
    m{"kv events", caf::make_message(kv_event_atom::value, kv)},
    m{"usage", caf::make_message(usage_atom::value, pool_usage{50, 4, 64})},
    m{"reclaim reply", caf::make_message(true, std::uint32_t{3})},
    m{"live list", caf::make_message(std::vector<std::pair<request_id, std::uint64_t>>{{7, 42}})},
    m{"victims", caf::make_message(std::vector<request_id>{4, 5})},
    m{"index", caf::make_message(std::vector<std::pair<std::uint64_t, block_id>>{{11, 2}})},
    m{"copy", caf::make_message(copy_atom::value, std::vector<block_copy>{{1, 2}})},
    m{"swap out", caf::make_message(swap_out_atom::value, std::vector<block_move>{{1, 0}})},
    m{"swap out settled", caf::make_message(swap_out_atom::value, settle_atom::value,
                                            std::vector<block_id>{1, 2})},
    m{"pool swap reply", caf::make_message(std::vector<block_move>{{1, 0}})},
    m{"write", caf::make_message(write_atom::value, w)},
    m{"gather", caf::make_message(gather_atom::value, std::uint32_t{0},
                                  std::vector<block_id>{1, 2}, std::uint64_t{5})},
    m{"gather reply", caf::make_message(g)},
    m{"device info", caf::make_message(storage_info{"host", device{}, 64, 8, 512})},
    m{"pin", caf::make_message(pin_atom::value, std::string{"b"},
                               std::vector<token_id>{1, 2, 3, 4}, std::uint64_t{1000},
                               std::uint64_t{7})},
    m{"unpin", caf::make_message(unpin_atom::value, std::string{"b"},
                                 std::vector<token_id>{1, 2, 3, 4}, std::uint64_t{7})},
    m{"error", caf::make_message(make_error(errc::quota_exceeded, "tenant 'b'"))},
  };
}

} // namespace

BOOST_FIXTURE_TEST_CASE(every_message_of_the_protocol_crosses_a_serializer_intact,
                        cache_fixture) {
  auto a = allocate(1, 4);
  BOOST_REQUIRE(a);
  for (auto& [what, msg] : protocol_messages(*this, a->handle)) {
    BOOST_TEST_CONTEXT(what) {
      std::vector<char> buf;
      caf::binary_serializer sink{sys, buf};
      auto err = sink(msg);
      BOOST_TEST(!err, "serialize: " << render(err));
      if (err)
        continue;
      caf::message out;
      caf::binary_deserializer source{sys, buf};
      err = source(out);
      BOOST_TEST(!err, "deserialize: " << render(err));
      BOOST_TEST(caf::to_string(out) == caf::to_string(msg));
      BOOST_TEST(out.size() == msg.size());
    }
  }
}
