// The facade's cache as started: its config and timeout, CAF's clock thread
// at the lowest priority, and the storage it reports.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fixture.hpp"

using namespace kvtest;

BOOST_FIXTURE_TEST_SUITE(facade_cache, watchdog)

BOOST_AUTO_TEST_CASE(config_and_timeout_are_as_started) {
  cache_fixture f;
  auto& c = f.m().config();
  BOOST_TEST(c.num_gpu_blocks == 64u);
  BOOST_TEST(c.block_size == test_block_size);
  BOOST_TEST(c.storage == "host");
  BOOST_TEST(c.model.head_dim == 8u);
  f.m().set_timeout(std::chrono::seconds{5});
  auto h = f.alloc(f.req(1, 4));
  BOOST_TEST(h->num_tokens() == 4u);
}

#ifdef __linux__
namespace {

/// The nice value of each thread of this process named `name`.
std::vector<std::string> nice_values_of(const std::string& name) {
  std::vector<std::string> out;
  for (auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm{task.path() / "comm"};
    std::string comm_name;
    std::getline(comm, comm_name);
    if (comm_name != name)
      continue;
    std::ifstream stat{task.path() / "stat"};
    std::string line;
    std::getline(stat, line);
    // Field 19 is the nice value; the name field (2) ends at the last ')'.
    std::istringstream rest{line.substr(line.rfind(')') + 2)};
    std::string field;
    for (int k = 3; k <= 19; ++k)
      rest >> field;
    out.push_back(field);
  }
  return out;
}

} // namespace

BOOST_AUTO_TEST_CASE(configure_runs_cafs_clock_thread_at_the_lowest_priority) {
  // Every actor exit wakes CAF's clock thread; at normal priority it
  // preempts the worker or the waiting caller (see tune_for_latency). The
  // thread names itself once running: look until it has.
  cache_fixture f;
  std::vector<std::string> nice;
  for (int tries = 0; tries < 500; ++tries) {
    nice = nice_values_of("caf.clock");
    if (!nice.empty() && nice.front() == "19")
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
  BOOST_REQUIRE(!nice.empty());
  for (auto& n : nice)
    BOOST_TEST(n == "19");
}
#endif

BOOST_AUTO_TEST_CASE(storage_says_where_the_blocks_live) {
  cache_fixture f;
  auto s = f.m().storage();
  BOOST_TEST(s.kind == "host");
  BOOST_TEST((s.device == kvactor::device{}));
  BOOST_TEST(s.num_blocks == 64u);
  BOOST_TEST(s.num_host_blocks == 0u);
  // 2 layers x (K, V) x 4 tokens x 2 heads x 8 dims x 4 bytes.
  BOOST_TEST(s.bytes_per_block == 2u * 2u * test_block_size * 2u * 8u * 4u);
}

BOOST_AUTO_TEST_CASE(storage_auto_is_reported_as_what_it_picked) {
  auto cfg = small_config(64, "auto");
  cache_fixture f{cfg};
  auto s = f.m().storage();
  BOOST_TEST((s.kind == "host" || s.kind == "cuda"), "picked " << s.kind);
  BOOST_TEST(f.m().config().storage == s.kind);
  // A request naming the device the cache reports is accepted.
  auto req = f.req(1, 4);
  req.device = s.device;
  BOOST_TEST(static_cast<bool>(f.m().allocate(req)));
}

BOOST_AUTO_TEST_SUITE_END()
