// Bounded memory: the whole pipeline (assembler, identity cache, every registered detector, the
// Prometheus exporter) fed 1.2 million synthetic requests from 100,000 distinct service accounts
// on 1,000,000 distinct objects. Everything the agent keeps per client, object or series is
// bounded, so once the bounded structures have filled, resident memory must stop growing.
//
// Prints RSS after 10k, 100k, 1M requests and at the end, with the exported series. Fails
// (exit 1) when RSS grows by more than kMaxGrowthBytes between the 100k mark and the end (or
// kMaxLateGrowthBytes between 1M and the end), when a family with a `client` label holds more
// than max_clients + 1 (other) clients, or when the heavy clients that came once the client
// slots were full did not earn series of their own.
#include <prometheus/text_serializer.h>
#include <malloc.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/analysis/conflict_storm_detector.h"
#include "agent/analysis/etcd_range_storm_detector.h"
#include "agent/analysis/exempt_client_detector.h"
#include "agent/analysis/list_storm_detector.h"
#include "agent/analysis/relist_churn_detector.h"
#include "agent/analysis/stuck_finalizers_detector.h"
#include "agent/analysis/throttled_client_detector.h"
#include "agent/heap_pages.h"
#include "agent/metered_pipeline.h"
#include "agent/pipeline/request_pipeline.h"
#include "bpf/events.h"
#include "exporters/prometheus_exporter.h"
#include "tests/unit/base64url.h"

namespace stormwatch {
namespace {

constexpr int64_t kSec = 1'000'000'000;
constexpr size_t kIdentities = 100'000;
constexpr size_t kObjects = 1'000'000;
constexpr size_t kRequests = 1'200'000;
constexpr int64_t kRequestsPerSecond = 1'000;  // simulated: 1,200 s, so idle clients end
constexpr size_t kHeavyClients = 50;           // a fifth of the traffic: they earn series
// Filled bounded structures between the 100k mark and the end: detector keys and objects
// (stuck_finalizers alone may hold 100,000 objects), 500 clients' series in six families, the
// sketch, the identity cache, 65,536 pending requests. Measured growth is far below (README).
constexpr int64_t kMaxGrowthBytes = 64ll << 20;
// Once full they stay full: between 1M requests and the end a leak of 80+ bytes per request
// would show.
constexpr int64_t kMaxLateGrowthBytes = 16ll << 20;

int64_t ResidentBytes() {
  long pages_total = 0, pages_resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages_total, &pages_resident) != 2) pages_resident = 0;
    std::fclose(f);
  }
  return int64_t{pages_resident} * sysconf(_SC_PAGESIZE);
}

// Bytes malloc has handed out and not had back: the agent's state, without what malloc keeps.
int64_t HeapInUseBytes() { return static_cast<int64_t>(mallinfo2().uordblks); }
// The same plus the large blocks malloc maps on their own (big hash tables' arrays).
int64_t HeapAndMmappedBytes() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<int64_t>(m.uordblks + m.hblkhd);
}

// A bound service-account token (never valid: the signature is a placeholder).
std::string ServiceAccountUser(size_t identity) {
  return "system:serviceaccount:ns-" + std::to_string(identity % 1000) + ":sa-" +
         std::to_string(identity);
}

std::string ServiceAccountToken(const std::string& ns, const std::string& sa) {
  nlohmann::json claims = {
      {"iss", "https://kubernetes.default.svc"},
      {"sub", "system:serviceaccount:" + ns + ":" + sa},
      {"kubernetes.io",
       {{"namespace", ns},
        {"pod", {{"name", sa + "-7d9f8"}, {"uid", "p"}}},
        {"serviceaccount", {{"name", sa}, {"uid", "s"}}}}}};
  return Base64UrlEncode(R"({"alg":"RS256","kid":"k"})") + "." + Base64UrlEncode(claims.dump()) +
         ".c2lnbmF0dXJl";
}

