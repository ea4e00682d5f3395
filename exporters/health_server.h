// /healthz and /readyz for Kubernetes probes, on their own port (--health-address): the metrics
// endpoint cannot answer 503. /debug/clients answers "who is calling, from where" as JSON: the
// busiest clients and the peer IPs they connect from (no labels on metrics could hold that);
// /debug/top their request, LIST, 409 and 429 counters, APF level and storms (`stormwatch top`).
// /debug/* is served apart (--debug-address, loopback by default): it names clients and their
// IPs, and the health port is open to the kubelet (often the whole pod network). One server
// serves both groups when the two addresses are the same.
// Liveness means the agent's main loop is still turning. Readiness means BPF is loaded, the
// first target scan is done and every target found is attached: a target refused (a binary the
// agent cannot read or probe) makes /readyz fail with the reason, so a rollout onto a control
// plane the agent cannot capture stops visibly. A master with no target yet is ready (it still
// exports metrics and says "no target" in them).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "agent/core/result.h"

struct mg_context;
struct mg_connection;

namespace stormwatch {

class HealthServer {
 public:
  // Which handlers a server has.
  enum Routes : unsigned { kHealthRoutes = 1, kDebugRoutes = 2 };
  static Result<std::unique_ptr<HealthServer>> Start(const std::string& address,
                                                     unsigned routes = kHealthRoutes,
                                                     int64_t stall_limit_ns = 10'000'000'000);
  ~HealthServer();
  HealthServer(const HealthServer&) = delete;
  HealthServer& operator=(const HealthServer&) = delete;

  void Beat(int64_t monotonic_ns) { last_beat_ns_.store(monotonic_ns); }
  // `why_not`: the 503 body while not ready.
  void SetReady(bool ready, std::string why_not = "starting") {
    std::lock_guard lock(debug_clients_mutex_);
    why_not_ready_ = std::move(why_not);
    ready_.store(ready);
  }
  // Replaces the JSON document /debug/clients serves (the main loop publishes it every second).
  void SetDebugClients(std::string json) {
    std::lock_guard lock(debug_clients_mutex_);
    debug_clients_ = std::move(json);
  }
  // Replaces the JSON document /debug/top serves (`stormwatch top`; published every second).
  void SetDebugTop(std::string json) {
    std::lock_guard lock(debug_clients_mutex_);
    debug_top_ = std::move(json);
  }

 private:
  HealthServer() = default;
  static int HandleHealthz(mg_connection* conn, void* self);
  static int HandleReadyz(mg_connection* conn, void* self);
  static int HandleDebugClients(mg_connection* conn, void* self);
  // `doc` (one of the debug documents) as JSON, copied under the lock.
  int ReplyDocument(mg_connection* conn, const std::string& doc);
  static int HandleDebugTop(mg_connection* conn, void* self);

  mg_context* ctx_ = nullptr;
  int64_t stall_limit_ns_ = 0;
  std::atomic<int64_t> last_beat_ns_{0};
  std::atomic<bool> ready_{false};
  std::mutex debug_clients_mutex_;
  std::string debug_clients_ = "[]";
  std::string debug_top_ = "{}";
  std::string why_not_ready_ = "starting";
};

}  // namespace stormwatch
