// pressure_tracker against a model written from its contract: on random
// configs (thresholds, hysteresis, pool sizes down to one block) and random
// walks of the blocks in use, the level after each update is the highest
// level whose threshold usage reaches, or - hysteresis - the highest level
// at or below the previous one that usage has not fallen `hysteresis`
// below; update() says whether it changed. And what the pool relies on to
// report only crossings: usage that stays within one band of marks() never
// changes the level, whatever the level was.
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "../soak.hpp"
#include "kvactor/actors/pressure_tracker.hpp"

using namespace kvactor;
using kvactor::detail::pressure_tracker;

namespace {

/// The contract, in fractions: a level is reached at threshold * total
/// blocks in use, and kept down to (threshold - hysteresis) * total.
struct model {
  double th[3];
  double hysteresis;
  double total;
  int level = 0;

  bool at_least(std::uint64_t used, double fraction) const {
    return static_cast<double>(used) >= fraction * total - 1e-9;
  }

  int next(std::uint64_t used) const {
    int reached = 0;
    for (int i = 0; i < 3; ++i)
      if (at_least(used, th[i]))
        reached = i + 1;
    int kept = 0;
    for (int l = level; l > 0; --l)
      if (at_least(used, std::max(0.0, th[l - 1] - hysteresis))) {
        kept = l;
        break;
      }
    return std::max(reached, kept);
  }
};

pressure_config random_config(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit{0.01, 1.0};
  double t[3] = {unit(rng), unit(rng), unit(rng)};
  std::sort(t, t + 3);
  if (rng() % 4 == 0)
    t[2] = 1.0; // critical only with every block in use
  pressure_config cfg;
  cfg.medium = t[0];
  cfg.high = std::max(t[1], t[0] + 1e-3);
  cfg.critical = std::min(1.0, std::max(t[2], cfg.high + 1e-3));
  auto most = std::min(0.49, cfg.medium * 0.99);
  cfg.hysteresis = rng() % 5 == 0 ? 0.0
                                  : std::uniform_real_distribution<double>{0, most}(rng);
  return cfg;
}

void run(std::uint64_t seed) {
  std::mt19937_64 rng{seed};
  auto cfg = random_config(rng);
  std::uint64_t total = 1 + rng() % (rng() % 2 == 0 ? 20 : 5000);
  BOOST_TEST_CONTEXT("seed " << seed << ", " << total << " blocks, marks "
                             << cfg.medium << " / " << cfg.high << " / "
                             << cfg.critical << ", hysteresis " << cfg.hysteresis) {
    pressure_tracker tracker{cfg, total};
    model m{{cfg.medium, cfg.high, cfg.critical}, cfg.hysteresis,
            static_cast<double>(total)};
    for (int l = 1; l <= 3; ++l)
      BOOST_TEST(tracker.enter_mark(static_cast<memory_pressure>(l))
                 == pressure_mark(m.th[l - 1], total));
    std::uint64_t used = 0;
    for (int i = 0; i < 3000; ++i) {
      // Small steps mostly, now and then a jump anywhere.
      if (rng() % 10 == 0) {
        used = rng() % (total + 1);
      } else {
        auto step = rng() % (1 + total / 20 + 1);
        used = rng() % 2 == 0 ? std::min(total, used + step)
                              : (used > step ? used - step : 0);
      }
      auto before = tracker.level();
      auto want = m.next(used);
      auto changed = tracker.update(used);
      BOOST_REQUIRE_MESSAGE(static_cast<int>(tracker.level()) == want,
                            "step " << i << ": " << used << " in use, level "
                                    << static_cast<int>(tracker.level())
                                    << ", the model says " << want);
      BOOST_TEST(changed == (tracker.level() != before));
      m.level = want;
    }
    // Within one band, no level changes, whether usage came into the band
    // from below (an empty pool) or from above (a full one).
    auto& marks = tracker.marks();
    BOOST_TEST(std::is_sorted(marks.begin(), marks.end()));
    for (int i = 0; i < 200; ++i) {
      auto a = rng() % (total + 1);
      auto b = rng() % (total + 1);
      if (tracker.band(a) != tracker.band(b))
        continue;
      for (std::uint64_t from : {std::uint64_t{0}, total}) {
        pressure_tracker probe{cfg, total};
        probe.update(from);
        probe.update(a);
        BOOST_TEST(!probe.update(b), a << " and " << b << " share a band (from "
                                        << from << ")");
      }
    }
  }
}

} // namespace

BOOST_AUTO_TEST_SUITE(pressure_tracker_suite)

BOOST_AUTO_TEST_CASE(levels_follow_the_thresholds_with_hysteresis) {
  for (std::uint64_t seed = 1; seed <= 200; ++seed)
    run(seed);
  for (auto seed : test::soak_seeds())
    run(seed);
}

BOOST_AUTO_TEST_CASE(a_pool_hovering_at_a_mark_does_not_flap) {
  pressure_config cfg; // 0.6 / 0.8 / 0.95, hysteresis 0.05
  pressure_tracker t{cfg, 100};
  BOOST_TEST(t.update(80));
  BOOST_TEST((t.level() == memory_pressure::high));
  for (auto used : {79, 76, 78, 75, 80, 77})
    BOOST_TEST(!t.update(static_cast<std::uint64_t>(used)), used);
  BOOST_TEST(t.update(74));
  BOOST_TEST((t.level() == memory_pressure::medium));
}

BOOST_AUTO_TEST_CASE(a_relief_target_is_out_of_critical_and_under_high) {
  // Usage under the relief target reads below critical, whatever the
  // marks: with the defaults that is the high mark; with a hysteresis
  // wider than the gap between high and critical, the lower mark where
  // critical is left.
  for (double hysteresis : {0.0, 0.02, 0.05, 0.15}) {
    for (double critical : {0.81, 0.82, 0.9, 0.95}) {
      pressure_config cfg;
      cfg.high = 0.8;
      cfg.critical = critical;
      cfg.hysteresis = hysteresis;
      pressure_tracker t{cfg, 64};
      t.update(64);
      BOOST_REQUIRE((t.level() == memory_pressure::critical));
      auto target = t.relief_target();
      BOOST_TEST(target <= t.enter_mark(memory_pressure::high));
      t.update(target - 1);
      BOOST_TEST((t.level() < memory_pressure::critical),
                 "critical " << critical << " hysteresis " << hysteresis);
    }
  }
  pressure_config wide;
  wide.high = 0.8;
  wide.critical = 0.82;
  wide.hysteresis = 0.05;
  pressure_tracker t{wide, 64};
  BOOST_TEST(t.enter_mark(memory_pressure::high) == 52u);
  BOOST_TEST(t.relief_target() == 50u); // critical is left under 0.77 * 64
}

BOOST_AUTO_TEST_SUITE_END()
