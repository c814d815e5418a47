// small_vector: a vector of trivially copyable T that keeps up to N
// elements inside itself and moves to the heap beyond that. The pool's
// sequences hold their block tables in one: a short table then shares the
// sequence's cache lines, and an extend at 100,000 live requests reads it
// without a further dependent miss on a heap array (the bookkeeping's cost
// at that size is its cache misses). Sized for that use: 32-bit size and
// capacity, so that small_vector<block_id, 14> is 64 bytes. The interface
// is std::vector's, as far as the pool uses it. CAF-free.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <iterator>
#include <new>
#include <type_traits>

namespace kvactor::detail {

template <class T, std::uint32_t N>
class small_vector {
  static_assert(std::is_trivially_copyable_v<T>,
                "small_vector copies its elements with memcpy");
  static_assert(N * sizeof(T) >= sizeof(T*), "room for the heap pointer");

public:
  using value_type = T;
  using size_type = std::size_t;
  using iterator = T*;
  using const_iterator = const T*;
  using reverse_iterator = std::reverse_iterator<T*>;
  using const_reverse_iterator = std::reverse_iterator<const T*>;

  small_vector() noexcept = default;

  small_vector(const small_vector& other) {
    assign(other.begin(), other.end());
  }

  small_vector(small_vector&& other) noexcept {
    take(other);
  }

  small_vector& operator=(const small_vector& other) {
    if (this != &other)
      assign(other.begin(), other.end());
    return *this;
  }

  small_vector& operator=(small_vector&& other) noexcept {
    if (this != &other) {
      release();
      take(other);
    }
    return *this;
  }

  ~small_vector() {
    release();
  }

  // -- access --------------------------------------------------------------------

  std::size_t size() const noexcept {
    return size_;
  }
  bool empty() const noexcept {
    return size_ == 0;
  }
  std::size_t capacity() const noexcept {
    return on_heap() ? cap_ : N;
  }
  /// Whether the elements live inside the vector (tests read it).
  bool is_inline() const noexcept {
    return !on_heap();
  }

  T* data() noexcept {
    return on_heap() ? heap_ : inline_;
  }
  const T* data() const noexcept {
    return on_heap() ? heap_ : inline_;
  }

  T& operator[](std::size_t i) noexcept {
    assert(i < size_);
    return data()[i];
  }
  const T& operator[](std::size_t i) const noexcept {
    assert(i < size_);
    return data()[i];
  }
  T& back() noexcept {
    assert(size_ > 0);
    return data()[size_ - 1];
  }
  const T& back() const noexcept {
    assert(size_ > 0);
    return data()[size_ - 1];
  }

  iterator begin() noexcept {
    return data();
  }
  iterator end() noexcept {
    return data() + size_;
  }
  const_iterator begin() const noexcept {
    return data();
  }
  const_iterator end() const noexcept {
    return data() + size_;
  }
  reverse_iterator rbegin() noexcept {
    return reverse_iterator{end()};
  }
  reverse_iterator rend() noexcept {
    return reverse_iterator{begin()};
  }
  const_reverse_iterator rbegin() const noexcept {
    return const_reverse_iterator{end()};
  }
  const_reverse_iterator rend() const noexcept {
    return const_reverse_iterator{begin()};
  }

  // -- modifiers -----------------------------------------------------------------

  void push_back(T x) {
    if (size_ == capacity())
      reserve(std::size_t{size_} * 2);
    data()[size_++] = x;
  }

  void pop_back() noexcept {
    assert(size_ > 0);
    --size_;
  }

  /// Empties it; a heap buffer stays for the next elements.
  void clear() noexcept {
    size_ = 0;
  }

  void reserve(std::size_t n) {
    if (n <= capacity())
      return;
    auto* fresh = static_cast<T*>(::operator new(n * sizeof(T)));
    if (size_ > 0)
      std::memcpy(fresh, data(), size_ * sizeof(T));
    release();
    heap_ = fresh;
    cap_ = static_cast<std::uint32_t>(n);
  }

  template <class It>
  void assign(It first, It last) {
    auto n = static_cast<std::size_t>(std::distance(first, last));
    size_ = 0;
    reserve(n);
    std::copy(first, last, data());
    size_ = static_cast<std::uint32_t>(n);
  }

  friend bool operator==(const small_vector& x, const small_vector& y) noexcept {
    return x.size_ == y.size_
           && (x.size_ == 0
               || std::memcmp(x.data(), y.data(), x.size_ * sizeof(T)) == 0);
  }
  friend bool operator!=(const small_vector& x, const small_vector& y) noexcept {
    return !(x == y);
  }

private:
  bool on_heap() const noexcept {
    return cap_ > N;
  }

  void release() noexcept {
    if (on_heap())
      ::operator delete(heap_);
    cap_ = 0;
  }

  /// Takes other's elements (a heap buffer by pointer); leaves it empty.
  /// REQUIRES: this holds no heap buffer.
  void take(small_vector& other) noexcept {
    size_ = other.size_;
    cap_ = other.cap_;
    if (other.on_heap())
      heap_ = other.heap_;
    else if (size_ > 0)
      std::memcpy(inline_, other.inline_, size_ * sizeof(T));
    other.size_ = 0;
    other.cap_ = 0;
  }

  std::uint32_t size_ = 0;
  /// Heap capacity; 0 while the elements are inline (capacity N).
  std::uint32_t cap_ = 0;
  union {
    T inline_[N];
    T* heap_;
  };
};

} // namespace kvactor::detail
