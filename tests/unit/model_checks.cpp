// model_checks.hpp's comparisons of block_pool_core with pool_reference_model.
#include "model_checks.hpp"

#include "kvactor/messages/error.hpp"
#include "pool_test_access.hpp"

namespace kvactor::test {

maybe_errc code_of(const caf::error& err) {
  if (!err)
    return std::nullopt;
  if (err.category() != error_category)
    return errc::invariant_violation;
  return static_cast<errc>(err.code());
}

std::string name(maybe_errc e) {
  return e ? to_string(*e) : "ok";
}

std::string str(const std::vector<block_copy>& xs) {
  std::ostringstream out;
  for (auto& c : xs)
    out << '(' << c.src << "->" << c.dst << ')';
  return out.str();
}

std::string str(const std::vector<block_move>& xs) {
  std::ostringstream out;
  for (auto& m : xs)
    out << '(' << m.device_block << ':' << m.host_block << ')';
  return out.str();
}

namespace {

/// What the core's and the model's step results share, as text; `failed`
/// is already text.
template <class Result>
std::string step_text(const Result& r, const std::string& failed) {
  std::ostringstream out;
  out << "freed " << str(r.freed) << "preempted " << str(r.preempted)
      << "copies " << str(r.copies) << "blocked " << r.admission_blocked << '/'
      << r.blocked << " counts " << r.free_blocks << '/' << r.used_blocks;
  for (auto& d : r.changed)
    out << " delta " << d.id << '@' << d.first << ':' << str(d.blocks)
        << d.num_tokens;
  for (auto& a : r.admitted)
    out << " admitted " << a.id << '/' << a.cache_id << '/' << a.hit_tokens
        << ':' << str(a.table.blocks);
  return out.str() + failed;
}

} // namespace

std::string str(const step_result& r) {
  std::string failed;
  for (auto& f : r.failed)
    failed += " failed " + std::to_string(f.id) + ':' + name(code_of(f.error));
  return step_text(r, failed);
}

std::string str(const model_step_result& r) {
  std::string failed;
  for (auto& f : r.failed)
    failed += " failed " + std::to_string(f.first) + ':' + name(f.second);
  return step_text(r, failed);
}

namespace {

/// What differs between the core's `s` and the model's `m` (same request).
std::string sequence_diff(const detail::block_pool_core& core,
                          const detail::sequence& s, const model_sequence& m) {
  auto bs = core.block_size();
  auto req = [&] { return "request " + std::to_string(s.id) + ": "; };
  std::vector<block_id> blocks(s.blocks.begin(), s.blocks.end());
  if (blocks != m.blocks || s.host_blocks != m.host_blocks
      || s.incoming != m.incoming)
    return req() + "blocks " + str(blocks) + str(s.host_blocks)
           + str(s.incoming) + " vs " + str(m.blocks) + str(m.host_blocks)
           + str(m.incoming);
  if (s.where != m.where || s.release_pending != m.release_pending)
    return req() + "residency";
  if (s.num_tokens != m.num_tokens || s.max_tokens != m.max_tokens
      || s.expected_tokens != m.expected_tokens || s.drafts != m.drafts)
    return req() + "token counts";
  if (s.cache_id != m.cache_id || s.admitted != m.admitted
      || s.tenant != m.tenant || s.priority != m.priority)
    return req() + "cache id, admission, tenant or priority";
  if (s.hit_blocks != m.hit_blocks || s.brought_from != m.brought_from)
    return req() + "hit blocks " + std::to_string(s.hit_blocks) + "/"
           + std::to_string(s.brought_from) + " vs "
           + std::to_string(m.hit_blocks) + "/" + std::to_string(m.brought_from);
  if (s.hashable != m.hashable)
    return req() + "hashable";
  if (s.hashable) {
    auto full = (m.tokens.size() - m.drafts) / bs;
    std::vector<token_id> tail(m.tokens.begin() + full * bs, m.tokens.end());
    if (s.num_hashed != full || s.tail != tail)
      return req() + "hashing state";
  }
  return {};
}

} // namespace

std::string sequences_diff(const detail::block_pool_core& core,
                           const pool_model& model) {
  auto& seqs = model.sequences();
  if (core.num_sequences() != seqs.size())
    return "sequence count " + std::to_string(core.num_sequences()) + " vs "
           + std::to_string(seqs.size());
  auto bs = core.block_size();
  std::string diff;
  core.for_each_sequence([&](const detail::sequence& s) {
    if (!diff.empty())
      return;
    auto it = seqs.find(s.id);
    if (it == seqs.end()) {
      diff = "the core has request " + std::to_string(s.id);
      return;
    }
    auto& m = it->second;
    diff = sequence_diff(core, s, m);
    if (diff.empty() && s.where == detail::residency::resident
        && !(core.table(s) == block_table{m.blocks, m.num_tokens, bs}))
      diff = "request " + std::to_string(s.id) + ": table()";
    if (diff.empty() && core.find(s.id) != &s)
      diff = "request " + std::to_string(s.id) + ": find()";
  });
  if (!diff.empty())
    return diff;
  // Requests released during a swap: same incarnations, same state.
  auto& ghosts = model.ghosts();
  if (core.num_ghosts() != ghosts.size())
    return "ghost count " + std::to_string(core.num_ghosts()) + " vs "
           + std::to_string(ghosts.size());
  core.for_each_ghost([&](const detail::sequence& s) {
    if (!diff.empty())
      return;
    auto it = ghosts.find(s.cache_id);
    if (it == ghosts.end() || it->second.id != s.id) {
      diff = "the core has a ghost of request " + std::to_string(s.id);
      return;
    }
    diff = sequence_diff(core, s, it->second);
    if (diff.empty() && core.find(s.id, s.cache_id) != nullptr)
      diff = "ghost of request " + std::to_string(s.id) + " found live";
  });
  return diff;
}

std::string reservations_diff(const detail::block_pool_core& core,
                              const pool_model& model,
                              std::map<std::string, std::size_t>& cov) {
  std::vector<bool> held(core.num_blocks(), false);
  auto hold = [&](const detail::sequence& s) {
    for (auto b : s.blocks)
      held[b] = true;
    for (auto b : s.incoming)
      held[b] = true;
  };
  core.for_each_sequence(hold);
  core.for_each_ghost(hold);
  std::uint64_t unheld_indexed = 0;
  core.for_each_indexed(
    [&](std::uint64_t, block_id b) { unheld_indexed += !held[b]; });
  auto pinned_cached = unheld_indexed - core.cached_blocks();
  auto takeable = core.free_blocks() - pinned_cached;
  std::uint64_t shortfall = 0;
  for (auto& t : core.tenants())
    if (t.used < t.config.reserved_blocks)
      shortfall += t.config.reserved_blocks - t.used;
  // Draining blocks come free when their drain ends: they count.
  if (takeable + core.draining_blocks() < shortfall)
    return "reservations broken: " + std::to_string(takeable)
           + " takeable and " + std::to_string(core.draining_blocks())
           + " draining blocks for a " + std::to_string(shortfall)
           + " block shortfall";
  if (takeable != model.takeable_blocks() || shortfall != model.shortfall())
    return "takeable or shortfall differs from the model";
  if (shortfall > 0 && takeable == shortfall)
    ++cov["reservation binding"];
  return {};
}

std::string usage_diff(const detail::block_pool_core& core,
                       const pool_model& model) {
  auto c = std::vector<std::uint64_t>{core.used_blocks(), core.cached_blocks(),
                                      core.free_blocks(), core.pinned_blocks(),
                                      core.free_host_blocks(),
                                      core.draining_blocks(), core.num_drains(),
                                      core.copies_in_flight()};
  auto m = std::vector<std::uint64_t>{model.used_blocks(), model.cached_blocks(),
                                      model.free_blocks(), model.pinned_blocks(),
                                      model.free_host_blocks(),
                                      model.draining_blocks(),
                                      model.drains().size(),
                                      model.copies_in_flight()};
  if (c == m)
    return {};
  return "used/cached/free/pinned/host/draining/drains/copies " + str(c)
         + " vs " + str(m);
}

std::string references_diff(detail::block_pool_core& core,
                            const pool_model& model) {
  using access = detail::block_pool_test_access;
  for (block_id b = 0; b < core.num_blocks(); ++b) {
    auto& m = access::meta(core, b);
    if (m.ref_count != model.refs(b) || m.holds != model.holds(b))
      return "block " + std::to_string(b) + ": " + std::to_string(m.ref_count)
             + " references, " + std::to_string(m.holds) + " held, vs "
             + std::to_string(model.refs(b)) + ", "
             + std::to_string(model.holds(b));
  }
  return {};
}

std::string counters_diff(const detail::pool_counters& c,
                          const detail::pool_counters& m) {
  std::ostringstream out;
  auto field = [&](const char* what, std::uint64_t core, std::uint64_t model) {
    if (core != model)
      out << what << ' ' << core << " vs " << model << "; ";
  };
  field("allocations", c.allocations, m.allocations);
  field("allocation_failures", c.allocation_failures, m.allocation_failures);
  field("blocks_allocated", c.blocks_allocated, m.blocks_allocated);
  field("prefix_hit_blocks", c.prefix_hit_blocks, m.prefix_hit_blocks);
  field("blocks_freed", c.blocks_freed, m.blocks_freed);
  field("blocks_cached", c.blocks_cached, m.blocks_cached);
  field("evictions", c.evictions, m.evictions);
  field("cow_copies", c.cow_copies, m.cow_copies);
  field("preemptions", c.preemptions, m.preemptions);
  field("query_tokens", c.query_tokens, m.query_tokens);
  field("hit_tokens", c.hit_tokens, m.hit_tokens);
  field("swap_outs", c.swap_outs, m.swap_outs);
  field("swap_ins", c.swap_ins, m.swap_ins);
  field("swap_in_shared", c.swap_in_shared, m.swap_in_shared);
  field("draft_tokens", c.draft_tokens, m.draft_tokens);
  field("drafts_rejected", c.drafts_rejected, m.drafts_rejected);
  auto s = out.str();
  return s.empty() ? s : "counters: " + s;
}

std::string tenants_diff(const std::vector<detail::tenant_state>& ct,
                         const std::vector<model_tenant>& mt) {
  if (ct.size() != mt.size())
    return "tenant count " + std::to_string(ct.size()) + " vs "
           + std::to_string(mt.size());
  for (std::size_t t = 0; t < ct.size(); ++t) {
    auto& c = ct[t];
    auto& m = mt[t];
    if (c.used != m.used || c.active != m.active
        || c.query_tokens != m.query_tokens || c.hit_tokens != m.hit_tokens
        || c.preemptions != m.preemptions || c.failures != m.failures) {
      std::ostringstream out;
      out << "tenant " << m.config.name << ": used " << c.used << " vs "
          << m.used << ", active " << c.active << " vs " << m.active
          << ", query/hit tokens " << c.query_tokens << '/' << c.hit_tokens
          << " vs " << m.query_tokens << '/' << m.hit_tokens
          << ", preemptions " << c.preemptions << " vs " << m.preemptions
          << ", failures " << c.failures << " vs " << m.failures;
      return out.str();
    }
  }
  return {};
}

std::string state_diff(detail::block_pool_core& core, pool_model& model,
                       event_checker& events,
                       std::map<std::string, std::size_t>& cov) {
  auto d = sequences_diff(core, model);
  if (d.empty())
    d = usage_diff(core, model);
  if (d.empty())
    d = counters_diff(core.counters(), model.counters());
  if (d.empty())
    d = tenants_diff(core.tenants(), model.tenants());
  if (d.empty())
    d = events.check(core, model, cov);
  return d;
}

std::string event_checker::check(detail::block_pool_core& core,
                                 pool_model& model,
                                 std::map<std::string, std::size_t>& cov) {
  auto got = core.take_events();
  auto want = model.take_events();
  std::ostringstream out;
  if (got.size() != want.size()) {
    out << "event count " << got.size() << " vs " << want.size();
    return out.str();
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    auto& g = got[i];
    auto& w = want[i];
    if (g.stored != w.stored || g.block != w.block || g.tenant != w.tenant) {
      out << "event " << i << ": " << g.stored << ' ' << g.block << ' '
          << g.tenant << " vs " << w.stored << ' ' << w.block << ' '
          << w.tenant;
      return out.str();
    }
    auto [it, fresh] = hash_of_.emplace(w.key, g.hash);
    if (it->second != g.hash)
      return "event " + std::to_string(i) + ": a prefix changed its hash";
    if (fresh && !key_of_.emplace(g.hash, w.key).second)
      return "event " + std::to_string(i) + ": two prefixes, one hash";
    auto& toks = w.key.second;
    if (toks.size() == block_size_) {
      if (g.parent_hash != 0)
        return "event " + std::to_string(i) + ": a first block has a parent";
    } else {
      prefix_key parent{w.key.first,
                        std::vector<token_id>(toks.begin(),
                                              toks.end() - block_size_)};
      auto pt = hash_of_.find(parent);
      if (pt != hash_of_.end() && g.parent_hash != pt->second)
        return "event " + std::to_string(i) + ": parent hash";
    }
    if (g.stored) {
      if (replay_.count(g.hash) != 0 || block_hash_.count(g.block) != 0)
        return "stored event " + std::to_string(i)
               + " for an indexed hash or block";
      replay_[g.hash] = g.block;
      block_hash_[g.block] = g.hash;
      ++cov["event:stored"];
    } else {
      auto r = replay_.find(g.hash);
      if (r == replay_.end() || r->second != g.block)
        return "removed event " + std::to_string(i)
               + " for a hash not indexed there";
      replay_.erase(r);
      block_hash_.erase(g.block);
      ++cov["event:removed"];
    }
  }
  // The whole index against the replay when events came, and every 64th
  // call besides (a silent change); its size always. Every call would
  // double the model tests' time.
  if (got.empty() && ++quiet_calls_ % 64 != 0) {
    if (core.index_size() != replay_.size())
      return "index size " + std::to_string(core.index_size()) + " vs "
             + std::to_string(replay_.size()) + " replayed";
    return {};
  }
  std::size_t indexed = 0;
  bool same = true;
  core.for_each_indexed([&](std::uint64_t h, block_id b) {
    ++indexed;
    auto r = replay_.find(h);
    same = same && r != replay_.end() && r->second == b;
  });
  if (!same || indexed != replay_.size())
    return "replayed events differ from the index ("
           + std::to_string(replay_.size()) + " vs " + std::to_string(indexed)
           + " entries)";
  return {};
}

} // namespace kvactor::test
