// The server side of remote_tests: the cache both processes agree on,
// `--serve PORT_FILE` (publish the manager on 127.0.0.1, write the port,
// wait to be killed) and server_process, which runs this binary that way
// and kills and reaps it on every path.
#pragma once

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>

#include "kvactor/actors/kv_cache_manager.hpp"
#include "kvactor/config/cache_config.hpp"
#include "kvactor/messages/error.hpp"

namespace kvtest {

using namespace kvactor;

// -- the server process ---------------------------------------------------------

/// The cache both processes agree on: 64 blocks of 4 tokens, a small model,
/// two tenants ("batch" limited to 8 blocks).
inline cache_config server_config() {
  cache_config cfg;
  cfg.block_size = 4;
  cfg.model.num_layers = 2;
  cfg.model.num_kv_heads = 2;
  cfg.model.head_dim = 8;
  cfg.model.dtype = dtype::fp32;
  cfg.storage = "host";
  cfg.num_gpu_blocks = 64;
  cfg.gc_interval_ms = 0;
  cfg.scheduler_threads = 2;
  tenant_config batch;
  batch.name = "batch";
  batch.max_blocks = 8;
  cfg.tenants.push_back(batch);
  return cfg;
}

/// `--serve PORT_FILE`: publish a cache's manager, write the port, wait to
/// be killed (at most five minutes: a backstop if the parent's kill fails).
inline int serve(const std::string& port_file) {
  alarm(300);
  auto cfg = server_config();
  caf::actor_system_config sys_cfg;
  configure(sys_cfg, cfg); // registers kvactor's message types
  sys_cfg.load<caf::io::middleman>();
  caf::actor_system sys{sys_cfg};
  auto mgr = kv_cache_manager::start(sys, cfg);
  if (!mgr) {
    std::fprintf(stderr, "server: %s\n", render(mgr.error()).c_str());
    return 1;
  }
  auto port = sys.middleman().publish(mgr->actor(), 0, "127.0.0.1");
  if (!port) {
    std::fprintf(stderr, "server: publish failed: %s\n",
                 sys.render(port.error()).c_str());
    return 1;
  }
  {
    // Written then renamed: the client never reads half a number.
    std::ofstream out{port_file + ".tmp"};
    out << *port << '\n';
  }
  std::rename((port_file + ".tmp").c_str(), port_file.c_str());
  for (;;)
    pause(); // until SIGKILL (or the alarm)
}

/// The server, started in the constructor, killed and reaped in the
/// destructor (and by the kernel if this process dies: PR_SET_PDEATHSIG).
class server_process {
public:
  server_process() {
    char dir[] = "/tmp/kvactor_remote_XXXXXX";
    if (mkdtemp(dir) == nullptr)
      throw std::runtime_error("mkdtemp failed");
    dir_ = dir;
    port_file_ = dir_ + "/port";
    auto parent = getpid();
    pid_ = fork();
    if (pid_ < 0)
      throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent)
        _exit(1);
      execl("/proc/self/exe", "remote_tests", "--serve", port_file_.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds{30};
    while (std::chrono::steady_clock::now() < until) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("server exited early, status "
                                 + std::to_string(status));
      }
      std::ifstream in{port_file_};
      unsigned port = 0;
      if (in >> port && port != 0) {
        port_ = static_cast<std::uint16_t>(port);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds{10});
    }
    stop();
    throw std::runtime_error("server did not publish within 30 s");
  }

  ~server_process() {
    stop();
  }

  server_process(const server_process&) = delete;
  server_process& operator=(const server_process&) = delete;

  std::uint16_t port() const noexcept {
    return port_;
  }

private:
  void stop() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    std::remove(port_file_.c_str());
    std::remove((port_file_ + ".tmp").c_str());
    rmdir(dir_.c_str());
  }

  std::string dir_;
  std::string port_file_;
  pid_t pid_ = -1;
  std::uint16_t port_ = 0;
};

} // namespace kvtest