std::vector<uint8_t> RequestEvent(uint64_t conn, uint32_t stream, int64_t ts,
                                  const std::vector<std::pair<std::string, std::string>>& fields) {
  std::vector<uint8_t> data;
  for (const auto& [name, value] : fields) {
    uint16_t lens[2] = {uint16_t(name.size()), uint16_t(value.size())};
    data.insert(data.end(), reinterpret_cast<uint8_t*>(lens), reinterpret_cast<uint8_t*>(lens) + 4);
    data.insert(data.end(), name.begin(), name.end());
    data.insert(data.end(), value.begin(), value.end());
  }
  sw_h2_request fixed{};
  fixed.hdr = {SW_EV_H2_REQUEST, 42, uint64_t(ts), conn, stream, 0};
  fixed.field_count = fixed.fields_kept = fields.size();
  fixed.data_len = data.size();
  const size_t fixed_size = offsetof(sw_h2_request, data);
  std::vector<uint8_t> out(fixed_size + data.size());
  std::memcpy(out.data(), &fixed, fixed_size);
  std::memcpy(out.data() + fixed_size, data.data(), data.size());
  return out;
}

std::vector<uint8_t> ResponseEvent(uint64_t conn, uint32_t stream, int64_t ts, int64_t status,
                                   int64_t bytes) {
  sw_h2_response r{};
  r.hdr = {SW_EV_H2_RESPONSE, 42, uint64_t(ts), conn, stream, 0};
  r.status = status;
  r.wrote_bytes = bytes;
  std::vector<uint8_t> out(sizeof(r));
  std::memcpy(out.data(), &r, sizeof(r));
  return out;
}

struct Request {
  std::string method, path;
  int status = 200;
  int64_t bytes = 512;
};

const char* const kResources[] = {"/api/v1/namespaces/%s/configmaps",
                                  "/api/v1/namespaces/%s/pods",
                                  "/apis/apps/v1/namespaces/%s/deployments",
                                  "/apis/batch.company.com/v1/namespaces/%s/datajobs"};

// Request i: a mix of writes on distinct objects, reads, LISTs, WATCHes, 409s, 429s, DELETEs.
Request Synthesize(size_t i) {
  size_t object = (i * 7919) % kObjects;  // a bijection: each object once per 1M requests
  char collection[128];
  std::snprintf(collection, sizeof collection, kResources[object % 4],
                ("ns-" + std::to_string(object % 1000)).c_str());
  std::string item = std::string(collection) + "/obj-" + std::to_string(object);
  switch (i % 20) {
    case 0: case 1: case 2: case 3: return {"PUT", item};
    case 4: case 5: case 6: return {"PATCH", item};
    case 7: case 8: case 9: case 10: return {"GET", item};
    case 11: return {"GET", std::string(collection) + (i % 40 == 11 ? "?limit=500" : "")};
    case 12: return {"GET", "/api/v1/pods", 200, 4 << 20};  // cluster-wide, unpaginated
    case 13: return {"GET", std::string(collection) + "?watch=true&resourceVersion=1"};
    case 14: return {"PUT", item, 409};
    case 15: return {"GET", item, 429, 0};
    case 16: return {"DELETE", item};
    case 17: return {"POST", collection, 201};
    case 18: return {"PUT", item + "/status"};
    default: return {"GET", item, 404};
  }
}

