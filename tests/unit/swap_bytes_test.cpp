// Swapping, byte for byte: block_pool_core's swap plans carried out by the
// host storage backend, with every resident request's bytes checked after
// each operation - after its blocks were reused by others, and over many
// random cycles in which swap-ins share prefix blocks back from the cache.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/actors/block_pool_core.hpp"
#include "kvactor/device/storage.hpp"
#include "kvactor/messages/error.hpp"
#include "pool_test_support.hpp"

using namespace kvactor;
using namespace kvactor::test;
using kvactor::detail::block_pool_core;
using kvactor::detail::residency;

namespace {

using bytes = std::vector<std::uint8_t>;

/// The pool and a host storage backend of the same geometry, and what each
/// live request's blocks must hold, table position by position.
class byte_harness {
public:
  explicit byte_harness(std::uint64_t seed) : rng_(seed) {
    cfg_.block_size = 4;
    cfg_.model = model_config{2, 2, 8, dtype::fp16};
    cfg_.storage = "none";
    cfg_.tenants = {tenant_config{}};
    cfg_.num_host_blocks = 20;
    storage_options opts;
    opts.kind = "host";
    opts.layout = storage_layout{2, num_blocks, 4, 2, 8, dtype::fp16, 20};
    auto st = make_storage(opts);
    BOOST_REQUIRE_MESSAGE(st, (st ? std::string{} : render(st.error())));
    storage_ = std::move(*st);
    pool_ = std::make_unique<block_pool_core>(cfg_, num_blocks);
  }

  static constexpr std::uint32_t num_blocks = 24;

  block_pool_core& pool() {
    return *pool_;
  }

  bytes random_block() {
    bytes out(storage_->layout().bytes_per_block());
    for (auto& x : out)
      x = static_cast<std::uint8_t>(rng_());
    return out;
  }

  /// Block `b` of layer `layer`'s K (kv 0) or V (kv 1) pool.
  std::uint8_t* at(std::uint32_t layer, std::uint32_t kv, block_id b) {
    auto& l = storage_->layout();
    return static_cast<std::uint8_t*>(storage_->layer_base(layer))
           + (std::size_t{kv} * l.num_blocks + b) * l.block_bytes();
  }

  /// Every layer's K and V of device block `b`, back to back.
  bytes read(block_id b) {
    auto bb = storage_->layout().block_bytes();
    bytes out;
    for (std::uint32_t i = 0; i < 2 * storage_->layout().num_layers; ++i)
      out.insert(out.end(), at(i / 2, i % 2, b), at(i / 2, i % 2, b) + bb);
    return out;
  }

  void write(block_id b, const bytes& data) {
    auto bb = storage_->layout().block_bytes();
    for (std::uint32_t i = 0; i < 2 * storage_->layout().num_layers; ++i)
      std::memcpy(at(i / 2, i % 2, b), data.data() + i * bb, bb);
  }

  /// Allocates `n` tokens for `id` and fills its blocks with random bytes.
  bool allocate(request_id id, std::uint64_t n) {
    auto res = pool().allocate(tokens_req(id, n));
    if (!res)
      return false;
    auto& seq = *pool().find(id);
    auto& want = expect_[id];
    for (auto b : seq.blocks) {
      want.push_back(random_block());
      write(b, want.back());
    }
    return true;
  }

  /// The bytes a model would compute for a full block ending at `end`: a
  /// function of every token before it, as K and V are. Requests that share
  /// a prefix find these bytes in its cached blocks.
  bytes prefix_block(const std::vector<token_id>& prompt, std::size_t end) {
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (std::size_t i = 0; i < end; ++i)
      h = (h ^ static_cast<std::uint32_t>(prompt[i])) * 0x100000001b3ull;
    std::mt19937_64 gen(h);
    bytes out(storage_->layout().bytes_per_block());
    for (auto& x : out)
      x = static_cast<std::uint8_t>(gen());
    return out;
  }

  /// Allocates `id` with `prompt` (prefix hits included) and fills its
  /// blocks: the full ones with their prefix's bytes, the last at random.
  bool allocate_prompt(request_id id, const std::vector<token_id>& prompt) {
    if (!pool().allocate(prompt_req(id, prompt)))
      return false;
    auto& seq = *pool().find(id);
    auto& want = expect_[id];
    auto bs = pool().block_size();
    for (std::size_t i = 0; i < seq.blocks.size(); ++i) {
      auto end = (i + 1) * bs;
      want.push_back(end <= prompt.size() ? prefix_block(prompt, end)
                                          : random_block());
      write(seq.blocks[i], want.back());
    }
    return true;
  }

  /// Grows `id`; copies on write as told and fills the changed blocks anew.
  void extend(request_id id, std::uint64_t n) {
    auto res = pool().extend(id, n, nullptr);
    if (!res)
      return;
    if (!res->copies.empty())
      BOOST_REQUIRE(storage_->copy_blocks(res->copies));
    auto& seq = *pool().find(id);
    auto& want = expect_[id];
    want.resize(seq.blocks.size());
    for (auto i = res->first_changed; i < seq.blocks.size(); ++i) {
      want[i] = random_block();
      write(seq.blocks[i], want[i]);
    }
  }

  void fork(request_id parent, request_id child) {
    if (pool().fork(parent, child))
      expect_[child] = expect_[parent];
  }

  void release(request_id id) {
    if (pool().release(id))
      expect_.erase(id);
  }

