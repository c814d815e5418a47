// zero_pages: zeroed host memory that costs nothing until it is written -
// calloc below 2 MiB; from there, fresh anonymous pages advised as huge
// pages, so what is written faults in 2 MiB at a time, not 4 KiB. A 4 KiB
// fault costs ~10 us on the development VM (bench/NOTES.md, "Page faults"):
// so touched, a full 32 MiB contiguous view took 91 ms and host swaps ran
// at 13-15 GB/s; with huge pages, 8 ms and 16.5-17 GB/s. Serves the host
// backend's pools and the contiguous handle's snapshots.
#pragma once

#include <cstddef>

namespace kvactor {

/// `bytes` of zeroed memory, or null if it cannot be had (or `bytes` is 0).
std::byte* allocate_zero_pages(std::size_t bytes);

/// Releases what allocate_zero_pages(`bytes`) gave; null releases nothing.
void release_zero_pages(std::byte* p, std::size_t bytes) noexcept;

} // namespace kvactor
