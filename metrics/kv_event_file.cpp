// kv_event_file: whole JSON lines of KV events, a refused batch taken back.
#include "kvactor/metrics/kv_event_file.hpp"

#include <cerrno>
#include <system_error>
#include <csignal>
#include <ctime>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "kvactor/metrics/kv_events.hpp"

namespace kvactor {

namespace {

/// The system's words for `err` (thread-safe, unlike strerror).
std::string reason(int err) {
  return std::system_category().message(err);
}

} // namespace

caf::expected<std::unique_ptr<kv_event_file>>
kv_event_file::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    auto why = reason(errno);
    return make_error(errc::invalid_request, "cannot open " + path + ": " + why);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    auto why = reason(errno);
    ::close(fd);
    return make_error(errc::invalid_request, "cannot stat " + path + ": " + why);
  }
  return std::unique_ptr<kv_event_file>{
    new kv_event_file(fd, path, static_cast<std::uint64_t>(st.st_dev),
                      static_cast<std::uint64_t>(st.st_ino))};
}

kv_event_file::kv_event_file(int fd, std::string path, std::uint64_t device,
                             std::uint64_t inode)
  : fd_(fd), device_(device), inode_(inode) {
  stats_.path = std::move(path);
}

kv_event_file::~kv_event_file() {
  ::close(fd_);
}

int kv_event_file::write_all(const std::string& line) {
  // A write past a file-size limit (RLIMIT_FSIZE) raises SIGXFSZ, whose
  // default kills the process: blocked on this thread while it writes, the
  // write fails with EFBIG instead, and the signal it left pending is
  // taken, so that unblocking it delivers nothing.
  sigset_t xfsz, before;
  sigemptyset(&xfsz);
  sigaddset(&xfsz, SIGXFSZ);
  pthread_sigmask(SIG_BLOCK, &xfsz, &before);
  auto err = write_blocked(line);
  if (err == EFBIG) {
    timespec none{0, 0};
    while (sigtimedwait(&xfsz, nullptr, &none) == SIGXFSZ) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  return err;
}

int kv_event_file::write_blocked(const std::string& line) {
  const char* p = line.data();
  auto left = line.size();
  while (left > 0) {
    auto n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return errno;
    }
    if (n == 0) // no progress and no error: treat as a full device
      return ENOSPC;
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  return 0;
}

bool kv_event_file::write(const kv_event_batch& batch) {
  auto line = to_json(batch).dump(-1, ' ', false,
                                  nlohmann::json::error_handler_t::replace);
  line += '\n';
  // Where the file ends now: a line written in part is cut back to it, so
  // that a reader never meets half a batch. The only writer of the file
  // (the facade makes one per file), so the end stays put meanwhile.
  struct stat st {};
  bool regular = ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode);
  auto err = write_all(line);
  if (err != 0 && regular)
    while (::ftruncate(fd_, st.st_size) != 0 && errno == EINTR) {
    }
  std::lock_guard<std::mutex> guard{mtx_};
  if (err == 0) {
    ++stats_.batches_written;
    return true;
  }
  ++stats_.batches_lost;
  if (stats_.first_lost_seq == 0)
    stats_.first_lost_seq = batch.seq;
  stats_.last_lost_seq = batch.seq;
  stats_.last_error = reason(err);
  return false;
}

kv_event_file_stats kv_event_file::stats() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return stats_;
}

} // namespace kvactor
