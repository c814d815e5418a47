// Entry point of unit_tests: plain tests of CAF-free components.
#define BOOST_TEST_MODULE kvactor_unit_tests
#include <boost/test/unit_test.hpp>
