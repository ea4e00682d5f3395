#include "agent/agent.h"

#include "agent/record/capture_file.h"

#include <spdlog/spdlog.h>
#include <time.h>

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/build_info.h"
#include "agent/heap_pages.h"
#include "agent/kube/apf_fetcher.h"
#include "agent/capture/client_cert_reader.h"
#include "agent/capture/connection_ends.h"
#include "agent/capture/gohttp_probes.h"
#include "agent/capture/kernel_check.h"
#include "agent/capture/target_manager.h"
#include "agent/metered_pipeline.h"
#include "agent/pipeline/request_pipeline.h"
#include "exporters/alert_log.h"
#include "exporters/alertmanager_client.h"
#include "exporters/health_server.h"
#include "exporters/prometheus_exporter.h"

namespace stormwatch {
namespace {

int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // the clock bpf_ktime_get_ns() reads
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

const char* kDropCauseNames[SW_DROP_CAUSE_COUNT] = {
    "ring_buffer_full", "header_fields_truncated", "header_value_truncated", "read_failed"};

// The agent's HTTP servers (civetweb: /metrics, /healthz, /debug) see their stop flag only when
// their listening thread's poll() returns: at a connection, else every 2 s. Stopped one after
// the other that was up to 2 s each, 4 of the 5.5 s the agent took to exit. Once started (the
// agent is stopping), this connects to their addresses every 10 ms until it is destroyed, after
// them, so each server stops at once.
class ListenerWaker {
 public:
  explicit ListenerWaker(std::vector<std::string> addresses) : addresses_(std::move(addresses)) {}
  ~ListenerWaker() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  ListenerWaker(const ListenerWaker&) = delete;
  ListenerWaker& operator=(const ListenerWaker&) = delete;

  void Start() {
    if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
  }

 private:
  // host:port -> a socket address to connect to: a wildcard host is reached on loopback.
  static std::vector<sockaddr_storage> Resolve(const std::string& address) {
    std::vector<sockaddr_storage> out;
    size_t colon = address.rfind(':');
    if (address.empty() || colon == std::string::npos) return out;
    std::string host = address.substr(0, colon), port = address.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    if (host.empty() || host == "0.0.0.0" || host == "*") host = "127.0.0.1";
    if (host == "::") host = "::1";
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* res = nullptr;
    if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0) return out;
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
      sockaddr_storage ss{};
      std::memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
      out.push_back(ss);
      break;  // the first is the one a server bound to the name listens on
    }
    freeaddrinfo(res);
    return out;
  }

  static void Knock(const sockaddr_storage& ss) {
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return;
    socklen_t len = ss.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    if (connect(fd, reinterpret_cast<const sockaddr*>(&ss), len) != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, 50);
    }
    close(fd);
  }

  void Run() {
    std::vector<sockaddr_storage> targets;
    for (const std::string& a : addresses_) {
      for (const sockaddr_storage& ss : Resolve(a)) targets.push_back(ss);
    }
    std::unique_lock lock(mu_);
    while (!done_) {
      lock.unlock();
      for (const sockaddr_storage& ss : targets) Knock(ss);
      lock.lock();
      wake_.wait_for(lock, std::chrono::milliseconds(10), [&] { return done_; });
    }
  }

  std::vector<std::string> addresses_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool done_ = false;
  std::thread thread_;
};

