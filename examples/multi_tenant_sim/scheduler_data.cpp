// scheduler: the K/V bytes of a run on storage that holds them - each
// step's computed tokens written through the device actor (one message per
// layer), and every verify_every steps one running request read back and
// compared with what was written for its tokens.
#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "kvactor/messages/error.hpp"
#include "scheduler_actor.hpp"

namespace kvactor::sim::sched {

namespace {

/// One layer's K (kind 0) or V (kind 1) row of a token: a function of the
/// token and its position only, so a read-back can check it and a shared
/// prefix block holds the same bytes whichever request computed it.
void fill_row(std::uint8_t* out, std::size_t row, token_id token,
              std::uint32_t pos, std::uint32_t layer, std::uint32_t kind) {
  auto h = static_cast<std::uint32_t>(token) * 2654435761u ^ pos * 40503u
           ^ layer * 0x9e3779b9u ^ (kind + 1) * 0x85ebca6bu;
  for (std::size_t j = 0; j < row; ++j)
    out[j] = static_cast<std::uint8_t>((h >> (8 * (j & 3))) + j);
}

/// Reads back `t`'s K/V of `layer` from the blocks of `table` (the
/// cache's own) and compares them with what was written for its tokens.
void read_back(sched_actor* self, std::shared_ptr<verify_target> t,
               std::uint32_t layer, const block_table& table) {
  auto& st = self->state;
  self->request(st.dev, reply_timeout, gather_atom::value, layer,
                table.blocks, table.num_tokens)
    .then(
      [self, t, layer](gathered_kv& g) {
        auto& st = self->state;
        auto row = st.row_bytes;
        auto n = t->tokens.size();
        ++st.out->verify_checks;
        std::uint64_t bad = 0;
        std::uint64_t first_bad = 0;
        if (g.keys.size() != n * row || g.values.size() != n * row) {
          bad = n;
        } else {
          std::vector<std::uint8_t> want(row);
          for (std::size_t pos = 0; pos < n; ++pos) {
            bool ok = true;
            for (std::uint32_t kind = 0; kind < 2 && ok; ++kind) {
              fill_row(want.data(), row, t->tokens[pos],
                       static_cast<std::uint32_t>(pos), layer, kind);
              auto& got = kind == 0 ? g.keys : g.values;
              ok = std::memcmp(got.data() + pos * row, want.data(), row) == 0;
            }
            if (!ok && bad++ == 0)
              first_bad = pos;
          }
        }
        if (bad > 0) {
          ++st.out->verify_failures;
          warn(self, "read-back of request " + std::to_string(t->id) + ", layer "
                       + std::to_string(layer) + ": " + std::to_string(bad)
                       + " of " + std::to_string(n)
                       + " tokens differ (first at position "
                       + std::to_string(first_bad) + ")");
        }
        stats_step(self);
      },
      [self](caf::error& err) { finish(self, "reading K/V back: " + render(err)); });
}

} // namespace

/// Every verify_every steps: one running request's K/V of one layer, read
/// back through the device actor, must be what was written for its tokens.
/// From the blocks the pool says the request holds, not the simulator's
/// mirror of its table, which the writes used: a table change the step's
/// reply left out (a copy-on-write move, say) would have the write and the
/// read-back agree on the wrong block. The two tables must agree too.
void verify_step(sched_actor* self) {
  auto& st = self->state;
  auto every = st.sc->verify_every;
  if (!st.write_data || every == 0 || st.b->step() % every != 0)
    return stats_step(self);
  auto target = st.b->pick_verify(st.verifies);
  if (!target || target->table.num_tokens == 0) {
    auto& skips = st.out->verify_skipped;
    ++(target ? skips.no_tokens : skips.nothing_running);
    return stats_step(self);
  }
  auto layer = static_cast<std::uint32_t>(st.verifies % st.num_layers);
  ++st.verifies;
  auto t = std::make_shared<verify_target>(std::move(*target));
  self->request(st.pool, reply_timeout, table_atom::value, t->id, t->cache_id)
    .then(
      [self, t, layer](block_table& table) {
        if (table.num_tokens != t->table.num_tokens
            || table.blocks != t->table.blocks) {
          auto& ours = t->table.blocks;
          auto k = std::mismatch(table.blocks.begin(), table.blocks.end(),
                                 ours.begin(), ours.end())
                     .first
                   - table.blocks.begin();
          self->state.b->inconsistent(
            "request " + std::to_string(t->id) + ": the pool's table ("
            + std::to_string(table.num_blocks()) + " blocks, "
            + std::to_string(table.num_tokens) + " tokens) is not the one "
            "the step replies made (" + std::to_string(t->table.num_blocks())
            + " blocks, " + std::to_string(t->table.num_tokens)
            + " tokens): they differ from block " + std::to_string(k) + " on");
        }
        if (table.num_tokens != t->tokens.size()) {
          // An inconsistency above; no tokens to compare.
          ++self->state.out->verify_skipped.table_disagreed;
          return stats_step(self);
        }
        read_back(self, t, layer, table);
      },
      [self](caf::error& err) {
        // Ended meanwhile (the supervisor preempted it): nothing to read.
        if (has_code(err, errc::invalid_handle)) {
          ++self->state.out->verify_skipped.ended;
          return stats_step(self);
        }
        finish(self, "reading a table to verify: " + render(err));
      });
}

/// Writes the K/V of every token the step computed (prefill and decode),
/// one message per layer, and waits for all of them: the next step's
/// copy-on-write must see these bytes.
void write_step(sched_actor* self) {
  auto& st = self->state;
  auto& toks = st.b->computed();
  if (!st.write_data || toks.empty()) {
    st.b->clear_computed();
    return swap_step(self);
  }
  // One write per slot, the last one named (batcher::computed()): a scatter
  // with duplicate slots has no defined winner on a GPU.
  std::unordered_map<std::int64_t, std::size_t> last;
  last.reserve(toks.size());
  for (std::size_t i = 0; i < toks.size(); ++i)
    last[toks[i].slot] = i;
  std::vector<std::size_t> keep;
  keep.reserve(last.size());
  for (std::size_t i = 0; i < toks.size(); ++i)
    if (last[toks[i].slot] == i)
      keep.push_back(i);
  auto n = keep.size();
  auto row = st.row_bytes;
  auto pending = std::make_shared<std::uint32_t>(st.num_layers);
  auto failed = std::make_shared<bool>(false);
  for (std::uint32_t layer = 0; layer < st.num_layers; ++layer) {
    slot_write w;
    w.layer = layer;
    w.slots.resize(n);
    w.keys.resize(n * row);
    w.values.resize(n * row);
    for (std::size_t i = 0; i < n; ++i) {
      auto& t = toks[keep[i]];
      w.slots[i] = t.slot;
      fill_row(w.keys.data() + i * row, row, t.token, t.position, layer, 0);
      fill_row(w.values.data() + i * row, row, t.token, t.position, layer, 1);
    }
    self->request(st.dev, reply_timeout, write_atom::value, std::move(w))
      .then(
        [self, pending, failed](std::uint32_t) {
          if (--*pending == 0 && !*failed)
            swap_step(self);
        },
        [self, failed](caf::error& err) {
          if (*failed)
            return;
          *failed = true;
          finish(self, "writing K/V: " + render(err));
        });
  }
  st.out->tokens_written += n * st.num_layers;
  st.out->bytes_written += 2 * n * row * st.num_layers;
  st.b->clear_computed();
}

} // namespace kvactor::sim::sched