// The benchmark's traffic: kRequests requests at kRequestsPerSecond of simulated time, the
// pipeline ticked every second (then on_tick(now)) and the exporter compacted every minute;
// after(n) once n requests are in.
template <typename OnTick, typename After>
void FeedWorkload(RequestPipeline& pipeline, PrometheusExporter& exporter, OnTick on_tick,
                  After after) {
  const int64_t t0 = 1000 * kSec;
  int64_t next_tick = t0 + kSec, next_compact = t0 + 60 * kSec;
  uint32_t stream = 1;
  size_t synthesized = 0;
  for (size_t i = 0; i < kRequests; ++i) {
    int64_t ts = t0 + static_cast<int64_t>(i) * kSec / kRequestsPerSecond;
    while (ts >= next_tick) {
      pipeline.Tick(next_tick);
      on_tick(next_tick);
      next_tick += kSec;
    }
    if (ts >= next_compact) {
      exporter.Compact(ts);
      next_compact += 60 * kSec;
    }

    // Every 100th request is a runaway loop on one object (10 writes/s): storms fire too.
    bool runaway = i % 100 == 99;
    size_t identity = runaway    ? kIdentities + kHeavyClients
                      : i % 5 == 0 ? kIdentities + (i / 5) % kHeavyClients
                                   : (i * 48271) % kIdentities;
    Request r = runaway ? Request{"PUT", "/apis/batch.company.com/v1/namespaces/etl/datajobs/loop"}
                        : Synthesize(synthesized++);
    std::string token = ServiceAccountToken("ns-" + std::to_string(identity % 1000),
                                            "sa-" + std::to_string(identity));
    uint64_t conn = 0xc000000000 + identity;  // one connection per client
    pipeline.OnEvent(RequestEvent(conn, stream, ts,
                                  {{":method", r.method},
                                   {":scheme", "https"},
                                   {":path", r.path},
                                   {"authorization", "Bearer " + token},
                                   {"user-agent", "bench-client/v1.0"}}));
    pipeline.OnEvent(ResponseEvent(conn, stream, ts + 2'000'000, r.status, r.bytes));
    stream += 2;
    after(i + 1);
  }
}

// Where the heap goes once everything is full: the same traffic again, each detector a
// standalone copy fed the pipeline's records (RequestPipeline::Recorder) and evaluated at its
// ticks, then each piece destroyed in turn and the heap it gave back (malloc'd and mmapped
// bytes) printed. Identities are shared: the pipeline's cache frees the ones it still holds,
// a detector those only it kept alive.
void PrintHeapByComponent() {
  const int64_t heap_at_start = HeapAndMmappedBytes();
  DetectorsConfig only_update_loop;  // the pipeline's own detectors: update_loop (always on)
  only_update_loop.list_storm.enabled = false;
  only_update_loop.exempt_client.enabled = false;
  only_update_loop.conflict_storm.enabled = false;
  only_update_loop.throttled_client.enabled = false;
  only_update_loop.stuck_finalizers.enabled = false;
  only_update_loop.relist_churn.enabled = false;
  only_update_loop.etcd_range_storm.enabled = false;
  const DetectorsConfig defaults;
  std::vector<std::unique_ptr<StormDetector>> detectors;
  detectors.push_back(std::make_unique<UpdateLoopStormDetector>(defaults.update_loop,
                                                                defaults.update_loop_allow));
  detectors.push_back(std::make_unique<ListStormDetector>(defaults.list_storm));
  detectors.push_back(std::make_unique<ExemptClientDetector>(defaults.exempt_client));
  detectors.push_back(std::make_unique<ConflictStormDetector>(defaults.conflict_storm));
  detectors.push_back(std::make_unique<ThrottledClientDetector>(defaults.throttled_client));
  detectors.push_back(std::make_unique<StuckFinalizersDetector>(defaults.stuck_finalizers));
  detectors.push_back(std::make_unique<RelistChurnDetector>(defaults.relist_churn));
  detectors.push_back(std::make_unique<EtcdRangeStormDetector>(defaults.etcd_range_storm));
  auto exporter = std::make_unique<PrometheusExporter>(ClientSeriesLimits{});
  auto pipeline = std::make_unique<MeteredPipeline>(exporter.get(), only_update_loop,
                                                    [](const StormTransition&) {});
  RequestPipeline::Recorder feed_detectors;
  feed_detectors.request = [&](const RequestRecord& r) {
    for (auto& d : detectors) d->Observe(r, static_cast<int64_t>(r.end_ns));
  };
  pipeline->SetRecorder(std::move(feed_detectors));
  FeedWorkload(*pipeline, *exporter, [&](int64_t now) {
    for (auto& d : detectors) d->Evaluate(now);
  }, [](size_t) {});

  const int64_t heap_full = HeapAndMmappedBytes();
  std::printf("heap by component after %zu requests (MiB, malloc'd and mmapped; the pipeline's "
              "own update_loop counted under update_loop):\n", kRequests);
  int64_t update_loop_bytes = 0;
  for (auto& d : detectors) {
    const std::string name = d->storm();
    const size_t tracked = d->Stats().tracked;
    const int64_t before = HeapAndMmappedBytes();
    d.reset();
    const int64_t freed = before - HeapAndMmappedBytes();
    if (name == kUpdateLoopStorm) update_loop_bytes = freed;
    std::printf("  %-18s %6.1f  (%zu keys, %.0f B per key)\n", name.c_str(), freed / 1048576.0,
                tracked, tracked ? static_cast<double>(freed) / tracked : 0.0);
  }
  int64_t before = HeapAndMmappedBytes();
  pipeline.reset();
  const int64_t pipeline_bytes = before - HeapAndMmappedBytes() - update_loop_bytes;
  std::printf("  %-18s %6.1f  (assembler, identity cache, peers, etcd links)\n", "pipeline",
              pipeline_bytes / 1048576.0);
  before = HeapAndMmappedBytes();
  exporter.reset();
  std::printf("  %-18s %6.1f  (series of 500 clients + other)\n", "exporter",
              (before - HeapAndMmappedBytes()) / 1048576.0);
  std::printf("  %-18s %6.1f  (in all)\n", "total", (heap_full - heap_at_start) / 1048576.0);
}

