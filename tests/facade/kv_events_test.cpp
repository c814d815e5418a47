// write_kv_events: the prefix index's changes as JSON lines, from the call
// on - a step sent right after it (straight to the pool, past the manager
// that passes the subscription on) is in the file too; a file named again
// is written once.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <unistd.h>

#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <nlohmann/json.hpp>

#include "fixture.hpp"

using namespace kvtest;

namespace {

/// BlockStored events in the JSON lines at `path` so far.
std::size_t stored_events(const std::string& path) {
  std::ifstream in{path};
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) {
    auto batch = nlohmann::json::parse(line);
    for (auto& e : batch["events"])
      n += e["type"] == "BlockStored";
  }
  return n;
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(facade_kv_events, watchdog)

BOOST_AUTO_TEST_CASE(a_step_right_after_write_kv_events_is_in_the_file) {
  auto dir = std::filesystem::temp_directory_path();
  for (int round = 0; round < 5; ++round) {
    BOOST_TEST_CONTEXT("round " << round) {
      auto path = (dir / ("kvactor_kv_events_" + std::to_string(getpid()) + "_"
                          + std::to_string(round) + ".jsonl"))
                    .string();
      std::filesystem::remove(path);
      {
        cache_fixture f;
        BOOST_REQUIRE(!f.m().write_kv_events(path));
        // 17 prompt tokens: 4 full blocks of 4 enter the prefix index.
        step_request step;
        step.admits = {f.req(1, 17, 256, iota_tokens(1, 17))};
        auto r = f.m().step(step);
        BOOST_REQUIRE_MESSAGE(r, why(r));
        BOOST_REQUIRE_EQUAL(r->admitted.size(), 1u);
        BOOST_TEST(eventually([&] { return stored_events(path) >= 4; }),
                   "stored events in the file: " << stored_events(path));
        BOOST_TEST(stored_events(path) == 4u);
      }
      std::filesystem::remove(path);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_file_named_again_keeps_its_one_writer) {
  auto dir = std::filesystem::temp_directory_path();
  auto name = "kvactor_kv_events_again_" + std::to_string(getpid());
  auto path = (dir / (name + ".jsonl")).string();
  auto other = (dir / (name + "_other.jsonl")).string();
  std::filesystem::remove(path);
  std::filesystem::remove(other);
  {
    cache_fixture f;
    BOOST_REQUIRE(!f.m().write_kv_events(path));
    BOOST_REQUIRE(!f.m().write_kv_events(path)); // the same name
    BOOST_REQUIRE(!f.m().write_kv_events((dir / "." / (name + ".jsonl")).string()));
    BOOST_REQUIRE(!f.m().write_kv_events(other)); // another file: a writer
    step_request step;
    step.admits = {f.req(1, 17, 256, iota_tokens(1, 17))};
    auto r = f.m().step(step);
    BOOST_REQUIRE_MESSAGE(r, why(r));
    BOOST_TEST(eventually([&] {
      return stored_events(path) >= 4 && stored_events(other) >= 4;
    }));
    // A second writer of `path` would have written its copies by now.
    std::this_thread::sleep_for(std::chrono::milliseconds{200});
    BOOST_TEST(stored_events(path) == 4u);
    BOOST_TEST(stored_events(other) == 4u);
  }
  std::filesystem::remove(path);
  std::filesystem::remove(other);
}

BOOST_AUTO_TEST_CASE(a_full_disk_loses_batches_counted_per_file) {
  // /dev/full refuses every write (ENOSPC): each batch is counted lost, the
  // file beside it writes all of its own.
  if (!std::filesystem::exists("/dev/full"))
    return;
  auto path = (std::filesystem::temp_directory_path()
               / ("kvactor_kv_events_full_" + std::to_string(getpid())
                  + ".jsonl"))
                .string();
  std::filesystem::remove(path);
  {
    cache_fixture f;
    BOOST_TEST(f.m().kv_event_files().empty());
    BOOST_REQUIRE(!f.m().write_kv_events("/dev/full"));
    BOOST_REQUIRE(!f.m().write_kv_events(path));
    step_request step;
    step.admits = {f.req(1, 17, 256, iota_tokens(1, 17))};
    auto r = f.m().step(step);
    BOOST_REQUIRE_MESSAGE(r, why(r));
    BOOST_TEST(eventually([&] {
      auto files = f.m().kv_event_files();
      return files.size() == 2 && files[0].batches_lost >= 1
             && files[1].batches_written >= 1;
    }));
    auto files = f.m().kv_event_files();
    BOOST_REQUIRE_EQUAL(files.size(), 2u);
    BOOST_TEST(files[0].path == "/dev/full");
    BOOST_TEST(files[0].batches_written == 0u);
    BOOST_TEST(files[0].first_lost_seq == 1u);
    BOOST_TEST(files[0].last_error == "No space left on device");
    BOOST_TEST(files[1].path == path);
    BOOST_TEST(files[1].batches_lost == 0u);
    BOOST_TEST(files[1].batches_written == files[0].batches_lost);
    BOOST_TEST(stored_events(path) == 4u);
  }
  std::filesystem::remove(path);
}

BOOST_AUTO_TEST_CASE(a_file_that_cannot_be_opened_is_refused) {
  cache_fixture f;
  auto err = f.m().write_kv_events("/nonexistent-dir/kv_events.jsonl");
  KV_CHECK_ERROR(err, errc::invalid_request, "cannot open /nonexistent-dir/");
}

BOOST_AUTO_TEST_CASE(a_call_from_an_actors_handler_changes_nothing) {
  // Refused before the file is opened or a writer subscribed: a retry from
  // a thread of the caller's own then makes the writer.
  auto path = (std::filesystem::temp_directory_path()
               / ("kvactor_kv_events_actor_" + std::to_string(getpid())
                  + ".jsonl"))
                .string();
  std::filesystem::remove(path);
  cache_fixture f;
  std::promise<caf::error> done;
  auto a = f.sys->spawn(
    [&](caf::event_based_actor* self, int) -> caf::behavior {
      return {[&, self](caf::get_atom) {
        done.set_value(f.m().write_kv_events(path));
        self->quit();
      }};
    },
    0);
  caf::anon_send(a, caf::get_atom::value);
  auto err = done.get_future().get();
  KV_CHECK_ERROR(err, errc::invalid_request, "write_kv_events");
  BOOST_TEST(!std::filesystem::exists(path));
  BOOST_REQUIRE(!f.m().write_kv_events(path));
  step_request step;
  step.admits = {f.req(1, 9, 256, iota_tokens(1, 9))}; // 2 full blocks
  BOOST_REQUIRE(f.m().step(step));
  BOOST_TEST(eventually([&] { return stored_events(path) >= 2; }),
             "stored events in the file: " << stored_events(path));
  std::filesystem::remove(path);
}

BOOST_AUTO_TEST_SUITE_END()
