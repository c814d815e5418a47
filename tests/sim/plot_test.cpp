// The plot's script (usage.gp): which tenants' lines the blocks panel
// draws - all of a few, the busiest of many.
#include <cstddef>
#include <string>

#include <boost/test/unit_test.hpp>

#include "plot.hpp"
#include "scenario.hpp"
#include "scheduler.hpp"

using namespace kvactor::sim;

namespace {

/// A run of `n` tenants "t0".. whose peaks are `peak(w)`.
template <class F>
sim_outcome tenants(std::size_t n, F peak) {
  sim_outcome r;
  for (std::size_t w = 0; w < n; ++w) {
    tenant_figures f;
    f.name = "t" + std::to_string(w);
    f.blocks_peak = peak(w);
    r.tenants.push_back(f);
  }
  return r;
}

bool draws(const std::string& gp, const std::string& name) {
  return gp.find("title \"" + name + "\"") != std::string::npos;
}

} // namespace

BOOST_AUTO_TEST_SUITE(plot_suite)

BOOST_AUTO_TEST_CASE(a_few_tenants_are_all_drawn) {
  scenario s;
  auto r = tenants(3, [](std::size_t) { return 0; });
  auto gp = gnuplot_script(s, r);
  for (auto name : {"t0", "t1", "t2"})
    BOOST_TEST(draws(gp, name), name);
  BOOST_TEST(gp.find("with the highest peak") == std::string::npos);
}

BOOST_AUTO_TEST_CASE(no_name_reaches_gnuplot_as_a_shell_command) {
  // gnuplot runs text in backquotes as a shell command, even inside a
  // double-quoted string: a tenant name or config path from a shared
  // scenario file must not carry one.
  scenario s;
  s.source = "x`touch pwned`.json";
  auto r = tenants(1, [](std::size_t) { return 0; });
  r.tenants[0].name = "fr`touch pwned`ee";
  auto gp = gnuplot_script(s, r);
  BOOST_TEST(gp.find('`') == std::string::npos, gp);
  BOOST_TEST(draws(gp, "fr_touch pwned_ee"));
  BOOST_TEST(safe_name("a`b\"c,d\\e") == "a_b_c_d_e");
}

BOOST_AUTO_TEST_CASE(of_many_tenants_the_busiest_are_drawn) {
  scenario s;
  // Peaks rise with the index but for t3, the busiest of all: t3 and the
  // last plot_tenants - 1 are drawn, in tenant order.
  constexpr std::size_t n = 2000;
  auto r = tenants(n, [](std::size_t w) { return w == 3 ? 100000 : w; });
  auto gp = gnuplot_script(s, r);
  std::size_t drawn = 0;
  for (std::size_t w = 0; w < n; ++w)
    drawn += draws(gp, "t" + std::to_string(w));
  BOOST_TEST(drawn == plot_tenants);
  BOOST_TEST(draws(gp, "t3"));
  BOOST_TEST(draws(gp, "t1999"));
  BOOST_TEST(draws(gp, "t" + std::to_string(n - plot_tenants + 1)));
  BOOST_TEST(!draws(gp, "t" + std::to_string(n - plot_tenants)));
  BOOST_TEST(gp.find("the 12 of 2000 with the highest peak") != std::string::npos);
  BOOST_TEST(gp.find("title \"t3\"") < gp.find("title \"t1999\""));
}

BOOST_AUTO_TEST_SUITE_END()
