// summary: the run's text summary (stdout) - the per-tenant table, the
// overall row and a few lines about pressure, preemptions, speculative
// decoding, conversations, the cache, time and data.
#include "report.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "figures.hpp"

namespace kvactor::sim {

namespace {

std::string fmt(const char* format, double x) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, x);
  return buf;
}

std::string pct(double x) {
  return fmt("%.1f %%", 100.0 * x);
}

/// The run's storage holds K/V bytes (host or cuda), so it can read back.
bool holds_bytes(const sim_outcome& r) {
  return !r.storage.empty() && r.storage != "none";
}

/// ", N skipped (why: count, ...)" for the verifies due that read nothing
/// back; empty when none was.
std::string skipped_read_backs(const sim_outcome& r) {
  auto& k = r.verify_skipped;
  if (k.total() == 0)
    return {};
  std::string out = ", " + std::to_string(k.total()) + " skipped (";
  const char* sep = "";
  auto add = [&](const char* why, std::uint64_t n) {
    if (n == 0)
      return;
    out += sep + std::string(why) + ": " + std::to_string(n);
    sep = ", ";
  };
  add("nothing running", k.nothing_running);
  add("no tokens held", k.no_tokens);
  add("ended meanwhile", k.ended);
  add("tables disagreed", k.table_disagreed);
  return out + ")";
}

/// A tenant's name for the summary's text: control characters (a newline
/// would break the table) shown as '?'.
std::string printable(const std::string& name) {
  std::string out = name;
  for (auto& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      c = '?';
  return out;
}

/// Terminal columns of the UTF-8 character starting at text[i] (2 for East
/// Asian wide and fullwidth ones, by their common ranges; 1 otherwise, a
/// stray byte too), and its length in bytes.
std::pair<std::size_t, std::size_t> char_at(const std::string& text, std::size_t i) {
  auto b = static_cast<unsigned char>(text[i]);
  std::size_t len = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
  if (i + len > text.size())
    len = 1;
  std::uint32_t c = len == 1 ? b : b & (0x7F >> len);
  for (std::size_t k = 1; k < len; ++k) {
    auto cont = static_cast<unsigned char>(text[i + k]);
    if ((cont & 0xC0) != 0x80)
      return {1, 1}; // not a sequence: one byte, one column
    c = (c << 6) | (cont & 0x3F);
  }
  bool wide = (c >= 0x1100 && c <= 0x115F) || (c >= 0x2E80 && c <= 0xA4CF && c != 0x303F)
              || (c >= 0xAC00 && c <= 0xD7A3) || (c >= 0xF900 && c <= 0xFAFF)
              || (c >= 0xFE30 && c <= 0xFE4F) || (c >= 0xFF00 && c <= 0xFF60)
              || (c >= 0xFFE0 && c <= 0xFFE6) || (c >= 0x1F300 && c <= 0x1F64F)
              || (c >= 0x1F900 && c <= 0x1F9FF) || (c >= 0x20000 && c <= 0x3FFFD);
  return {wide ? 2 : 1, len};
}

/// printable(name) in a column `width` terminal columns wide (wide
/// characters take two): padded, or cut to fit width - 1 and an ellipsis,
/// so a long name neither shifts its row nor overflows it.
std::string name_cell(const std::string& name, std::size_t width) {
  auto text = printable(name);
  std::size_t cols = 0;
  for (std::size_t i = 0; i < text.size();) {
    auto [w, len] = char_at(text, i);
    cols += w;
    i += len;
  }
  if (cols <= width)
    return text + std::string(width - cols, ' ');
  std::size_t used = 0, cut = 0;
  for (std::size_t i = 0; i < text.size();) {
    auto [w, len] = char_at(text, i);
    if (used + w > width - 1)
      break;
    used += w;
    i += len;
    cut = i;
  }
  // U+2026, an ellipsis, then padding where a wide character did not fit.
  return text.substr(0, cut) + "\xE2\x80\xA6" + std::string(width - 1 - used, ' ');
}

/// "LABEL: a 3, b 1" and a newline: each tenant `cell` has words for (an
/// empty string skips it), after its name.
template <class Cell>
void list_tenants(std::ostream& out, const std::string& label,
                  const sim_outcome& r, Cell cell) {
  out << label << ':';
  const char* sep = " ";
  for (auto& f : r.tenants) {
    auto text = cell(f);
    if (text.empty())
      continue;
    out << sep << printable(f.name) << ' ' << text;
    sep = ", ";
  }
  out << '\n';
}

/// Speculative decoding's lines: the drafts' fate overall and per tenant,
/// and the cache's own count beside the simulator's.
void print_drafts(std::ostream& out, const scenario& s, const sim_outcome& r,
                  const tenant_figures& all) {
  auto& d = all.drafts;
  out << "speculative decoding: " << s.draft_tokens
      << " drafts per decode step, each accepted with p "
      << fmt("%g", s.draft_acceptance) << " until the first rejection: "
      << fmt("%.2f", d.tokens_per_step()) << " output tokens per decode step ("
      << d.decode_steps << " steps)\n";
  out << " drafts: " << d.draft_tokens << " computed, " << d.accepted
      << " accepted, " << d.rejected << " rejected (acceptance "
      << pct(d.acceptance()) << "), " << d.dropped
      << " dropped unsettled with their request";
  if (r.have_final_stats)
    out << "; the cache counted " << r.final_stats.draft_tokens << ", "
        << r.final_stats.draft_tokens_rejected << " rejected";
  out << "\n per tenant:";
  const char* sep = " ";
  for (auto& f : r.tenants) {
    out << sep << printable(f.name) << ' ' << pct(f.drafts.acceptance())
        << " accepted, "
        << fmt("%.2f", f.drafts.tokens_per_step()) << " tok/step";
    sep = "; ";
  }
  out << '\n';
}

/// Conversations' lines: turns sent, and the prefix hits of first turns
/// and of follow-ups apart, overall and per tenant that converses.
void print_conversations(std::ostream& out, const scenario& s,
                         const sim_outcome& r) {
  conversation_figures all;
  for (std::size_t i = 0; i < r.tenants.size() && i < s.workloads.size(); ++i)
    if (s.workloads[i].conversation.enabled())
      all.add(r.tenants[i].conv);
  auto rate = [](std::uint64_t of, double x) {
    return of == 0 ? std::string{"-"} : pct(x);
  };
  auto hits = [&](const conversation_figures& c) {
    return "first turns " + rate(c.first_prompt_tokens, c.first_hit_rate())
           + ", follow-ups " + rate(c.follow_up_prompt_tokens, c.follow_up_hit_rate())
           + " (" + rate(c.history_tokens, c.history_kept()) + " of their history)";
  };
  out << "conversations: " << all.first_turns << " first turns, "
      << all.follow_ups << " follow-ups (" << all.follow_ups_turned_away
      << " turned away, ending their sessions), " << all.sessions_completed
      << " sessions completed\n";
  out << " prefix hit rate at first admission: " << hits(all) << '\n';
  out << " per tenant:";
  const char* sep = " ";
  for (std::size_t i = 0; i < r.tenants.size() && i < s.workloads.size(); ++i) {
    if (!s.workloads[i].conversation.enabled())
      continue;
    auto& c = r.tenants[i].conv;
    out << sep << printable(r.tenants[i].name) << ' ' << c.first_turns << " + "
        << c.follow_ups << " turns, " << hits(c);
    sep = "; ";
  }
  out << '\n';
}

} // namespace