// Distinct `client` values per family with a client label (storm gauges excluded: never folded).
std::map<std::string, std::set<std::string>> ClientsPerFamily(const std::string& text,
                                                               size_t* series) {
  std::map<std::string, std::set<std::string>> clients;
  *series = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    if (line.empty() || line[0] == '#') continue;
    ++*series;
    size_t brace = line.find('{');
    size_t label = line.find("client=\"");
    if (brace == std::string_view::npos || label == std::string_view::npos) continue;
    std::string family(line.substr(0, brace));
    if (family == "stormwatch_storm_active") continue;
    size_t value = label + 8;
    clients[family].insert(std::string(line.substr(value, line.find('"', value) - value)));
  }
  return clients;
}

// What the pipeline and exporter keep per client and per object, as heap bytes (mallinfo2):
// a fresh pipeline is fed `n` new clients (each sends the 20 request kinds of Synthesize on the
// same 20 objects) or one client writing and deleting `n` new objects; the heap's growth over
// n. All caches and detector tables have room for n, so nothing is evicted while measuring.
// `series`: every client gets its own metric series (else all but the warm-up clients are
// folded into client="other", as beyond max_clients).
struct StateCost {
  double per_client_bytes = 0;
  double per_object_bytes = 0;
};
StateCost MeasureStateCost(size_t n, bool series, const DetectorsConfig& detectors = {}) {
  StateCost cost;
  for (const bool clients : {true, false}) {
    PrometheusExporter exporter(ClientSeriesLimits{.max_clients = series ? 2 * n + 8 : 4});
    MeteredPipeline pipeline(&exporter, detectors, [](const StormTransition&) {});
    const int64_t t0 = 1000 * kSec;
    uint32_t stream = 1;
    size_t sent = 0;
    auto send = [&](size_t identity, const Request& r) {
      const int64_t ts = t0 + static_cast<int64_t>(sent++) * kSec / kRequestsPerSecond / 100;
      const std::string token = ServiceAccountToken("ns-" + std::to_string(identity % 1000),
                                                    "sa-" + std::to_string(identity));
      const uint64_t conn = 0xc000000000 + identity;
      pipeline.OnEvent(RequestEvent(conn, stream, ts,
                                    {{":method", r.method}, {":scheme", "https"}, {":path", r.path},
                                     {"authorization", "Bearer " + token},
                                     {"user-agent", "bench-client/v1.0"}}));
      pipeline.OnEvent(ResponseEvent(conn, stream, ts + 2'000'000, r.status, r.bytes));
      stream += 2;
    };
    // Warm-up: the first requests allocate what is there once (vocabularies, series of the
    // labels, hash tables' first buckets).
    for (size_t w = 0; w < 200; ++w) send(kIdentities * 10 + w % 4, Synthesize(w % 20));
    const int64_t before = HeapInUseBytes();
    for (size_t i = 0; i < n; ++i) {
      if (clients) {
        for (size_t k = 0; k < 20; ++k) send(kIdentities * 20 + i, Synthesize(k));
      } else {
        const std::string item = "/apis/batch.company.com/v1/namespaces/ns-1/datajobs/obj-" +
                                 std::to_string(i);
        send(kIdentities * 10, {"PUT", item});
        send(kIdentities * 10, {"DELETE", item});
      }
    }
    const double per = static_cast<double>(HeapInUseBytes() - before) / static_cast<double>(n);
    (clients ? cost.per_client_bytes : cost.per_object_bytes) = per;
  }
  return cost;
}

