// Entry point of gpu_tests: the CUDA backend compared against the host
// backend. Every case skips (and the binary passes) when no device answers.
#define BOOST_TEST_MODULE kvactor_gpu_tests
#include <boost/test/unit_test.hpp>