void PublishTargetChange(PrometheusExporter& exporter, const TargetStatus& t, bool present) {
  std::map<std::string, std::string> labels = {
      {"pid", std::to_string(t.process.pid)}, {"target", t.process.name},
      {"go_version", t.go_version},           {"xnet_version", t.xnet_version},
      {"grpc_version", t.grpc_version},
      {"stack", t.stack},                     {"status", t.attached ? "attached" : "refused"},
      {"role", t.etcd ? "etcd" : "apiserver"},
      {"reason", AttachFailureName(t.failure)},
      {"missing", t.gap.type.empty() ? "" : t.gap.type + (t.gap.field.empty() ? "" : "." + t.gap.field)}};
  exporter.SetTargetInfo(labels, present);
  if (!present) {
    spdlog::info("target {} pid {} gone; probes detached", t.process.name, t.process.pid);
    return;
  }
  if (t.failure != AttachFailure::kProcUnreadable) {  // else never planned
    spdlog::info("planned {} pid {} in {:.3f} s", t.process.name, t.process.pid, t.planning_seconds);
    exporter.ObserveTargetPlanning(t.process.name, t.planning_seconds);
  }
  if (t.attached) {
    spdlog::info("attached to {} pid {} ({}, x/net {}{}{}, {} HTTP/2 stack){}{}", t.process.name,
                 t.process.pid, t.go_version, t.xnet_version.empty() ? "unknown" : t.xnet_version,
                 t.grpc_version.empty() ? "" : ", grpc ", t.grpc_version, t.stack,
                 t.problem.empty() ? "" : ": ", t.problem);
  } else {
    spdlog::warn("not attaching to {} pid {}: {}", t.process.name, t.process.pid, t.problem);
    exporter.CountAttachFailure(t.process.name, AttachFailureName(t.failure));
  }
}

}  // namespace

