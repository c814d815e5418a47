// check_device (messages/protocol.cpp): which requests a storage takes, and
// an error that says what differs.
#include <string>

#include <boost/test/unit_test.hpp>

#include "kvactor/messages/error.hpp"
#include "kvactor/messages/protocol.hpp"

using namespace kvactor;

namespace {

allocation_request on(device d) {
  allocation_request req;
  req.id = 5;
  req.device = d;
  return req;
}

} // namespace

BOOST_AUTO_TEST_SUITE(check_device_suite)

BOOST_AUTO_TEST_CASE(a_storage_takes_requests_for_its_own_device_only) {
  storage_info host{"host", device{}, 64, 0, 512};
  BOOST_TEST(!check_device(host, on(device{})));
  storage_info none{"none", device{}, 64, 0, 512};
  BOOST_TEST(!check_device(none, on(device{device_kind::cuda, 3})));
  auto err = check_device(host, on(device{device_kind::cuda, 1}));
  BOOST_TEST(has_code(err, errc::invalid_request));
  BOOST_TEST(render(err).find("device cuda:1 but the cache lives on cpu")
               != std::string::npos,
             render(err));
}

BOOST_AUTO_TEST_CASE(a_refused_cpu_device_is_named_with_its_index) {
  // to_string prints every cpu as "cpu": the error read "device cpu but the
  // cache lives on cpu", naming no difference.
  storage_info host{"host", device{}, 64, 0, 512};
  auto err = check_device(host, on(device{device_kind::cpu, 1}));
  BOOST_TEST(has_code(err, errc::invalid_request));
  BOOST_TEST(render(err).find("device cpu:1 but the cache lives on cpu)")
               != std::string::npos,
             render(err));
}

BOOST_AUTO_TEST_CASE(a_device_kind_out_of_range_is_refused_by_every_storage) {
  // A peer's integer past cuda: spelled "cpu:0" it was refused by a cache
  // "on cpu" for no difference shown, and storage "none" took it.
  auto bad = on(device{static_cast<device_kind>(9), 0});
  for (auto kind : {"host", "none"}) {
    BOOST_TEST_CONTEXT("storage " << kind) {
      storage_info store{kind, device{}, 64, 0, 512};
      auto err = check_device(store, bad);
      BOOST_TEST(has_code(err, errc::invalid_request));
      BOOST_TEST(render(err).find("request 5: device kind 9 is not one of "
                                  "cpu, cuda")
                   != std::string::npos,
                 render(err));
    }
  }
  BOOST_TEST(std::string{to_string(static_cast<device_kind>(9))} == "unknown");
}

BOOST_AUTO_TEST_SUITE_END()