  /// Swaps `id` out; the device copy fails (and is not done) unless `ok`.
  bool swap_out(request_id id, bool ok) {
    auto moves = pool().swap_out_begin(id);
    if (!moves)
      return false;
    if (ok)
      BOOST_REQUIRE(storage_->swap_out(*moves));
    BOOST_REQUIRE(pool().swap_out_done(id, pool().find(id)->cache_id, ok));
    return ok;
  }

  bool swap_in(request_id id, bool ok) {
    auto moves = pool().swap_in_begin(id);
    if (!moves)
      return false;
    if (ok)
      BOOST_REQUIRE(storage_->swap_in(*moves));
    else // a failed copy may leave anything behind
      for (auto& m : *moves)
        write(m.device_block, random_block());
    BOOST_REQUIRE(pool().swap_in_done(id, pool().find(id)->cache_id, ok));
    return ok;
  }

  /// Fills every block no request holds with noise, as reuse would; cached
  /// blocks keep their prefix's bytes until evicted.
  void scribble_free_blocks() {
    std::vector<bool> held(num_blocks, false);
    pool().for_each_sequence([&](const detail::sequence& s) {
      for (auto b : s.blocks)
        held[b] = true;
    });
    pool().for_each_indexed([&](std::uint64_t, block_id b) { held[b] = true; });
    for (block_id b = 0; b < num_blocks; ++b)
      if (!held[b])
        write(b, random_block());
  }

  /// Every resident request's blocks hold its bytes.
  void verify(const char* when) {
    BOOST_REQUIRE_MESSAGE(!pool().check_invariant(),
                          when << ": " << render(pool().check_invariant()));
    for (auto& [id, want] : expect_) {
      auto seq = pool().find(id);
      BOOST_REQUIRE(seq != nullptr);
      if (seq->where != residency::resident)
        continue;
      BOOST_REQUIRE(seq->blocks.size() == want.size());
      for (std::size_t i = 0; i < want.size(); ++i)
        BOOST_REQUIRE_MESSAGE(read(seq->blocks[i]) == want[i],
                              when << ": request " << id << " block " << i);
    }
  }

  std::vector<request_id> live(residency where) const {
    std::vector<request_id> out;
    pool_->for_each_sequence([&](const detail::sequence& s) {
      if (s.where == where)
        out.push_back(s.id);
    });
    std::sort(out.begin(), out.end());
    return out;
  }

  std::mt19937_64 rng_;

private:
  cache_config cfg_;
  std::unique_ptr<storage> storage_;
  std::unique_ptr<block_pool_core> pool_;
  std::map<request_id, std::vector<bytes>> expect_;
};

} // namespace

BOOST_AUTO_TEST_SUITE(swap_bytes_suite)

BOOST_AUTO_TEST_CASE(swapped_bytes_come_back_after_their_blocks_were_reused) {
  byte_harness h(7);
  BOOST_REQUIRE(h.allocate(1, 14)); // blocks 0..3
  auto old = h.pool().find(1)->blocks;
  BOOST_REQUIRE(h.swap_out(1, true));
  // Others take the very blocks it had and write over them.
  BOOST_REQUIRE(h.allocate(2, 16));
  auto reused = h.pool().find(2)->blocks;
  std::sort(old.begin(), old.end());
  std::sort(reused.begin(), reused.end());
  BOOST_TEST((old == reused));
  h.scribble_free_blocks();
  h.verify("after reuse");
  BOOST_REQUIRE(h.swap_in(1, true));
  auto now = h.pool().find(1)->blocks;
  for (auto b : now)
    BOOST_TEST(!std::binary_search(old.begin(), old.end(), b));
  h.verify("after swap in");
}

BOOST_AUTO_TEST_CASE(swapped_bytes_survive_many_random_cycles) {
  byte_harness h(2024);
  auto below = [&](std::uint64_t n) { return h.rng_() % n; };
  std::size_t cycles = 0;
  std::size_t failed = 0;
  request_id next = 1;
  for (int op = 0; cycles < 200 && op < 20000; ++op) {
    auto resident = h.live(residency::resident);
    auto swapped = h.live(residency::swapped);
    auto r = below(100);
    if (r < 12) {
      h.allocate(next++, below(20));
    } else if (r < 25) {
      // A prompt on one of three shared prefixes, so that swapped requests
      // share blocks with others and with the cache.
      auto p = run(static_cast<token_id>(1000 * below(3)), 4 + below(8));
      auto tail = run(static_cast<token_id>(5000 + next), below(6));
      p.insert(p.end(), tail.begin(), tail.end());
      h.allocate_prompt(next++, p);
    } else if (r < 40 && !resident.empty()) {
      h.extend(resident[below(resident.size())], 1 + below(6));
    } else if (r < 45 && !resident.empty()) {
      h.fork(resident[below(resident.size())], next++);
    } else if (r < 60 && !resident.empty()) {
      h.release(resident[below(resident.size())]);
    } else if (r < 63 && !swapped.empty()) {
      h.release(swapped[below(swapped.size())]);
    } else if (r < 80 && !resident.empty()) {
      bool ok = below(5) != 0;
      failed += !ok;
      h.swap_out(resident[below(resident.size())], ok);
    } else if (!swapped.empty()) {
      bool ok = below(5) != 0;
      failed += !ok;
      if (h.swap_in(swapped[below(swapped.size())], ok))
        ++cycles;
    }
    h.scribble_free_blocks();
    h.verify("random op");
  }
  BOOST_TEST(cycles == 200u);
  BOOST_TEST(failed > 20u);
  BOOST_TEST_MESSAGE("blocks shared back in: "
                     << h.pool().counters().swap_in_shared);
  BOOST_TEST(h.pool().counters().swap_in_shared > 20u);
}

BOOST_AUTO_TEST_SUITE_END()
