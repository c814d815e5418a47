// chunked_vector: a sequence of T in fixed chunks of 2^ChunkBits elements
// that never move - growth adds a chunk and copies nothing. The pool's
// sequences (block_pool_core) and id_map's entries (the manager's registry
// among them) live in them. In a std::vector each doubling moved every live
// element inside one call: the pool's sequences took 76 ms at the 65,537th
// live request on the 2-core VM, the registry ~50 ms (mostly page faults on
// the new buffer: ~11 us per 4 KiB page there), each a stall of an actor
// that every request waits on. Memory freshly written by such a move was
// also slow to read for a while after (the first extend of each of 100,000
// requests cost ~1.5 us, later ones ~0.15 us; a plain program growing a
// vector the same way shows the same on this VM). A chunk's memory is taken
// raw and each element built as it is added, so its pages are first touched
// one at a time. References and indices stay valid until their element is
// popped.
//
// The pool and the maps that grow with the live requests take chunks of
// 4,096 elements (1 MiB of sequences): with 256 (64 KiB) each extend at
// 100,000 live requests cost ~4% more than with the one vector (scale
// --churn-percent 0, alternated runs), the sequences being scattered in
// small pieces among the heap's other objects. Untouched pages of a chunk
// cost address space only. CAF-free.
#pragma once

#include <cassert>
#include <cstddef>
#include <iterator>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace kvactor::detail {

template <class T, unsigned ChunkBits>
class chunked_vector {
public:
  static constexpr std::size_t chunk_size = std::size_t{1} << ChunkBits;

  chunked_vector() = default;
  chunked_vector(const chunked_vector&) = delete;
  chunked_vector& operator=(const chunked_vector&) = delete;
  ~chunked_vector() {
    clear();
  }

  std::size_t size() const noexcept {
    return size_;
  }
  bool empty() const noexcept {
    return size_ == 0;
  }

  T& operator[](std::size_t i) noexcept {
    assert(i < size_);
    return chunks_[i >> ChunkBits].get()[i & (chunk_size - 1)];
  }
  const T& operator[](std::size_t i) const noexcept {
    assert(i < size_);
    return chunks_[i >> ChunkBits].get()[i & (chunk_size - 1)];
  }
  T& back() noexcept {
    return (*this)[size_ - 1];
  }

  /// Builds an element at index size(); a new chunk if the last is full.
  template <class... Args>
  T& emplace_back(Args&&... args) {
    if (size_ == chunks_.size() * chunk_size) {
      chunk c{static_cast<T*>(
        ::operator new(chunk_size * sizeof(T), std::align_val_t{alignof(T)}))};
      chunks_.push_back(std::move(c));
    }
    auto p = &chunks_[size_ >> ChunkBits].get()[size_ & (chunk_size - 1)];
    new (p) T(std::forward<Args>(args)...);
    ++size_;
    return *p;
  }

  /// Destroys the last element (its chunk's memory stays for the next).
  void pop_back() noexcept {
    assert(size_ > 0);
    back().~T();
    --size_;
  }

  /// Destroys every element and frees every chunk.
  void clear() noexcept {
    while (size_ > 0)
      pop_back();
    chunks_.clear();
  }

  /// Forward iteration by index (an iterator is its container and index).
  template <bool Const>
  class basic_iterator {
  public:
    using owner = std::conditional_t<Const, const chunked_vector, chunked_vector>;
    using iterator_category = std::forward_iterator_tag;
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using reference = std::conditional_t<Const, const T&, T&>;
    using pointer = std::conditional_t<Const, const T*, T*>;

    basic_iterator() = default;
    basic_iterator(owner* v, std::size_t i) noexcept : v_(v), i_(i) {
    }
    std::size_t index() const noexcept {
      return i_;
    }
    reference operator*() const noexcept {
      return (*v_)[i_];
    }
    pointer operator->() const noexcept {
      return &(*v_)[i_];
    }
    basic_iterator& operator++() noexcept {
      ++i_;
      return *this;
    }
    basic_iterator operator++(int) noexcept {
      auto old = *this;
      ++i_;
      return old;
    }
    friend bool operator==(const basic_iterator& x,
                           const basic_iterator& y) noexcept {
      return x.i_ == y.i_ && x.v_ == y.v_;
    }
    friend bool operator!=(const basic_iterator& x,
                           const basic_iterator& y) noexcept {
      return !(x == y);
    }

  private:
    owner* v_ = nullptr;
    std::size_t i_ = 0;
  };
  using iterator = basic_iterator<false>;
  using const_iterator = basic_iterator<true>;

  iterator begin() noexcept {
    return {this, 0};
  }
  iterator end() noexcept {
    return {this, size_};
  }
  const_iterator begin() const noexcept {
    return {this, 0};
  }
  const_iterator end() const noexcept {
    return {this, size_};
  }

private:
  struct release_chunk {
    void operator()(T* p) const noexcept {
      ::operator delete(p, std::align_val_t{alignof(T)});
    }
  };
  using chunk = std::unique_ptr<T, release_chunk>;
  std::vector<chunk> chunks_;
  std::size_t size_ = 0;
};

} // namespace kvactor::detail
