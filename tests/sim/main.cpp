// Entry point of sim_tests: the multi_tenant_sim example's scenario reader,
// workload generator, batcher (against the pool core) and simulate().
#define BOOST_TEST_MODULE kvactor_sim_tests
#include <boost/test/unit_test.hpp>
