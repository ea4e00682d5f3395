#include "exporters/health_server.h"

#include <civetweb.h>
#include <time.h>

#include <string>

namespace stormwatch {
namespace {

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

int Reply(mg_connection* conn, int status, const std::string& body,
          const char* content_type = "text/plain; charset=utf-8") {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n"
            "Content-Length: %zu\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
            status, status == 200 ? "OK" : "Service Unavailable", content_type, body.size());
  mg_write(conn, body.data(), body.size());
  return status;
}

}  // namespace

Result<std::unique_ptr<HealthServer>> HealthServer::Start(const std::string& address,
                                                          unsigned routes,
                                                          int64_t stall_limit_ns) {
  std::unique_ptr<HealthServer> s(new HealthServer());
  s->stall_limit_ns_ = stall_limit_ns;
  s->last_beat_ns_ = NowNs();
  mg_init_library(0);
  const char* options[] = {"listening_ports", address.c_str(), "num_threads", "2", nullptr};
  mg_callbacks callbacks{};
  s->ctx_ = mg_start(&callbacks, nullptr, options);
  if (!s->ctx_) {
    return Error{std::string("cannot serve ") +
                 (routes & kHealthRoutes ? "health checks" : "/debug") + " on " + address, ErrorCode::kSystem};
  }
  if (routes & kHealthRoutes) {
    mg_set_request_handler(s->ctx_, "/healthz", &HealthServer::HandleHealthz, s.get());
    mg_set_request_handler(s->ctx_, "/readyz", &HealthServer::HandleReadyz, s.get());
  }
  if (routes & kDebugRoutes) {
    mg_set_request_handler(s->ctx_, "/debug/clients", &HealthServer::HandleDebugClients, s.get());
    mg_set_request_handler(s->ctx_, "/debug/top", &HealthServer::HandleDebugTop, s.get());
  }
  return s;
}

HealthServer::~HealthServer() {
  if (ctx_) mg_stop(ctx_);
}

int HealthServer::HandleHealthz(mg_connection* conn, void* self) {
  auto* s = static_cast<HealthServer*>(self);
  int64_t stalled = NowNs() - s->last_beat_ns_.load();
  if (stalled > s->stall_limit_ns_) {
    return Reply(conn, 503, "main loop stalled for " + std::to_string(stalled / 1000000000) + " s\n");
  }
  return Reply(conn, 200, "ok\n");
}

int HealthServer::HandleReadyz(mg_connection* conn, void* self) {
  auto* s = static_cast<HealthServer*>(self);
  if (s->ready_.load()) return Reply(conn, 200, "ready\n");
  std::string why;
  {
    std::lock_guard lock(s->debug_clients_mutex_);
    why = s->why_not_ready_;
  }
  return Reply(conn, 503, why + "\n");
}

int HealthServer::ReplyDocument(mg_connection* conn, const std::string& doc) {
  std::string body;
  {
    std::lock_guard lock(debug_clients_mutex_);  // the main loop replaces the documents
    body = doc;
  }
  return Reply(conn, 200, body + "\n", "application/json");
}

int HealthServer::HandleDebugClients(mg_connection* conn, void* self) {
  auto* s = static_cast<HealthServer*>(self);
  return s->ReplyDocument(conn, s->debug_clients_);
}

int HealthServer::HandleDebugTop(mg_connection* conn, void* self) {
  auto* s = static_cast<HealthServer*>(self);
  return s->ReplyDocument(conn, s->debug_top_);
}

}  // namespace stormwatch
