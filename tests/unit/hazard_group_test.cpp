// hazard_tracker's write groups (hazards.hpp): a forward pass's per-layer
// writes of the same blocks renew one group instead of touching every
// block's entry. The groups must order work exactly as per-block notes do:
// checked against a tracker used block by block, on seeded random sequences.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kvactor/device/hazards.hpp"

using namespace kvactor;
using waits = detail::hazard_tracker::waits;

BOOST_AUTO_TEST_SUITE(hazard_group_suite)

BOOST_AUTO_TEST_CASE(a_group_is_pending_until_any_other_call) {
  detail::hazard_tracker hz{8, 3};
  const std::vector<block_id> blocks{1, 4, 6};
  hz.note_writes(blocks.data(), blocks.size(), 0, 5);
  BOOST_TEST(hz.writes_pending(0));
  BOOST_TEST(!hz.writes_pending(1)); // another stream's write must wait
  hz.renew_writes(6);
  hz.renew_writes(7);
  BOOST_TEST(hz.writes_pending(0));
  waits w{};
  hz.need_read(4, 2, w); // applies the group: the newest write is 7
  BOOST_TEST(w[0] == 7u);
  BOOST_TEST(!hz.writes_pending(0));
  hz.note_read(4, 2, 8);
  w = {};
  hz.need_write(4, 0, w); // write-after-read of the read just noted
  BOOST_TEST(w[2] == 8u);
  w = {};
  hz.need_read(2, 1, w); // not in the group: never written
  BOOST_TEST((w == waits{}));
  // A new group replaces the old one once the old one is applied.
  hz.note_writes(blocks.data(), 2, 1, 9);
  w = {};
  hz.need_write(6, 2, w); // 6 left the group: its last write is still 7
  BOOST_TEST(w[0] == 7u);
  BOOST_TEST(w[1] == 0u);
  w = {};
  hz.need_write(1, 2, w);
  BOOST_TEST(w[1] == 9u);
}

BOOST_AUTO_TEST_CASE(an_empty_group_records_nothing) {
  detail::hazard_tracker hz{4, 2};
  hz.note_write(3, 1, 2);
  hz.note_writes(nullptr, 0, 0, 3);
  BOOST_TEST(hz.writes_pending(0));
  hz.renew_writes(4);
  waits w{};
  hz.need_read(3, 0, w);
  BOOST_TEST(w[1] == 2u);
  BOOST_TEST(w[0] == 0u);
}

BOOST_AUTO_TEST_CASE(groups_order_work_as_per_block_notes_do) {
  // Two trackers see the same seeded random ops: `eager` notes every block,
  // `grouped` records batch writes as groups and, for a batch that writes
  // the group's blocks again on its stream right after it (the next layer),
  // takes the shortcut: no waits, renew_writes. Every op must get the same
  // waits from both, and at the end every block the same state.
  constexpr std::size_t num_streams = 3, num_blocks = 12, num_ops = 400;
  std::mt19937_64 rng{20261204};
  std::size_t shortcuts = 0;
  for (int run = 0; run < 30; ++run) {
    detail::hazard_tracker eager{num_blocks, num_streams};
    detail::hazard_tracker grouped{num_blocks, num_streams};
    std::vector<block_id> batch; // the last batch's blocks
    std::size_t batch_stream = 0;
    for (std::size_t j = 0; j < num_ops; ++j) {
      const ticket t = j + 1;
      const auto kind = rng() % 3;
      waits we{}, wg{};
      if (kind == 0 && !batch.empty() && rng() % 4 != 0) {
        // The same blocks again, mostly on the same stream.
        const auto s = rng() % 4 == 0 ? rng() % num_streams : batch_stream;
        for (auto b : batch)
          eager.need_write(b, s, we);
        for (auto b : batch)
          eager.note_write(b, s, t);
        if (grouped.writes_pending(s) && s == batch_stream) {
          ++shortcuts;
          grouped.renew_writes(t);
        } else {
          for (auto b : batch)
            grouped.need_write(b, s, wg);
          grouped.note_writes(batch.data(), batch.size(), s, t);
        }
        batch_stream = s;
      } else if (kind == 0) {
        // A new batch: distinct random blocks (possibly none).
        std::vector<block_id> all(num_blocks);
        std::iota(all.begin(), all.end(), block_id{0});
        std::shuffle(all.begin(), all.end(), rng);
        all.resize(rng() % (num_blocks / 2 + 1));
        batch = all;
        batch_stream = rng() % num_streams;
        for (auto b : batch) {
          eager.need_write(b, batch_stream, we);
          grouped.need_write(b, batch_stream, wg);
        }
        for (auto b : batch)
          eager.note_write(b, batch_stream, t);
        grouped.note_writes(batch.data(), batch.size(), batch_stream, t);
      } else {
        // Another op: reads and writes of random blocks, block by block.
        const auto s = rng() % num_streams;
        std::vector<int> what(num_blocks);
        for (auto& x : what)
          x = static_cast<int>(rng() % 4); // 0 read, 1 write, else none
        for (std::size_t b = 0; b < num_blocks; ++b) {
          const auto id = static_cast<block_id>(b);
          if (what[b] == 0) {
            eager.need_read(id, s, we);
            grouped.need_read(id, s, wg);
          } else if (what[b] == 1) {
            eager.need_write(id, s, we);
            grouped.need_write(id, s, wg);
          }
        }
        for (std::size_t b = 0; b < num_blocks; ++b) {
          const auto id = static_cast<block_id>(b);
          if (what[b] == 0) {
            eager.note_read(id, s, t);
            grouped.note_read(id, s, t);
          } else if (what[b] == 1) {
            eager.note_write(id, s, t);
            grouped.note_write(id, s, t);
          }
        }
      }
      if (we != wg)
        BOOST_FAIL("run " << run << ", op " << j << " (kind " << kind
                          << "): the group's waits differ from per-block ones");
    }
    for (std::size_t b = 0; b < num_blocks; ++b)
      for (std::size_t s = 0; s < num_streams; ++s) {
        waits re{}, rg{}, xe{}, xg{};
        const auto id = static_cast<block_id>(b);
        eager.need_read(id, s, re);
        grouped.need_read(id, s, rg);
        eager.need_write(id, s, xe);
        grouped.need_write(id, s, xg);
        BOOST_TEST((re == rg));
        BOOST_TEST((xe == xg));
      }
  }
  BOOST_TEST(shortcuts > 500u); // the shortcut itself was exercised
}

BOOST_AUTO_TEST_SUITE_END()
