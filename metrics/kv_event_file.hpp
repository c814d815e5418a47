// A JSON-lines file of KV events that survives a failed write: a batch the
// file system refuses (a full disk, a file-size limit, an I/O error) is
// taken back whole - the file keeps whole lines only - and counted lost,
// and the next batch is tried again. A reader sees lost batches as a gap in
// "seq"; the owner sees them in stats(). No CAF here: the facade's writer
// actor owns one and calls write() from its own thread.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "kvactor/messages/error.hpp"
#include "kvactor/messages/protocol.hpp"

namespace kvactor {

/// What a KV-event file took and lost so far.
struct kv_event_file_stats {
  std::string path;                  ///< as it was named when opened
  std::uint64_t batches_written = 0; ///< whole lines in the file
  std::uint64_t batches_lost = 0;    ///< refused by the file system
  std::uint64_t first_lost_seq = 0;  ///< seq of the first lost batch, or 0
  std::uint64_t last_lost_seq = 0;   ///< seq of the latest lost batch, or 0
  /// Why the latest lost batch was refused ("No space left on device"),
  /// empty while none was.
  std::string last_error;
};

class kv_event_file {
public:
  /// Opens (creating it if need be, mode 0644) `path` for appending.
  /// Errors: invalid_request naming the path and the system's reason.
  static caf::expected<std::unique_ptr<kv_event_file>> open(const std::string& path);

  ~kv_event_file();
  kv_event_file(const kv_event_file&) = delete;
  kv_event_file& operator=(const kv_event_file&) = delete;

  /// The file's device and inode: one writer per file, however named.
  std::uint64_t device() const { return device_; }
  std::uint64_t inode() const { return inode_; }

  /// Appends `batch` as one JSON line. Returns false if the file system
  /// refused it: nothing of it stays in the file (a regular file is cut
  /// back to where it ended; a device or a pipe cannot be) and it is
  /// counted lost.
  bool write(const kv_event_batch& batch);

  /// A snapshot; safe from any thread.
  kv_event_file_stats stats() const;

private:
  kv_event_file(int fd, std::string path, std::uint64_t device,
                std::uint64_t inode);
  /// Writes all of `line`, or returns errno of the failure; SIGXFSZ
  /// blocked meanwhile (a size limit is EFBIG, not the process's end).
  int write_all(const std::string& line);
  int write_blocked(const std::string& line);

  int fd_;
  std::uint64_t device_;
  std::uint64_t inode_;
  mutable std::mutex mtx_; ///< guards stats_
  kv_event_file_stats stats_;
};

} // namespace kvactor