void print_summary(std::ostream& out, const scenario& s, const sim_outcome& r) {
  auto& c = r.effective;
  out << "kvactor multi_tenant_sim: " << s.source << ", " << r.tenants.size()
      << " tenants, seed " << s.seed << "\n"
      << "cache: " << c.num_gpu_blocks << " blocks x " << c.block_size
      << " tokens, storage " << r.storage << " (" << r.device << "), model "
      << c.model.num_layers << " layers x " << c.model.num_kv_heads
      << " kv heads x " << c.model.head_dim << " dims " << to_string(c.model.dtype)
      << "\n";
  auto drained = r.steps > s.steps ? r.steps - s.steps : 0;
  out << "ran " << r.steps << " steps";
  auto conversing = false;
  for (auto& w : s.workloads)
    conversing = conversing || w.conversation.enabled();
  if (drained > 0)
    out << " (" << s.steps << " with arrivals, " << drained << " draining"
        << (conversing ? ", open sessions' turns still arriving)" : ")");
  if (r.idle_steps_skipped > 0)
    out << "; " << r.idle_steps_skipped
        << " of them idle, skipped (no step message, nothing to do until "
           "the next arrival)";
  if (r.interrupted)
    out << " - INTERRUPTED, figures cover what ran";
  if (!r.error.empty())
    out << " - FAILED: " << r.error;
  out << "\n\n";
  char buf[256];
  auto header = "tenant         prio      arrived   done  rej  prompt tok  output "
                "tok  hit rate  preempt  swaps  queue p50  queue p99  blocks avg  "
                "blocks peak\n";
  std::string rule(std::strlen(header) - 1, '-');
  out << header << rule << '\n';
  // "-" where there is nothing to measure (no admission yet), not a 0
  // that reads as a measured one. "*": requests still waiting at the end,
  // longer than some of these, are not counted (listed below the table) -
  // a starved tenant does not read as one served at once.
  auto delay = [](const tenant_figures& f, double q) {
    auto cell = f.queue_delay.empty() ? std::string{"-"}
                                      : fmt("%.0f", percentile(f.queue_delay, q));
    return f.unadmitted > 0 ? cell + "*" : cell;
  };
  auto row = [&](const tenant_figures& f, const char* prio, double blocks_avg) {
    auto hit = f.prefill_tokens == 0 ? std::string{"-"} : pct(f.hit_rate());
    std::snprintf(buf, sizeof(buf),
                  "%s %-8s %8llu %6llu %4llu %11llu %11llu %9s %8llu %6llu "
                  "%10s %10s %11.1f %12llu\n",
                  name_cell(f.name, 14).c_str(), prio, (unsigned long long) f.arrived,
                  (unsigned long long) f.finished,
                  (unsigned long long) (f.rejected + f.turned_away),
                  (unsigned long long) f.prompt_tokens,
                  (unsigned long long) f.generated_tokens, hit.c_str(),
                  (unsigned long long) f.preemptions(), (unsigned long long) f.swaps,
                  delay(f, 0.5).c_str(), delay(f, 0.99).c_str(), blocks_avg,
                  (unsigned long long) f.blocks_peak);
    out << buf;
  };
  for (auto& f : r.tenants)
    row(f, to_string(f.priority), mean_blocks(f, r));
  out << rule << '\n';
  auto all = overall_of(r);
  row(all, "", mean_blocks(all, r));
  out << "(rej: refused by the cache, or turned away at a full queue; "
         "preempt: recomputed; swaps: swapped out.\n Hit rate: of every "
         "admission's tokens, re-admissions after a preemption included, as the "
         "cache counts.\n Queue delays in steps from arrival to first admission"
      << (all.unadmitted > 0 ? "; *: of the admitted only, those still waiting "
                               "are listed below"
                             : "")
      << ".\n Blocks: charged to the tenant, per step; overall: the pool's "
         "blocks in use)\n";
  if (all.unadmitted > 0) // the delays above count admitted requests only
    list_tenants(out, "not admitted by the end", r, [](const tenant_figures& f) {
      return f.unadmitted == 0 ? std::string{}
                               : std::to_string(f.unadmitted) + " (waiting up to "
                                   + std::to_string(f.unadmitted_wait) + " steps)";
    });
  if (all.in_progress > 0) // with those above, every arrival is counted
    list_tenants(out, "in progress at the end (admitted, not finished)", r,
                 [](const tenant_figures& f) {
                   return f.in_progress == 0 ? std::string{}
                                             : std::to_string(f.in_progress);
                 });
  if (all.turned_away > 0)
    list_tenants(out,
                 "turned away, the queue full (max_waiting "
                   + std::to_string(s.max_waiting) + "; counted in rej)",
                 r, [](const tenant_figures& f) {
                   return f.turned_away == 0 ? std::string{}
                                             : std::to_string(f.turned_away);
                 });
  out << '\n';

  auto at = steps_at_levels(r);
  auto sampled = sampled_steps(r);
  double n = sampled == 0 ? 1.0 : double(sampled);
  out << "pressure: steps at low " << pct(at[0] / n) << ", medium "
      << pct(at[1] / n) << ", high " << pct(at[2] / n) << ", critical "
      << pct(at[3] / n) << "; entered medium " << r.pressure_entered[1]
      << "x, high " << r.pressure_entered[2] << "x, critical "
      << r.pressure_entered[3] << "x\n";
  out << "preemptions (" << to_string(s.preemption) << "): "
      << all.preempted_in_step << " recomputed (newest, lowest priority first), "
      << all.preempted_by_cache << " by the supervisor, " << all.preempted_by_quota
      << " at a tenant quota, " << all.swaps << " swapped out, " << all.swap_ins
      << " swapped in; " << all.readmitted << " re-admissions\n";
  // Said only when asked for: the default's summary stays as it was.
  if (s.admission == admission_order::cached_prefix)
    out << "admission order: cached_prefix (most cached prompt tokens first "
        << "among each queue's first " << s.probe_window << ", any that waited "
        << s.starvation_steps << " steps first); " << r.probes
        << " probes, " << r.probe_failures << " failed\n";
  if (s.prefill_chunk > 0)
    out << "chunked prefill: " << s.prefill_chunk << " tokens past the cached "
        << "prefix at admission and per step after; " << r.chunk_extends
        << " extends computed a later chunk of a prompt; "
        << r.preempted_mid_prefill
        << " requests preempted or swapped out mid-prefill\n";
  if (s.draft_tokens > 0)
    print_drafts(out, s, r, all);
  if (conversing)
    print_conversations(out, s, r);
  if (r.have_final_stats) {
    auto& st = r.final_stats;
    out << "cache: " << st.allocation_count << " allocations ("
        << st.allocation_failures << " failed), " << st.eviction_count
        << " evictions, " << st.cow_copies << " copy-on-write copies, "
        << st.preemption_count << " preemptions";
    if (r.ended_before_free > 0)
      out << " (" << r.ended_before_free
          << " after a request's last token, before its free: counted finished "
             "above)";
    out << ", " << st.swap_out_count << " swaps";
    if (r.preempted_mid_swap > 0)
      out << " (" << r.preempted_mid_swap
          << " swap-outs found their request preempted by the supervisor "
             "meanwhile: counted preempted above, and swaps here if their "
             "copy completed)";
    if (st.swap_in_count > 0)
      out << " (" << st.swap_in_shared_blocks
          << " blocks shared back in from the prefix cache)";
    out << "; prefix hit rate " << pct(st.cache_hit_rate) << "\n";
  }
  auto rtt = r.step_round_trip_us;
  out << "time: " << fmt("%.2f", r.wall_s) << " s wall";
  // Per step run: a skipped idle step takes no time worth dividing by.
  auto run_steps = r.steps - std::min(r.steps, r.idle_steps_skipped);
  if (run_steps > 0)
    out << " (" << fmt("%.0f", r.wall_s * 1e6 / double(run_steps))
        << (r.idle_steps_skipped > 0 ? " us per step run)" : " us/step)");
  out << "; " << rtt.size() << " step messages, round trip p50 "
      << fmt("%.0f", percentile(rtt, 0.5)) << " us, p99 "
      << fmt("%.0f", percentile(rtt, 0.99)) << " us\n";
  if (r.storage != "none" && !r.storage.empty())
    out << "data: " << r.tokens_written << " K/V rows written ("
        << fmt("%.1f", r.bytes_written / (1024.0 * 1024.0)) << " MiB) through "
        << "the device actor; " << r.verify_checks << " read-backs, "
        << r.verify_failures << " mismatched" << skipped_read_backs(r)
        << "\n";
  if (!r.invariant_error.empty())
    out << "THE POOL'S INVARIANT BROKE: " << r.invariant_error << '\n';
  for (auto& w : r.warnings)
    out << "warning: " << w << '\n';
}

