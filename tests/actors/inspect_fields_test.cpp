// Every member of every message struct crosses the wire: inspect() names as
// many fields as the struct has members. A member added to a struct but not
// to its inspect() would arrive default-valued at a remote peer, and the
// round trip in wire_test.cpp cannot see it (to_string goes through the
// same inspect()). The members are counted the way aggregate
// initialisation counts them: the most initialisers T{...} accepts.
#include <cstddef>
#include <type_traits>
#include <utility>

#include <boost/test/unit_test.hpp>

#include <caf/meta/annotation.hpp>

#include "kvactor/messages/interfaces.hpp"
#include "kvactor/messages/protocol.hpp"
#include "kvactor/messages/step.hpp"
#include "kvactor/messages/types.hpp"

using namespace kvactor;

namespace {

/// Converts to any member type (never called: only unevaluated contexts).
struct any_member {
  template <class T>
  operator T() const;
};

template <class T, class Seq, class = void>
struct takes : std::false_type {};

template <class T, std::size_t... Is>
struct takes<T, std::index_sequence<Is...>,
             std::void_t<decltype(T{(void(Is), any_member{})...})>>
  : std::true_type {};

/// How many members aggregate T has: the most initialisers T{...} takes.
template <class T, std::size_t N = 0>
constexpr std::size_t members() {
  static_assert(std::is_aggregate_v<T>, "a message struct is an aggregate");
  static_assert(N < 64, "more members than this test counts");
  if constexpr (takes<T, std::make_index_sequence<N + 1>>::value)
    return members<T, N + 1>();
  else
    return N;
}

/// Counts the fields an inspect() passes, annotations (the type name)
/// aside.
struct field_counter {
  using result_type = void;
  static constexpr bool reads_state = true;
  static constexpr bool writes_state = false;
  std::size_t fields = 0;

  template <class... Ts>
  void operator()(Ts&&...) {
    fields += (std::size_t{0} + ... + (caf::meta::is_annotation<Ts>::value ? 0 : 1));
  }
};

template <class T>
std::size_t inspected() {
  T x{};
  field_counter f;
  inspect(f, x);
  return f.fields;
}

template <class T>
void check(const char* name) {
  BOOST_TEST_CONTEXT(name) {
    BOOST_TEST(inspected<T>() == members<T>());
  }
}

} // namespace

BOOST_AUTO_TEST_SUITE(inspect_fields)

BOOST_AUTO_TEST_CASE(every_member_of_every_message_struct_is_inspected) {
  // types.hpp
  check<device>("device");
  check<allocation_request>("allocation_request");
  check<block_table>("block_table");
  check<block_copy>("block_copy");
  check<block_move>("block_move");
  check<tenant_usage>("tenant_usage");
  check<cache_manager_stats>("cache_manager_stats");
  check<cache_gc_stats>("cache_gc_stats");
  check<cache_handle_stats>("cache_handle_stats");
  // step.hpp
  check<extend_op>("extend_op");
  check<draft_verdict>("draft_verdict");
  check<step_request>("step_request");
  check<table_delta>("table_delta");
  check<admission>("admission");
  check<op_failure>("op_failure");
  check<step_result>("step_result");
  // protocol.hpp
  check<request_info>("request_info");
  check<extension>("extension");
  check<step_effects>("step_effects");
  check<pool_usage>("pool_usage");
  check<pressure_event>("pressure_event");
  check<request_ended>("request_ended");
  check<pool_stats>("pool_stats");
  check<slot_write>("slot_write");
  check<gathered_kv>("gathered_kv");
  check<kv_event>("kv_event");
  check<kv_event_batch>("kv_event_batch");
  check<storage_info>("storage_info");
  // interfaces.hpp
  check<handle_entry>("handle_entry");
}

BOOST_AUTO_TEST_CASE(the_counter_sees_a_member_left_out) {
  // The check can fail: a struct whose inspect() skips a member.
  struct two {
    int a = 0;
    int b = 0;
  };
  BOOST_TEST(members<two>() == 2u);
  two x;
  field_counter f;
  f(caf::meta::type_name("two"), x.a);
  BOOST_TEST(f.fields == 1u);
}

BOOST_AUTO_TEST_SUITE_END()
