// Entry point of facade_tests: the blocking facade and its handles on CAF's
// threaded scheduler, concurrency and shutdown.
#define BOOST_TEST_MODULE kvactor_facade_tests
#include <boost/test/unit_test.hpp>

#include <future>

#include "fixture.hpp"

namespace kvtest {

bool finishes_within(std::chrono::milliseconds limit, std::function<void()> f) {
  std::packaged_task<void()> task{std::move(f)};
  auto done = task.get_future();
  std::thread worker{std::move(task)};
  if (done.wait_for(limit) != std::future_status::ready) {
    worker.detach();
    return false;
  }
  worker.join();
  done.get(); // rethrows what f threw
  return true;
}

} // namespace kvtest