int RunAgent(const AgentOptions& options, const std::atomic<bool>& stop) {
  // Before any port or BPF object: an unsupported node exits at once with one line (a pod in
  // CrashLoopBackOff with exit code 3 and this message as its last log line).
  if (std::string problem = KernelProblem(ThisKernel(options.assume_kernel_release));
      !problem.empty()) {
    spdlog::critical("{}", problem);
    return kExitUnsupportedKernel;
  }
  // Declared before the servers, so destroyed after them: see ListenerWaker.
  ListenerWaker listener_waker({options.metrics_address, options.health_address, options.debug_address});
  std::unique_ptr<PrometheusExporter> exporter;
  try {
    exporter = std::make_unique<PrometheusExporter>(
        options.metrics_address, ClientSeriesLimits{.max_clients = options.max_clients_per_metric});
  } catch (const std::exception& e) {
    spdlog::critical("cannot serve metrics on {}: {}", options.metrics_address, e.what());
    return 1;
  }
  exporter->SetBuildInfo(BuildInfoLabels());
  spdlog::info("stormwatch {} ({}) metrics on http://{}/metrics", StormwatchVersion(),
               StormwatchCommit(), options.metrics_address);
  const HeapPages pages = CurrentHeapPages();
  spdlog::log(pages.small() ? spdlog::level::warn : spdlog::level::info, "{}", DescribeHeapPages(pages));
  std::unique_ptr<HealthServer> health, debug_server;
  // The same address for both: one server with both groups of handlers.
  bool shared = !options.debug_address.empty() && options.debug_address == options.health_address;
  if (!options.health_address.empty()) {
    auto started = HealthServer::Start(
        options.health_address,
        HealthServer::kHealthRoutes | (shared ? HealthServer::kDebugRoutes : 0u));
    if (!started) {
      spdlog::critical("{}", started.error().message);
      return 1;
    }
    health = std::move(*started);
  }
  if (!options.debug_address.empty() && !shared) {
    auto started = HealthServer::Start(options.debug_address, HealthServer::kDebugRoutes);
    if (!started) {
      spdlog::critical("{}", started.error().message);
      return 1;
    }
    debug_server = std::move(*started);
    spdlog::info("/debug/clients on http://{}", options.debug_address);
  }
  HealthServer* debug = shared ? health.get() : debug_server.get();

  int64_t clock_offset = RealtimeMinusMonotonicNs();
  std::string node_name = [] {
    char host[256] = "";
    gethostname(host, sizeof(host) - 1);
    return std::string(host);
  }();

  // APF UIDs -> names: static names from the config, the cluster's objects when reachable.
  ApfNames apf_names;
  apf_names.SetStatic(options.apf_static_names);
  std::unique_ptr<ApfFetcher> apf_fetcher;
  if (auto source = ResolveApfSource(options.apf_source, [](const char* n) { return std::getenv(n); })) {
    apf_fetcher = std::make_unique<ApfFetcher>(*source, &apf_names);
    apf_fetcher->Start();
    spdlog::info("APF names from {}", source->apiserver_url);
  } else {
    spdlog::info("APF names from the static mapping only ({} entries): {}",
                 options.apf_static_names.size(), source.error().message);
  }
  ApfNaming apf_naming{&apf_names, [&] {
                         if (apf_fetcher) apf_fetcher->OnUnknownUid();
                       }};

  std::unique_ptr<AlertmanagerClient> alertmanager;
  if (!options.alertmanager.url.empty()) {
    AlertmanagerConfig am = options.alertmanager;
    if (const char* ns = std::getenv("POD_NAMESPACE")) am.default_namespace = ns;  // the chart sets it
    if (am.generator_url.empty()) {
      char host[256] = "localhost";
      gethostname(host, sizeof(host) - 1);
      std::string port = options.metrics_address.substr(options.metrics_address.rfind(':') + 1);
      am.generator_url = "http://" + std::string(host) + ":" + port + "/metrics";
    }
    alertmanager = std::make_unique<AlertmanagerClient>(am, clock_offset);
    spdlog::info("pushing alerts to Alertmanager at {}", am.url);
  }
  // Clients without a token: the certificate on their connection, read from the target.
  ClientCertIdentities cert_identities;
  // HTTP/1.1 connections' ends (HTTP/2 requests carry theirs from BPF).
  Http1ConnectionEnds http1_ends;
  ConnectionLookups connection_lookups{
      .identity = [&](const RequestConnection& c) { return cert_identities.Lookup(c); },
      .http1_ends = [&](uint32_t pid, uint64_t conn) {
        return http1_ends.Lookup(static_cast<pid_t>(pid), conn);
      },
      .http1_closed = [&](uint32_t pid, uint64_t conn) {
        http1_ends.OnClose(static_cast<pid_t>(pid), conn);
      }};
  MeteredPipeline pipeline(
      exporter.get(), options.detectors,
      [&](const StormTransition& t) {
        // Alert lines go to stdout, one JSON document each, flushed at once.
        std::string line = FormatAlertJson(t, clock_offset);
        std::fwrite(line.data(), 1, line.size(), stdout);
        std::fputc('\n', stdout);
        std::fflush(stdout);
        if (alertmanager) alertmanager->OnTransition(t);
      },
      AssemblerLimits{.max_identities = options.max_identities}, connection_lookups, apf_naming);

  std::unique_ptr<CaptureWriter> recorder;
  if (!options.record_path.empty()) {
    auto w = CaptureWriter::Open(options.record_path,
                                 {options.record_max_bytes, options.record_files}, clock_offset);
    if (!w) {
      spdlog::critical("{}", w.error().message);
      return 1;
    }
    recorder = std::move(*w);
    pipeline.SetRecorder({.request = [&](const RequestRecord& r) { recorder->Write(r); },
                          .etcd = [&](const EtcdRequest& r) { recorder->Write(r); }});
    spdlog::info("recording to {} (rotated at {} bytes, {} files kept)", options.record_path,
                 options.record_max_bytes, options.record_files);
  }

  auto probes = GoHttpProbes::Load(options.ring_buffer_bytes,
                                   [&](std::span<const uint8_t> bytes) { pipeline.OnEvent(bytes); });
  if (!probes) {
    spdlog::critical("{}", probes.error().message);
    return 1;
  }
  TargetManagerOptions target_options;  // find, read and plan: the agent's own (/proc)
  target_options.names = options.target_names;
  target_options.pids = options.pids;
  TargetManager targets(probes->get(), target_options,
                        [&](const TargetStatus& t, bool present) {
                          PublishTargetChange(*exporter, t, present);
                          if (present) {
                            pipeline.SetTargetRole(t.process.pid,
                                                   t.etcd ? TargetRole::kEtcd : TargetRole::kApiServer);
                            cert_identities.SetTarget(t.process.pid, t.layout);
                            if (t.etcd_messages) pipeline.SetEtcdMessageTypes(t.process.pid, t.etcd_messages);
                            http1_ends.SetTarget(t.process.pid, t.layout);
                          } else {
                            pipeline.ForgetProcess(t.process.pid);
                            cert_identities.ForgetProcess(t.process.pid);
                            http1_ends.ForgetProcess(t.process.pid);
                          }
                        });
  auto publish_targets = [&] {
    // Readiness first: whoever sees the attached count move finds /readyz agreeing.
    if (health) {
      std::string why = targets.NotReadyReason();
      health->SetReady(why.empty(), why);
    }
    exporter->SetTargetsAttached(targets.attached_count());
  };
  // Targets are planned on a thread of their own and attached by Collect() below, as their
  // plans come in: reading a big binary never holds up the ring buffer's drain.
  targets.Refresh();
  if (targets.planning().empty()) spdlog::warn("no target process found yet; still looking");
  publish_targets();

  // Detectors count in whole-second buckets of this clock: evaluate just after each bucket
  // closes, so a storm is reported as soon as its last required second is complete.
  constexpr int64_t kSecond = 1000000000, kAfterBucket = 10000000;
  // How often the ring buffer is drained when it was found empty (no wakeups: see Consume()).
  constexpr long kDrainInterval = 10000000;
  auto next_bucket_tick = [&](int64_t now) { return (now / kSecond + 1) * kSecond + kAfterBucket; };
  int64_t next_tick = next_bucket_tick(MonotonicNs());
  constexpr int64_t kCompactInterval = 60 * kSecond;  // ends idle clients' series
  int64_t next_compact = MonotonicNs() + kCompactInterval;
  while (!stop.load()) {
    int n = (*probes)->Consume();
    if (n < 0 && n != -EINTR) spdlog::error("ring buffer read failed: {}", n);
    if (n == 0) {
      timespec pause{0, kDrainInterval};
      nanosleep(&pause, nullptr);
    }
    int64_t now = MonotonicNs();
    if (health) health->Beat(now);
    if (targets.Collect()) publish_targets();
    if (now < next_tick) continue;
    next_tick = next_bucket_tick(now);
    targets.Refresh();
    targets.Collect();
    publish_targets();
    pipeline.Tick(now);
    if (recorder) recorder->Flush();
    DropCounts drops = (*probes)->ReadDrops();
    for (int i = 0; i < SW_DROP_CAUSE_COUNT; ++i) {
      exporter->SetCaptureLoss(kDropCauseNames[i], drops.by_cause[i]);
    }
    exporter->SetCaptureLoss("event_handler_failed", (*probes)->handler_failures());
    exporter->SetCaptureLoss("client_cert_unreadable", cert_identities.read_errors());
    exporter->SetCaptureLoss("connection_address_unreadable", http1_ends.read_errors());
    if (debug) {
      // Names are UTF-8 where the agent decodes them, but a byte that is not must not throw
      // out of the main loop: replaced (U+FFFD), as the alert outputs do.
      constexpr auto kReplace = nlohmann::json::error_handler_t::replace;
      debug->SetDebugClients(pipeline.ClientsSnapshot(now).dump(-1, ' ', false, kReplace));
      nlohmann::json top = pipeline.TopSnapshot(now);
      top["node"] = node_name;
      top["time"] = (now + clock_offset) / 1e9;  // wall clock, Unix seconds
      debug->SetDebugTop(top.dump(-1, ' ', false, kReplace));
    }
    if (alertmanager) {
      exporter->SetAlertmanagerStats(alertmanager->sent(), alertmanager->failed(),
                                     alertmanager->dropped());
    }
    if (now >= next_compact) {
      exporter->Compact(now);
      next_compact = now + kCompactInterval;
    }
    auto hits = (*probes)->ReadHits();
    for (size_t i = 0; i < hits.size(); ++i) exporter->SetProbeHits(GoHttpProbes::ProbeName(i), hits[i]);
  }
  // Stopping (SIGTERM, SIGINT): out within 1 s with nothing left in the kernel. Drain what the
  // ring buffer still holds so a clean stop loses nothing already captured; then, as the
  // objects above go in reverse order: the targets' links (destroyed concurrently, see
  // GoHttpProbes), the BPF programs and maps, the capture file, the HTTP servers (woken).
  (*probes)->Consume();
  if (health) health->SetReady(false, "stopping");
  spdlog::info("stopping: {} requests seen", pipeline.stats().requests);
  if (alertmanager) alertmanager->Stop();
  if (apf_fetcher) apf_fetcher->Stop();
  listener_waker.Start();
  return 0;
}

}  // namespace stormwatch
