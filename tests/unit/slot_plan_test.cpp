// slot_planner (the cuda backend's one pass over a write_slots mapping)
// against a plain reference on seeded random mappings: the distinct blocks
// written, and the last token of each slot as the only writer; the same
// planner reused call after call, at block sizes below, at and above a
// 64-bit word; and a plan cut short by a failed allocation, which must not
// spoil the next (this file replaces operator new for unit_tests to fail
// one on demand).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <new>
#include <random>
#include <set>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/device/slot_plan.hpp"

using kvactor::block_id;
using kvactor::detail::slot_planner;

// -- failing allocations on demand (this thread only) --------------------------

namespace {
thread_local bool fail_allocations = false;

void* test_new(std::size_t n) {
  void* p = fail_allocations ? nullptr : std::malloc(n == 0 ? 1 : n);
  if (p == nullptr)
    throw std::bad_alloc{};
  return p;
}
} // namespace

// Every replaceable non-aligned form, so that new and delete stay paired.
void* operator new(std::size_t n) {
  return test_new(n);
}
void* operator new[](std::size_t n) {
  return test_new(n);
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return test_new(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return test_new(n);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}

namespace {

/// What plan() must give: each slot written by its last token only.
std::vector<std::int64_t> last_writers(const std::vector<std::int64_t>& slots) {
  std::map<std::int64_t, std::size_t> last;
  for (std::size_t i = 0; i < slots.size(); ++i)
    if (slots[i] >= 0)
      last[slots[i]] = i;
  std::vector<std::int64_t> out(slots.size(), -1);
  for (auto& [s, i] : last)
    out[i] = s;
  return out;
}

std::set<block_id> blocks_of(const std::vector<std::int64_t>& slots,
                             std::uint32_t block_size) {
  std::set<block_id> out;
  for (auto s : slots)
    if (s >= 0)
      out.insert(static_cast<block_id>(s / block_size));
  return out;
}

} // namespace

BOOST_AUTO_TEST_SUITE(slot_plan_suite)

BOOST_AUTO_TEST_CASE(a_plan_cut_short_by_a_failed_allocation_spoils_no_later_plan) {
  // A slot's bit set by a plan that then threw would stay set: the next
  // plan (a restarted device actor's, on the same storage) would take the
  // slot for a repeat and launch without its token. Here every allocation
  // fails while a mapping with a repeat is planned, after one without had
  // sized the planner: the plan may throw (before it sets a bit) or need
  // no allocation at all - and either way the next plan is whole.
  slot_planner p{4, 4};
  std::vector<std::int64_t> warm{0, 1};
  p.plan(warm.data(), warm.size());
  std::vector<std::int64_t> repeat{5, 5}; // needs the copy without repeats
  bool threw = false;
  fail_allocations = true;
  try {
    p.plan(repeat.data(), repeat.size());
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  fail_allocations = false;
  BOOST_TEST(p.same_as_last(repeat.data(), repeat.size()) == !threw);
  std::vector<std::int64_t> fresh{5, 6};
  p.plan(fresh.data(), fresh.size());
  BOOST_TEST(!p.repeats());
  BOOST_TEST(p.mapping(fresh.data()) == fresh.data());
  std::vector<block_id> blocks(p.blocks().begin(), p.blocks().end());
  BOOST_TEST((blocks == std::vector<block_id>{1}));
}

BOOST_AUTO_TEST_CASE(a_mapping_without_repeats_is_launched_as_given) {
  slot_planner p{8, 16};
  std::vector<std::int64_t> slots{3, 4, -1, 17, 100, 5};
  p.plan(slots.data(), slots.size());
  BOOST_TEST(!p.repeats());
  BOOST_TEST(p.mapping(slots.data()) == slots.data());
  std::vector<block_id> blocks(p.blocks().begin(), p.blocks().end());
  std::sort(blocks.begin(), blocks.end());
  BOOST_TEST((blocks == std::vector<block_id>{0, 1, 6}));
}

BOOST_AUTO_TEST_CASE(of_tokens_naming_one_slot_the_last_writes) {
  slot_planner p{4, 4};
  std::vector<std::int64_t> slots{5, 6, 5, -1, 6, 7};
  p.plan(slots.data(), slots.size());
  BOOST_TEST(p.repeats());
  std::vector<std::int64_t> got(p.mapping(slots.data()),
                                p.mapping(slots.data()) + slots.size());
  BOOST_TEST((got == std::vector<std::int64_t>{-1, -1, 5, -1, 6, 7}));
  BOOST_TEST(p.blocks().size() == 1u);
  BOOST_TEST(*p.blocks().begin() == 1u);
  // The marks were cleared: the same slots once each are no repeat.
  std::vector<std::int64_t> once{5, 6, 7};
  p.plan(once.data(), once.size());
  BOOST_TEST(!p.repeats());
  p.plan(nullptr, 0);
  BOOST_TEST(p.blocks().size() == 0u);
}

BOOST_AUTO_TEST_CASE(the_same_mapping_again_is_recognised) {
  slot_planner p{8, 16};
  std::vector<std::int64_t> a{3, 40, -1, 17, 100};
  BOOST_TEST(!p.same_as_last(a.data(), a.size())); // nothing planned yet
  BOOST_TEST(!p.same_as_last(nullptr, 0));
  BOOST_TEST(p.plans() == 0u);
  p.plan(a.data(), a.size());
  BOOST_TEST(p.plans() == 1u); // what the storage's reuse of a plan checks
  auto copy = a; // equal contents in another buffer
  BOOST_TEST(p.same_as_last(copy.data(), copy.size()));
  copy[4] = 101;
  BOOST_TEST(!p.same_as_last(copy.data(), copy.size()));
  BOOST_TEST(!p.same_as_last(a.data(), a.size() - 1)); // a prefix
  // The caller's buffer changed after the plan: compared with the copy.
  a[0] = 4;
  BOOST_TEST(!p.same_as_last(a.data(), a.size()));
  p.plan(nullptr, 0);
  BOOST_TEST(p.plans() == 2u);
  BOOST_TEST(p.same_as_last(nullptr, 0));
  BOOST_TEST(!p.same_as_last(copy.data(), copy.size()));
}

BOOST_AUTO_TEST_CASE(random_mappings_match_the_reference) {
  std::mt19937_64 rng{20261130};
  for (std::uint32_t bs : {1u, 4u, 16u, 64u, 128u}) {
    const std::uint32_t num_blocks = 37;
    const std::int64_t num_slots = std::int64_t{num_blocks} * bs;
    slot_planner p{num_blocks, bs};
    int with_repeats = 0;
    for (int round = 0; round < 300; ++round) {
      // Decode-like (scattered), prefill-like (runs) or tightly packed
      // (many repeats) mappings, with some skipped tokens.
      std::vector<std::int64_t> slots(1 + rng() % 200);
      auto kind = rng() % 3;
      std::int64_t next = static_cast<std::int64_t>(rng() % num_slots);
      for (auto& s : slots) {
        if (rng() % 10 == 0)
          s = -1;
        else if (kind == 0)
          s = static_cast<std::int64_t>(rng() % num_slots);
        else if (kind == 1)
          s = next++ % num_slots;
        else
          s = static_cast<std::int64_t>(rng() % std::min<std::int64_t>(num_slots, 24));
      }
      p.plan(slots.data(), slots.size());
      auto want = last_writers(slots);
      bool repeated = want != slots;
      with_repeats += repeated;
      BOOST_TEST(p.repeats() == repeated);
      std::vector<std::int64_t> got(p.mapping(slots.data()),
                                    p.mapping(slots.data()) + slots.size());
      BOOST_TEST(got == want);
      auto blocks = p.blocks();
      std::set<block_id> distinct(blocks.begin(), blocks.end());
      BOOST_TEST(distinct.size() == blocks.size()); // each once
      BOOST_TEST((distinct == blocks_of(slots, bs)));
    }
    BOOST_TEST(with_repeats > 50); // both paths ran
  }
}

BOOST_AUTO_TEST_SUITE_END()
