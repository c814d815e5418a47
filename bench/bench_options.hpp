// bench_options: the benchmarks' "--name value" command lines. A lone
// trailing option, an unknown one or a value that is not a count prints the
// usage and fails (main exits 2), rather than running on the defaults and
// printing figures for a run nobody asked for (`scale --help` used to run
// scale).
//
//   if (!kvactor::bench::parse_options(argc, argv, usage,
//         [&](const std::string& name, const std::string& value) {
//           if (name == "--steps") steps = count(value);
//           else return false;           // unknown
//           return true;
//         }))
//     return 2;
#pragma once

#include <cstdint>
#include <iostream>
#include <stdexcept>
#include <string>

namespace kvactor::bench {

/// `value` as an unsigned count in [min, max]: decimal digits only
/// (std::stoull would take "-1" as 2^64 - 1, and "8x" as 8). Throws
/// std::invalid_argument.
inline std::uint64_t count(const std::string& value,
                           std::uint64_t max = UINT32_MAX,
                           std::uint64_t min = 0) {
  if (value.empty() || value.size() > 19
      || value.find_first_not_of("0123456789") != std::string::npos
      || std::stoull(value) > max || std::stoull(value) < min)
    throw std::invalid_argument{"not a count"};
  return std::stoull(value);
}

/// Calls set(name, value) for each pair of arguments; set returns false
/// for a name it does not know and may throw std::invalid_argument for a
/// bad value. On any failure prints what was wrong and `usage` to stderr
/// and returns false.
template <class Set>
bool parse_options(int argc, char** argv, const char* usage, Set&& set) {
  for (int i = 1; i < argc; i += 2) {
    std::string name = argv[i];
    if (name == "--help" || name == "-h") {
      std::cerr << usage;
      return false;
    }
    if (i + 1 >= argc) {
      std::cerr << name << ": needs a value\n" << usage;
      return false;
    }
    std::string value = argv[i + 1];
    try {
      if (!set(name, value)) {
        std::cerr << "unknown option " << name << '\n' << usage;
        return false;
      }
    } catch (const std::exception&) {
      std::cerr << name << ": not a count in range: " << value << '\n'
                << usage;
      return false;
    }
  }
  return true;
}

} // namespace kvactor::bench