void PrintStateCost() {
  // Small enough that no table of the default limits evicts (4,096 clients per detector).
  const StateCost folded = MeasureStateCost(2000, false), own = MeasureStateCost(2000, true);
  std::printf("state per client (20 request kinds each): %.0f bytes folded into \"other\", "
              "%.0f bytes with its own series; per object (written, then deleted): %.0f bytes\n",
              folded.per_client_bytes, own.per_client_bytes, folded.per_object_bytes);
  // Each detector's share: the cost with it minus the cost without it (update_loop is always on).
  std::printf("  of which, per detector (per client / per object bytes):");
  auto share = [&](const char* name, auto disable) {
    DetectorsConfig d;
    disable(d);
    const StateCost without = MeasureStateCost(2000, false, d);
    std::printf(" %s %.0f/%.0f", name, folded.per_client_bytes - without.per_client_bytes,
                folded.per_object_bytes - without.per_object_bytes);
  };
  share("list_storm", [](DetectorsConfig& d) { d.list_storm.enabled = false; });
  share("exempt_client", [](DetectorsConfig& d) { d.exempt_client.enabled = false; });
  share("conflict_storm", [](DetectorsConfig& d) { d.conflict_storm.enabled = false; });
  share("throttled_client", [](DetectorsConfig& d) { d.throttled_client.enabled = false; });
  share("stuck_finalizers", [](DetectorsConfig& d) { d.stuck_finalizers.enabled = false; });
  share("relist_churn", [](DetectorsConfig& d) { d.relist_churn.enabled = false; });
  share("etcd_range_storm", [](DetectorsConfig& d) { d.etcd_range_storm.enabled = false; });
  std::printf("\n");
}

