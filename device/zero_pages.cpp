// zero_pages: calloc below 2 MiB, anonymous huge-page-advised memory above
// (zero_pages.hpp).
#include "kvactor/device/zero_pages.hpp"

#include <cstdlib>

#include <sys/mman.h>

namespace kvactor {

namespace {

constexpr std::size_t huge_page = std::size_t{2} << 20;

} // namespace

std::byte* allocate_zero_pages(std::size_t bytes) {
  if (bytes == 0)
    return nullptr;
  if (bytes < huge_page)
    return static_cast<std::byte*>(std::calloc(bytes, 1));
  void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    return nullptr;
  // Advice: ignored where transparent huge pages are off. The cost: a page
  // first written brings its whole 2 MiB in.
  ::madvise(m, bytes, MADV_HUGEPAGE);
  return static_cast<std::byte*>(m);
}

void release_zero_pages(std::byte* p, std::size_t bytes) noexcept {
  if (p == nullptr)
    return;
  if (bytes < huge_page)
    std::free(p);
  else
    ::munmap(p, bytes);
}

} // namespace kvactor
