// actor_slab: memory for actors of one size, reused last-freed-first. Every
// request spawns a handle actor and ends it; CAF allocates each with plain
// new, and at ~1.2 KB a handle is above glibc's per-thread cache (1,032
// bytes), so each spawn and each end went through malloc's general path:
// bins, coalescing with the neighbouring chunks - whose headers, among
// 100,000 live handles, are cold - and consolidation. That cost ~1 us per
// request end at 100,000 live requests (scale --churn-percent 100, against
// glibc's tunables raised to cache such chunks). A slab hands back the block
// the last ended handle left, still warm, with no neighbour to inspect.
//
// Thread-safe (a handle is spawned on one thread and may be destroyed on
// another); keeps at most `max_cached` free blocks and returns the rest to
// the heap, so its memory is bounded by that, not by the peak of live
// handles. Under AddressSanitizer a cached block is poisoned past its first
// pointer (the free list's link, left readable so that LeakSanitizer still
// finds the cached blocks), so a use after an actor's end is still
// reported. CAF-free.
#pragma once

#include <cstddef>
#include <mutex>
#include <new>

#if defined(__SANITIZE_ADDRESS__)
#  include <sanitizer/asan_interface.h>
#  define KVACTOR_SLAB_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#  define KVACTOR_SLAB_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#  define KVACTOR_SLAB_POISON(p, n) ((void) (p), (void) (n))
#  define KVACTOR_SLAB_UNPOISON(p, n) ((void) (p), (void) (n))
#endif

namespace kvactor::detail {

class actor_slab {
public:
  /// Blocks of `block_bytes` bytes (at least a pointer's worth).
  explicit actor_slab(std::size_t block_bytes, std::size_t max_cached = 1024)
    : bytes_(block_bytes < sizeof(node) ? sizeof(node) : block_bytes),
      max_cached_(max_cached) {
  }

  actor_slab(const actor_slab&) = delete;
  actor_slab& operator=(const actor_slab&) = delete;

  ~actor_slab() {
    while (head_ != nullptr) {
      auto next = pop();
      ::operator delete(next);
    }
  }

  /// A block of block_bytes(): the last one given back, or a new one.
  void* take() {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (head_ != nullptr) {
        ++reused_;
        return pop();
      }
      ++fresh_;
    }
    return ::operator new(bytes_);
  }

  /// Takes back a block from take(); cached unless max_cached are.
  void give(void* p) noexcept {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (cached_ < max_cached_) {
        auto n = static_cast<node*>(p);
        n->next = head_;
        head_ = n;
        ++cached_;
        KVACTOR_SLAB_POISON(n + 1, bytes_ - sizeof(node));
        return;
      }
    }
    ::operator delete(p);
  }

  std::size_t block_bytes() const noexcept {
    return bytes_;
  }

  /// Blocks waiting for reuse (free memory, though malloc counts it in
  /// use), their size, and how many takes reused one or were new.
  struct counts {
    std::size_t cached;
    std::size_t block_bytes;
    std::size_t reused;
    std::size_t fresh;
  };
  counts snapshot() {
    std::lock_guard<std::mutex> guard{mtx_};
    return {cached_, bytes_, reused_, fresh_};
  }

private:
  struct node {
    node* next;
  };

  /// REQUIRES: mtx_ held (or the slab unshared), head_ != nullptr.
  void* pop() noexcept {
    auto n = head_;
    KVACTOR_SLAB_UNPOISON(n + 1, bytes_ - sizeof(node));
    head_ = n->next;
    --cached_;
    return n;
  }

  std::mutex mtx_;
  node* head_ = nullptr;
  std::size_t cached_ = 0;
  std::size_t reused_ = 0;
  std::size_t fresh_ = 0;
  const std::size_t bytes_;
  const std::size_t max_cached_;
};

} // namespace kvactor::detail
