// kv_event_file (metrics/kv_event_file.cpp): a batch the file system
// refuses is lost whole - the file keeps whole JSON lines, cut back where
// a line was written in part - counted with its seq and the system's
// reason, and the next batch is tried again. A full disk is /dev/full; a
// disk filling up mid-line is a file-size limit (RLIMIT_FSIZE).
#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/resource.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "kvactor/metrics/kv_event_file.hpp"

using namespace kvactor;

namespace {

/// A batch of one stored block of 4 tokens, numbered `seq`.
kv_event_batch batch_of(std::uint64_t seq) {
  kv_event_batch b;
  b.seq = seq;
  b.block_size = 4;
  b.ts = 1764460000.5;
  b.events = {kv_event{true, 100 + seq, 0, 1, "tenant-a", {1, 2, 3, 4}}};
  return b;
}

/// The seqs of the file's lines; fails the test on a line that is not
/// whole JSON.
std::vector<std::uint64_t> seqs_in(const std::string& path) {
  std::ifstream in{path};
  std::vector<std::uint64_t> out;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    BOOST_TEST_REQUIRE(!j.is_discarded(), "not a whole line: " << line);
    out.push_back(j["seq"].get<std::uint64_t>());
  }
  return out;
}

/// A file-size limit for this process, restored at the end of the scope.
/// SIGXFSZ keeps its default disposition, which kills the process: the
/// file must not let a write past the limit raise it.
struct file_size_limit {
  rlimit old{};
  explicit file_size_limit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &old);
    BOOST_TEST_REQUIRE(std::signal(SIGXFSZ, SIG_DFL) != SIG_ERR);
    rlimit lim = old;
    lim.rlim_cur = bytes;
    BOOST_TEST_REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  }
  ~file_size_limit() {
    setrlimit(RLIMIT_FSIZE, &old);
  }
};

std::string temp_path(const std::string& name) {
  auto path = (std::filesystem::temp_directory_path()
               / ("kvactor_" + name + "_" + std::to_string(getpid()) + ".jsonl"))
                .string();
  std::filesystem::remove(path);
  return path;
}

} // namespace

BOOST_AUTO_TEST_SUITE(kv_event_file_suite)

BOOST_AUTO_TEST_CASE(batches_append_as_whole_lines) {
  auto path = temp_path("event_file_lines");
  {
    auto f = kv_event_file::open(path);
    BOOST_TEST_REQUIRE(static_cast<bool>(f), (f ? "" : render(f.error())));
    for (std::uint64_t seq = 1; seq <= 3; ++seq)
      BOOST_TEST((*f)->write(batch_of(seq)));
    auto st = (*f)->stats();
    BOOST_TEST(st.path == path);
    BOOST_TEST(st.batches_written == 3u);
    BOOST_TEST(st.batches_lost == 0u);
    BOOST_TEST(st.last_error.empty());
  }
  {
    // Opened again: appended to, not truncated.
    auto f = kv_event_file::open(path);
    BOOST_TEST_REQUIRE(static_cast<bool>(f));
    BOOST_TEST((*f)->write(batch_of(4)));
  }
  BOOST_TEST(seqs_in(path) == (std::vector<std::uint64_t>{1, 2, 3, 4}),
             boost::test_tools::per_element());
  std::filesystem::remove(path);
}

BOOST_AUTO_TEST_CASE(a_path_that_cannot_be_opened_is_named_with_the_reason) {
  auto f = kv_event_file::open("/nonexistent-dir-kvactor/events.jsonl");
  BOOST_TEST_REQUIRE(!f);
  BOOST_TEST(has_code(f.error(), errc::invalid_request));
  auto text = render(f.error());
  BOOST_TEST(text.find("/nonexistent-dir-kvactor/events.jsonl") != std::string::npos,
             text);
  BOOST_TEST(text.find("No such file or directory") != std::string::npos, text);
}

BOOST_AUTO_TEST_CASE(a_full_disk_loses_each_batch_counted) {
  if (!std::filesystem::exists("/dev/full"))
    return; // not Linux-like: nothing to test against
  auto f = kv_event_file::open("/dev/full");
  BOOST_TEST_REQUIRE(static_cast<bool>(f), (f ? "" : render(f.error())));
  BOOST_TEST(!(*f)->write(batch_of(5)));
  BOOST_TEST(!(*f)->write(batch_of(6)));
  auto st = (*f)->stats();
  BOOST_TEST(st.batches_written == 0u);
  BOOST_TEST(st.batches_lost == 2u);
  BOOST_TEST(st.first_lost_seq == 5u);
  BOOST_TEST(st.last_lost_seq == 6u);
  BOOST_TEST(st.last_error == "No space left on device");
}

BOOST_AUTO_TEST_CASE(a_line_refused_midway_is_cut_back_and_the_next_written) {
  auto path = temp_path("event_file_limit");
  auto f = kv_event_file::open(path);
  BOOST_TEST_REQUIRE(static_cast<bool>(f));
  BOOST_TEST_REQUIRE((*f)->write(batch_of(1)));
  auto line = std::filesystem::file_size(path);
  {
    // Room for one more line and half of another: batch 2 fits, batch 3
    // is written in part and refused (EFBIG), batch 4 finds no room.
    file_size_limit limit{static_cast<rlim_t>(2 * line + line / 2)};
    BOOST_TEST((*f)->write(batch_of(2)));
    BOOST_TEST(!(*f)->write(batch_of(3)));
    BOOST_TEST(std::filesystem::file_size(path) == 2 * line); // cut back
    BOOST_TEST(!(*f)->write(batch_of(4)));
  }
  // Room again: written, after the last whole line.
  BOOST_TEST((*f)->write(batch_of(5)));
  BOOST_TEST(seqs_in(path) == (std::vector<std::uint64_t>{1, 2, 5}),
             boost::test_tools::per_element());
  auto st = (*f)->stats();
  BOOST_TEST(st.batches_written == 3u);
  BOOST_TEST(st.batches_lost == 2u);
  BOOST_TEST(st.first_lost_seq == 3u);
  BOOST_TEST(st.last_lost_seq == 4u);
  BOOST_TEST(st.last_error == "File too large");
  std::filesystem::remove(path);
}

BOOST_AUTO_TEST_SUITE_END()