int Run() {
  const int64_t heap_at_start = HeapInUseBytes();
  const ClientSeriesLimits limits;
  PrometheusExporter exporter(limits);
  size_t transitions = 0;
  MeteredPipeline pipeline(&exporter, DetectorsConfig{},
                           [&](const StormTransition&) { ++transitions; });
  // Huge pages add about 2% to RSS (their last partly used page); the agent runs on them.
  std::printf("memory_bound: %s\n", DescribeHeapPages(CurrentHeapPages()).c_str());
  std::printf("memory_bound: empty pipeline and exporter: heap %.1f MiB, RSS %.1f MiB\n",
              (HeapInUseBytes() - heap_at_start) / 1048576.0, ResidentBytes() / 1048576.0);

  std::printf("memory_bound: %zu requests, %zu identities (+%zu heavy), %zu objects, "
              "max_clients %zu, RSS growth bound %lld MiB after 100k requests\n",
              kRequests, kIdentities, kHeavyClients, kObjects, limits.max_clients,
              static_cast<long long>(kMaxGrowthBytes >> 20));
  std::printf("%10s %10s %10s %10s %8s %s\n", "requests", "RSS MiB", "heap MiB", "series", "storms",
              "clients per client-labelled family");

  const std::set<size_t> marks = {10'000, 100'000, 1'000'000, kRequests};
  int64_t rss_at_100k = 0, rss_at_1m = 0;
  size_t worst_clients = 0;
  std::string worst_family;
  std::set<std::string> clients_with_requests;
  FeedWorkload(pipeline, exporter, [](int64_t) {}, [&](size_t done) {
    if (!marks.contains(done)) return;
    int64_t rss = ResidentBytes();
    if (done == 100'000) rss_at_100k = rss;
    if (done == 1'000'000) rss_at_1m = rss;
    size_t series = 0;
    auto clients = ClientsPerFamily(
        prometheus::TextSerializer().Serialize(exporter.Collect()), &series);
    clients_with_requests = clients["stormwatch_requests_total"];
    std::string per_family;
    for (const auto& [family, names] : clients) {
      per_family += " " + family + "=" + std::to_string(names.size());
      if (names.size() > worst_clients) {
        worst_clients = names.size();
        worst_family = family;
      }
    }
    std::printf("%10zu %10.1f %10.1f %10zu %8zu%s\n", done, rss / 1048576.0,
                HeapInUseBytes() / 1048576.0, series, transitions, per_family.c_str());
    std::fflush(stdout);
  });

  int64_t rss_at_end = ResidentBytes();
  int64_t growth = rss_at_end - rss_at_100k, late_growth = rss_at_end - rss_at_1m;
  std::printf("RSS growth after 100k requests: %.1f MiB (bound %lld MiB), after 1M: %.1f MiB "
              "(bound %lld MiB); most clients in one family: %zu (%s, bound %zu); detectors: "
              "%zu\n",
              growth / 1048576.0, static_cast<long long>(kMaxGrowthBytes >> 20),
              late_growth / 1048576.0, static_cast<long long>(kMaxLateGrowthBytes >> 20),
              worst_clients, worst_family.c_str(), limits.max_clients + 1,
              pipeline.detectors().size());
  for (const auto& d : pipeline.detectors()) {
    DetectorStats s = d->Stats();
    std::printf("  %s: tracked %zu, evictions %llu\n", d->storm(), s.tracked,
                static_cast<unsigned long long>(s.evictions));
  }
  // The heavy clients and the runaway came after the slots were full: they must have earned
  // series of their own (displacing one-off clients), the point of top-N rather than first-N.
  size_t heavy_named = 0;
  for (size_t h = 0; h <= kHeavyClients; ++h) {
    heavy_named += clients_with_requests.contains(ServiceAccountUser(kIdentities + h));
  }
  std::printf("heavy clients with their own series: %zu of %zu\n", heavy_named,
              kHeavyClients + 1);
  PrintStateCost();  // after the RSS figures: its freed heap would count in them
  PrintHeapByComponent();
  int failures = 0;
  if (heavy_named != kHeavyClients + 1) {
    std::printf("FAIL: heavy clients are folded into other\n");
    ++failures;
  }
  if (growth > kMaxGrowthBytes || late_growth > kMaxLateGrowthBytes) {
    std::printf("FAIL: RSS grew by more than the bound\n");
    ++failures;
  }
  if (worst_clients > limits.max_clients + 1) {
    std::printf("FAIL: %s holds %zu clients\n", worst_family.c_str(), worst_clients);
    ++failures;
  }
  if (transitions == 0) {
    std::printf("FAIL: the runaway loop never fired: detectors not exercised\n");
    ++failures;
  }
  return failures ? 1 : 0;
}

}  // namespace
}  // namespace stormwatch

int main() { return stormwatch::Run(); }
