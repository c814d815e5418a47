// kv_cache_handle through the facade: identity and shape accessors, paged
// tensor views of the host storage, storage "none", clones, per-request
// stats, the contiguous layout (a gather of what was written into the
// blocks) and DLPack export.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <set>

#include <caf/scoped_actor.hpp>

#include "fixture.hpp"
#include "kvactor/actors/facade_core.hpp"
#include "kvactor/messages/dlpack.hpp"

using namespace kvtest;

// -- allocation counting (this thread only), to see DLPack's deleter free ------

namespace {
thread_local bool counting_allocations = false;
thread_local long live_allocations = 0;
} // namespace

namespace {

void* counted_new(std::size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr)
    throw std::bad_alloc{};
  if (counting_allocations)
    ++live_allocations;
  return p;
}

void counted_delete(void* p) noexcept {
  if (p != nullptr && counting_allocations)
    --live_allocations;
  std::free(p);
}

} // namespace

// Every replaceable non-aligned form, so that no path bypasses the count.
void* operator new(std::size_t n) {
  return counted_new(n);
}
void* operator new[](std::size_t n) {
  return counted_new(n);
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_new(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_new(n);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept {
  counted_delete(p);
}
void operator delete[](void* p) noexcept {
  counted_delete(p);
}
void operator delete(void* p, std::size_t) noexcept {
  counted_delete(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  counted_delete(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  counted_delete(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  counted_delete(p);
}

namespace {

/// The facade core behind a handle (for the device actor, to write K/V
/// rows the way a model would).
struct core_access : kv_cache_handle {
  static std::shared_ptr<detail::facade_core> of(const kv_cache_handle& h) {
    auto member = &core_access::core_;
    return (h.*member).lock();
  }
};

/// The value written at (layer, token, element) of K (V is its negative).
float pattern(std::uint32_t layer, std::uint64_t token, std::size_t elem) {
  return 1000.0f * static_cast<float>(layer + 1)
         + 10.0f * static_cast<float>(token) + static_cast<float>(elem);
}

/// Writes tokens [first, last) of every layer through the device actor.
void write_tokens(kv_cache_handle& h, std::uint64_t first, std::uint64_t last) {
  auto core = core_access::of(h);
  BOOST_REQUIRE(core);
  auto t = h.table();
  auto row = std::size_t{h.num_heads()} * h.head_dim();
  for (std::uint32_t l = 0; l < h.num_layers(); ++l) {
    slot_write w;
    w.layer = l;
    std::vector<float> keys, values;
    for (auto i = first; i < last; ++i) {
      w.slots.push_back(static_cast<std::int64_t>(t.slot(i)));
      for (std::size_t e = 0; e < row; ++e) {
        keys.push_back(pattern(l, i, e));
        values.push_back(-pattern(l, i, e));
      }
    }
    w.keys.resize(keys.size() * sizeof(float));
    w.values.resize(values.size() * sizeof(float));
    std::memcpy(w.keys.data(), keys.data(), w.keys.size());
    std::memcpy(w.values.data(), values.data(), w.values.size());
    auto res = core->ask<std::uint32_t>(core->cache().device, write_atom::value,
                                        std::move(w));
    BOOST_REQUIRE_MESSAGE(res, why(res));
    BOOST_TEST(std::get<0>(*res) == last - first);
  }
}

std::vector<std::int64_t> dims(std::initializer_list<std::int64_t> xs) {
  return xs;
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(facade_handle, watchdog)

BOOST_AUTO_TEST_CASE(handle_reports_identity_shape_and_device) {
  cache_fixture f;
  auto h = f.alloc(f.req(42, 7, 100));
  BOOST_TEST(h->id() == 42u);
  BOOST_TEST(h->device() == device{});
  BOOST_TEST(h->dtype() == dtype::fp32);
  BOOST_TEST(h->num_layers() == 2u);
  BOOST_TEST(h->num_heads() == 2u);
  BOOST_TEST(h->head_dim() == 8u);
  BOOST_TEST(h->max_sequence_length() == 100u);
  BOOST_TEST(h->num_tokens() == 7u);
  BOOST_TEST(h->is_valid());
  BOOST_TEST(static_cast<bool>(h->actor()));
  BOOST_TEST((h->actor() == f.m().get_handle(42)->actor()));
  // The handle actor answers directly, too.
  caf::scoped_actor self{*f.sys};
  self->request(h->actor(), caf::infinite, info_atom::value)
    .receive([&](const request_info& info) {
               BOOST_TEST(info.request.id == 42u);
               BOOST_TEST(info.cache_id != 0u);
             },
             [&](caf::error& err) { BOOST_FAIL(render(err)); });
  // cache_id: unique per request, shared by references.
  std::set<std::uint64_t> ids{h->cache_id()};
  for (request_id id = 1; id <= 10; ++id)
    BOOST_TEST(ids.insert(f.alloc(f.req(id, 1))->cache_id()).second);
  BOOST_TEST(ids.count(0) == 0u);
}

BOOST_AUTO_TEST_CASE(paged_views_cover_the_shared_pools) {
  cache_fixture f;
  auto h = f.alloc(f.req(1, 6));
  auto k0 = h->key_cache(0);
  BOOST_REQUIRE_MESSAGE(k0, why(k0));
  BOOST_REQUIRE(k0->has_value());
  auto& k = **k0;
  BOOST_TEST(k.shape == dims({64, 4, 2, 8}), boost::test_tools::per_element());
  BOOST_TEST(k.strides == dims({64, 16, 8, 1}), boost::test_tools::per_element());
  BOOST_TEST(k.device == device{});
  BOOST_TEST(k.dtype == dtype::fp32);
  BOOST_TEST(k.numel() == 64 * 4 * 2 * 8);
  BOOST_REQUIRE(k.data != nullptr);
  auto v0 = h->value_cache(0);
  BOOST_REQUIRE(v0 && *v0);
  auto& v = **v0;
  BOOST_TEST(v.shape == k.shape, boost::test_tools::per_element());
  BOOST_TEST(v.strides == k.strides, boost::test_tools::per_element());
  auto plane = 64 * 256;
  BOOST_TEST(static_cast<char*>(v.data) == static_cast<char*>(k.data) + plane);
  auto kv0 = h->kv_cache(0);
  BOOST_REQUIRE(kv0 && *kv0);
  auto& kv = **kv0;
  BOOST_TEST(kv.shape == dims({2, 64, 4, 2, 8}), boost::test_tools::per_element());
  BOOST_TEST(kv.strides == dims({4096, 64, 16, 8, 1}),
             boost::test_tools::per_element());
  BOOST_TEST(kv.data == k.data);
  BOOST_TEST(kv.dtype == dtype::fp32);
  // Layer 1 is another pair of planes.
  auto k1 = h->key_cache(1);
  BOOST_REQUIRE(k1 && *k1);
  BOOST_TEST(static_cast<char*>((*k1)->data) == static_cast<char*>(k.data) + 2 * plane);
  // A write through one view is seen through the others.
  auto b = h->table().blocks[1];
  static_cast<float*>(k.data)[b * 64 + 17] = 3.5f;
  static_cast<float*>(v.data)[b * 64 + 17] = -3.5f;
  BOOST_TEST(static_cast<float*>(kv.data)[b * 64 + 17] == 3.5f);
  BOOST_TEST(static_cast<float*>(kv.data)[4096 + b * 64 + 17] == -3.5f);
  // Out of range.
  KV_CHECK_ERROR(error_of(h->key_cache(2)), errc::invalid_request, "layer 2",
                 "num_layers 2");
  KV_CHECK_ERROR(error_of(h->value_cache(7)), errc::invalid_request, "layer 7");
  KV_CHECK_ERROR(error_of(h->kv_cache(2)), errc::invalid_request, "layer 2");
}

BOOST_AUTO_TEST_CASE(storage_none_serves_no_views) {
  cache_fixture f{small_config(64, "none")};
  auto h = f.alloc(f.req(1, 6));
  BOOST_TEST(h->table().blocks.size() == 2u);
  for (std::uint32_t l = 0; l < 2; ++l) {
    for (auto view : {h->key_cache(l), h->value_cache(l), h->kv_cache(l)}) {
      BOOST_REQUIRE_MESSAGE(view, why(view));
      BOOST_TEST(!view->has_value());
    }
  }
  KV_CHECK_ERROR(error_of(h->key_cache(2)), errc::invalid_request, "layer 2");
  // Bookkeeping works as on host: fork and copy-on-write included.
  auto c = f.m().fork(1, 2);
  BOOST_REQUIRE_MESSAGE(c, why(c));
  BOOST_TEST(!f.m().extend(**c, 1));
  BOOST_TEST((*c)->table().blocks[1] != h->table().blocks[1]);
  BOOST_TEST(f.used_blocks() == 3u);
}

BOOST_AUTO_TEST_CASE(clone_handle_is_the_same_cache_not_a_copy) {
  cache_fixture f;
  auto h = f.alloc(f.req(1, 5));
  auto c = h->clone_handle();
  auto cc = c->clone_handle();
  BOOST_TEST(c.get() != h.get());
  for (auto* r : {c.get(), cc.get()}) {
    BOOST_TEST(r->is_valid());
    BOOST_TEST(r->id() == 1u);
    BOOST_TEST(r->cache_id() == h->cache_id());
    BOOST_TEST((r->actor() == h->actor()));
    BOOST_TEST(r->table() == h->table());
  }
  // Growth through the clone is growth of the original.
  BOOST_TEST(!f.m().extend(*c, 4));
  BOOST_TEST(h->num_tokens() == 9u);
  BOOST_TEST(cc->table() == h->table());
  BOOST_TEST(f.used_blocks() == 3u);
  BOOST_TEST(f.checked_stats().active_caches == 1u);
  // Same memory, same views.
  BOOST_TEST((*h->key_cache(0))->data == (*c->key_cache(0))->data);
}

BOOST_AUTO_TEST_CASE(handle_stats_follow_the_request) {
  cache_fixture f;
  auto h = f.alloc(f.req(1, 6));
  auto s = h->stats();
  BOOST_TEST(s.blocks_allocated == 2u);
  BOOST_TEST(s.tokens_stored == 6u);
  BOOST_TEST(s.memory_bytes == 2u * test_bytes_per_block);
  BOOST_TEST(s.utilization == 0.75);
  BOOST_TEST(s.last_access > 0u);
  std::this_thread::sleep_for(std::chrono::milliseconds{2});
  BOOST_TEST(!f.m().extend(*h, 5));
  auto s2 = h->stats();
  BOOST_TEST(s2.blocks_allocated == 3u);
  BOOST_TEST(s2.tokens_stored == 11u);
  BOOST_TEST(s2.memory_bytes == 3u * test_bytes_per_block);
  BOOST_TEST(s2.utilization == 11.0 / 12.0);
  BOOST_TEST(s2.last_access > s.last_access);
}

// stats() answers zeros on any failure; checked_stats() says which, so a
// zero prefix_hit_tokens read through it means nothing was cached.
BOOST_AUTO_TEST_CASE(checked_stats_tells_zeros_from_an_end) {
  cache_fixture f;
  auto prompt = iota_tokens(1, 9); // 2 full blocks of 4 and a token
  f.alloc(f.req(1, 0, 256, prompt));
  auto h = f.alloc(f.req(2, 0, 256, prompt));
  auto s = h->checked_stats();
  BOOST_REQUIRE_MESSAGE(s, why(s));
  BOOST_TEST(s->prefix_hit_tokens == 8u);
  BOOST_TEST(s->tokens_stored == 9u);
  BOOST_TEST(s->blocks_allocated == h->stats().blocks_allocated);
  BOOST_REQUIRE(!f.m().deallocate(2));
  KV_CHECK_ERROR(error_of(h->checked_stats()), errc::invalid_handle,
                 "request 2");
  BOOST_TEST(h->stats().prefix_hit_tokens == 0u);
}

// table() is empty on any failure (ferrum's contract returns a plain
// table); checked_table() says which: a request that ended is
// invalid_handle, a stopped cache shutting_down, and a call that ran out of
// time request_timeout - never "ended" for a live request.
BOOST_AUTO_TEST_CASE(checked_table_tells_an_end_from_a_timeout) {
  std::shared_ptr<kv_cache_handle> h;
  {
    cache_fixture f{small_config(4096)};
    constexpr std::uint64_t tokens = test_block_size * 2000; // a long table
    h = f.alloc(f.req(1, tokens, tokens));
    auto t = h->checked_table();
    BOOST_REQUIRE(t);
    BOOST_TEST(t->num_tokens == tokens);
    BOOST_TEST(t->blocks == h->table().blocks);
    std::size_t timed_out = 0;
    for (int i = 0; i < 200; ++i) {
      BOOST_REQUIRE(!f.m().set_timeout(std::chrono::milliseconds{0}));
      auto got = h->checked_table();
      BOOST_REQUIRE(!f.m().set_timeout(std::chrono::seconds{60}));
      if (got) {
        BOOST_REQUIRE_EQUAL(got->num_tokens, tokens);
      } else {
        BOOST_REQUIRE_MESSAGE(got.error() == caf::sec::request_timeout,
                              render(got.error()));
        ++timed_out;
      }
      BOOST_REQUIRE(h->is_valid());
    }
    BOOST_TEST_MESSAGE(timed_out << " of 200 table reads timed out");
    BOOST_REQUIRE(!f.m().deallocate(1));
    KV_CHECK_ERROR(error_of(h->checked_table()), errc::invalid_handle,
                   "request 1 has ended");
    BOOST_TEST(h->table().blocks.empty());
  }
  KV_CHECK_ERROR(error_of(h->checked_table()), errc::invalid_handle);
}

BOOST_AUTO_TEST_CASE(contiguous_layout_serves_what_was_written_into_the_blocks) {
  auto cfg = small_config();
  cfg.layout = "contiguous";
  cfg.prefix_caching = false;
  cfg.num_host_blocks = 8;
  cache_fixture f{cfg};
  auto h = f.alloc(f.req(1, 6, 10));
  BOOST_REQUIRE(dynamic_cast<contiguous_kv_cache_handle*>(h.get()) != nullptr);
  BOOST_TEST(h->table().blocks.size() == 2u);
  write_tokens(*h, 0, 6);
  const std::size_t row = 2 * 8;
  auto check_layer = [&](std::uint32_t l, std::uint64_t tokens) {
    auto k = h->key_cache(l);
    auto v = h->value_cache(l);
    auto kv = h->kv_cache(l);
    BOOST_REQUIRE_MESSAGE(k && *k, why(k));
    BOOST_REQUIRE(v && *v && kv && *kv);
    BOOST_TEST((*k)->shape == dims({10, 2, 8}), boost::test_tools::per_element());
    BOOST_TEST((*k)->strides == dims({16, 8, 1}), boost::test_tools::per_element());
    BOOST_TEST((*k)->device == device{});
    BOOST_TEST((*k)->dtype == dtype::fp32);
    BOOST_TEST((*kv)->shape == dims({2, 10, 2, 8}),
               boost::test_tools::per_element());
    BOOST_TEST((*kv)->strides == dims({160, 16, 8, 1}),
               boost::test_tools::per_element());
    auto kp = static_cast<const float*>((*k)->data);
    auto vp = static_cast<const float*>((*v)->data);
    auto kvp = static_cast<const float*>((*kv)->data);
    std::size_t wrong = 0;
    for (std::uint64_t i = 0; i < 10; ++i)
      for (std::size_t e = 0; e < row; ++e) {
        auto want = i < tokens ? pattern(l, i, e) : 0.0f;
        auto want_v = i < tokens ? -pattern(l, i, e) : 0.0f;
        wrong += kp[i * row + e] != want;
        wrong += vp[i * row + e] != want_v;
        wrong += kvp[i * row + e] != want;
        wrong += kvp[10 * row + i * row + e] != want_v;
      }
    BOOST_TEST(wrong == 0u, "layer " << l << ": " << wrong << " wrong values");
  };
  check_layer(0, 6);
  check_layer(1, 6);
  // Each call refreshes from the cache.
  BOOST_TEST(!f.m().extend(*h, 3));
  write_tokens(*h, 6, 9);
  check_layer(0, 9);
  check_layer(1, 9);
  KV_CHECK_ERROR(error_of(h->key_cache(2)), errc::invalid_request, "layer 2");
  // Swapped out, its K/V are in the host tier: said so, then served again.
  BOOST_REQUIRE(!f.m().swap_out(1));
  BOOST_TEST(!h->table().holds_tokens());
  KV_CHECK_ERROR(error_of(h->key_cache(0)), errc::invalid_request,
                 "request 1 is swapped out");
  BOOST_REQUIRE(!f.m().swap_in(1));
  check_layer(0, 9);
  auto c = h->clone_handle();
  BOOST_TEST(dynamic_cast<contiguous_kv_cache_handle*>(c.get()) != nullptr);
  BOOST_REQUIRE(!f.m().deallocate(1));
  KV_CHECK_ERROR(error_of(c->key_cache(0)), errc::invalid_handle);
}

// A view keeps its memory: a contiguous snapshot is the caller's own (a
// later view does not overwrite it), and a DLPack export holds the memory
// past the handle, the request and the cache itself until its deleter.
BOOST_AUTO_TEST_CASE(views_and_their_dlpack_exports_keep_their_memory) {
  for (auto layout : {"contiguous", "paged"}) {
    BOOST_TEST_CONTEXT(layout) {
      auto cfg = small_config();
      cfg.layout = layout;
      cfg.prefix_caching = false;
      std::weak_ptr<void> memory;
      DLManagedTensor* exported = nullptr;
      std::vector<float> seen;
      {
        cache_fixture f{cfg};
        auto h = f.alloc(f.req(1, 6, 10));
        write_tokens(*h, 0, 6);
        auto before = h->key_cache(0);
        BOOST_REQUIRE(before && *before);
        BOOST_REQUIRE(!f.m().extend(*h, 3));
        write_tokens(*h, 6, 9);
        auto after = h->key_cache(0);
        BOOST_REQUIRE(after && *after);
        BOOST_REQUIRE((*after)->owner != nullptr);
        const std::size_t row = 2 * 8;
        if (cfg.layout == "contiguous") {
          // Token 7's row: zero in the first snapshot, written in the second.
          auto b = static_cast<const float*>((*before)->data);
          auto a = static_cast<const float*>((*after)->data);
          BOOST_TEST(b[7 * row] == 0.0f);
          BOOST_TEST(a[7 * row] == pattern(0, 7, 0));
        }
        auto t = to_dlpack(**after);
        BOOST_REQUIRE_MESSAGE(t, why(t));
        exported = *t;
        memory = (*after)->owner;
        auto p = static_cast<const float*>(exported->dl_tensor.data);
        seen.assign(p, p + 4 * row);
      } // the handle, the request, the facade and the actor system go
      BOOST_TEST(!memory.expired());
      auto p = static_cast<const float*>(exported->dl_tensor.data);
      BOOST_TEST(std::vector<float>(p, p + seen.size()) == seen,
                 boost::test_tools::per_element());
      exported->deleter(exported);
      BOOST_TEST(memory.expired());
    }
  }
}

BOOST_AUTO_TEST_CASE(dlpack_export_matches_the_view_and_its_deleter_frees) {
  cache_fixture f;
  auto h = f.alloc(f.req(1, 6));
  for (int part = 0; part < 3; ++part) {
    BOOST_TEST_CONTEXT("part " << part) {
      auto view = part == 0   ? h->key_cache(1)
                  : part == 1 ? h->value_cache(1)
                              : h->kv_cache(1);
      BOOST_REQUIRE(view && *view);
      auto& v = **view;
      auto before = live_allocations;
      counting_allocations = true;
      auto t = to_dlpack(v);
      auto during = live_allocations;
      // Copied into fixed arrays: nothing may allocate while counting.
      DLTensor copy{};
      std::int64_t shape_buf[8] = {};
      std::int64_t strides_buf[8] = {};
      if (t && (*t)->dl_tensor.ndim <= 8) {
        copy = (*t)->dl_tensor;
        std::copy(copy.shape, copy.shape + copy.ndim, shape_buf);
        std::copy(copy.strides, copy.strides + copy.ndim, strides_buf);
        (*t)->deleter(*t);
      }
      auto after = live_allocations;
      counting_allocations = false;
      BOOST_REQUIRE_MESSAGE(t, why(t));
      BOOST_REQUIRE(copy.ndim <= 8);
      std::vector<std::int64_t> shape(shape_buf, shape_buf + copy.ndim);
      std::vector<std::int64_t> strides(strides_buf, strides_buf + copy.ndim);
      BOOST_TEST(during > before);
      BOOST_TEST(after == before, "deleter left " << after - before
                                                  << " allocations behind");
      BOOST_TEST(copy.data == v.data);
      BOOST_TEST(copy.ndim == static_cast<int>(v.shape.size()));
      BOOST_TEST(shape == v.shape, boost::test_tools::per_element());
      BOOST_TEST(strides == v.strides, boost::test_tools::per_element());
      BOOST_TEST(copy.byte_offset == 0u);
      BOOST_TEST(copy.device.device_type == kDLCPU);
      BOOST_TEST(copy.device.device_id == 0);
      BOOST_TEST(copy.dtype.code == kDLFloat);
      BOOST_TEST(copy.dtype.bits == 32);
      BOOST_TEST(copy.dtype.lanes == 1);
    }
  }
  // The mappings of every dtype and device, and an empty view.
  BOOST_TEST(to_dl_dtype(dtype::fp16).code == kDLFloat);
  BOOST_TEST(to_dl_dtype(dtype::fp16).bits == 16);
  BOOST_TEST(to_dl_dtype(dtype::bf16).code == kDLBfloat);
  BOOST_TEST(to_dl_dtype(dtype::bf16).bits == 16);
  BOOST_TEST(to_dl_dtype(dtype::fp8_e4m3).code == kDLUInt);
  BOOST_TEST(to_dl_dtype(dtype::fp8_e4m3).bits == 8);
  BOOST_TEST(to_dl_dtype(dtype::int8).code == kDLInt);
  BOOST_TEST(to_dl_dtype(dtype::int8).bits == 8);
  auto cuda = to_dl_device(device{device_kind::cuda, 1});
  BOOST_TEST(cuda.device_type == kDLCUDA);
  BOOST_TEST(cuda.device_id == 1);
  KV_CHECK_ERROR(error_of(to_dlpack(tensor_view{})), errc::invalid_request,
                 "to_dlpack");
  // A view built by hand with a value that names no dtype: refused, not
  // exported with an uninitialised type.
  auto stray = **h->key_cache(1);
  stray.dtype = static_cast<dtype>(42);
  BOOST_TEST(to_dl_dtype(stray.dtype).bits == 0);
  KV_CHECK_ERROR(error_of(to_dlpack(stray)), errc::invalid_request,
                 "dtype (42)");
}

BOOST_AUTO_TEST_SUITE_END()