std::string failed_checks(const sim_outcome& r) {
  std::string why;
  if (r.verify_failures > 0)
    why = std::to_string(r.verify_failures) + " of "
          + std::to_string(r.verify_checks) + " K/V read-backs mismatched";
  // Verification on, bytes held, and nothing ever read back: the run
  // checked none of its bytes, which must not pass for "0 mismatched". An
  // interrupted run may have stopped before its first verify.
  if (r.verify_every > 0 && holds_bytes(r) && r.verify_checks == 0
      && !r.interrupted)
    why += (why.empty() ? "" : "; ")
           + std::string("verify_every is ") + std::to_string(r.verify_every)
           + " but no K/V was read back" + skipped_read_backs(r);
  if (r.inconsistencies > 0)
    why += (why.empty() ? "" : "; ") + std::to_string(r.inconsistencies)
           + " replies disagreed with what was asked (see the warnings)";
  if (!r.invariant_error.empty())
    why += (why.empty() ? "" : "; ") + std::string("the pool's invariant broke: ")
           + r.invariant_error;
  else if (!r.invariant_checked)
    why += (why.empty() ? "" : "; ")
           + std::string("the pool's invariant was not checked")
           + (r.invariant_unchecked.empty() ? "" : ": " + r.invariant_unchecked);
  return why;
}

} // namespace kvactor::sim
