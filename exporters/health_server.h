// /healthz and /readyz for Kubernetes probes, on their own port (--health-address): the metrics
// endpoint cannot answer 503. Liveness means the agent's main loop is still turning; readiness
// means BPF is loaded and the first target scan is done (with or without targets: a master
// without an apiserver yet still exports metrics and alerts on "target not attached").
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "agent/core/result.h"

struct mg_context;
struct mg_connection;

namespace stormwatch {

class HealthServer {
 public:
  static Result<std::unique_ptr<HealthServer>> Start(const std::string& address,
                                                     int64_t stall_limit_ns = 10'000'000'000);
  ~HealthServer();
  HealthServer(const HealthServer&) = delete;
  HealthServer& operator=(const HealthServer&) = delete;

  void Beat(int64_t monotonic_ns) { last_beat_ns_.store(monotonic_ns); }
  void SetReady(bool ready) { ready_.store(ready); }

 private:
  HealthServer() = default;
  static int HandleHealthz(mg_connection* conn, void* self);
  static int HandleReadyz(mg_connection* conn, void* self);

  mg_context* ctx_ = nullptr;
  int64_t stall_limit_ns_ = 0;
  std::atomic<int64_t> last_beat_ns_{0};
  std::atomic<bool> ready_{false};
};

}  // namespace stormwatch
