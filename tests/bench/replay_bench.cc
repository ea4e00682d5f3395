// The whole user-space pipeline on a recorded capture: records/s per core from a capture file
// through RequestInfo, identity labels, metrics and every detector, and the memory it holds.
//
// The capture (written once by the benchmark, CaptureWriter as the agent writes it): 1M request
// records from 10,000 clients (service accounts in 500 namespaces, user agents of real clients)
// over 100,000 objects of 8 resources, GETs, LISTs (a third consistent), WATCHes, PUTs (some
// 409s), PATCHes, DELETEs and 429s, at 15,000 records/s of recorded time; plus one etcd call per
// 10 requests. `replay_bench --benchmark_min_time=...` prints records/s (items_per_second) and
// the process RSS after each run; CI runs it briefly as a smoke test. BM_PipelineParts times
// the same loop with parts left out (detectors, metrics, each detector alone): where the
// per-record time goes, in ns per record. BM_PipelineFromEvents starts where the agent's drain
// does, at the ring buffer's bytes: each request's two HTTP/2 events decoded and joined, its
// token resolved, its write body read, then as BM_Pipeline (/0: the events read in place from
// a 1.5 GB arena; /1: each batch staged just before the drain reads it; /2: the same requests
// as HTTP/1.1 over TLS, staged as /1). BM_ScrapeFullExporter times a scrape of 100,200 request
// series and how long the drain waits for the exporter's lock meanwhile.
// REPLAY_BENCH_NEIGHBOUR_MIB=N runs another thread beside it that walks an N MiB buffer at random,
// standing for kube-apiserver and etcd sharing the last-level cache (see CacheNeighbour).
#include <benchmark/benchmark.h>
#include <sodium.h>
#include <unistd.h>
#include <valgrind/callgrind.h>

#include <time.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <optional>
#include <algorithm>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <prometheus/text_serializer.h>
#include <variant>
#include <vector>
#include <random>
#include <string>

#include "agent/heap_pages.h"
#include "agent/kube/object_facts.h"
#include "agent/kube/record_keys.h"
#include "agent/metered_pipeline.h"
#include "agent/pipeline/request_pipeline.h"
#include "agent/record/capture_file.h"
#include "agent/replay.h"
#include "exporters/prometheus_exporter.h"
#include "bpf/events.h"
#include "tests/unit/base64url.h"
#include "tests/unit/event_bytes.h"

// Heap allocations made while the pipeline holds a record (the record's own copy left out):
// the per-record path should make none (issue: "no per-record allocation on the hot path").
namespace {
bool g_count_allocations = false;
uint64_t g_allocations = 0;
}  // namespace

// gcc pairs the free() below with the inlined new expressions of other translation units' code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
// Called for each counted allocation: a gdb breakpoint on it printing the stack lists where the
// steady state still allocates (docs/benchmark.md has the commands).
extern "C" __attribute__((noinline)) void CountedAllocation() { asm volatile(""); }
void* operator new(std::size_t size) {
  if (g_count_allocations) {
    ++g_allocations;
    CountedAllocation();
  }
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace stormwatch {
namespace {

constexpr int kClients = 10000, kObjects = 100000;
// The same traffic from 100 clients on 1,000 objects: every table fits in the CPU's caches, so
// the difference to the full capture is what cache misses cost.
constexpr int kHotClients = 100, kHotObjects = 1000;
constexpr uint64_t kRecordStepNs = 1'000'000'000 / 15000;

const char* const kResources[] = {"pods", "configmaps", "secrets", "services",
                                  "endpoints", "leases", "events", "nodes"};

std::string CapturePath(size_t records, int clients = kClients) {
  return "/tmp/stormwatch-replay-bench-" + std::to_string(records) +
         (clients == kClients ? "" : "-" + std::to_string(clients) + "-clients") + ".swcap";
}

void WriteCapture(const std::string& path, size_t records, int clients = kClients,
                  int objects = kObjects) {
  if (std::ifstream(path).good()) return;
  auto w = CaptureWriter::Open(path + ".tmp", {.max_file_bytes = 1ull << 40, .max_files = 1}, 0);
  if (!w) std::abort();
  uint64_t seed = 7;
  auto next = [&] { return seed = seed * 6364136223846793005ULL + 1442695040888963407ULL; };
  for (size_t i = 0; i < records; ++i) {
    uint64_t r = next();
    int client = static_cast<int>((r >> 8) % clients);
    int object = static_cast<int>((r >> 24) % objects);
    const char* resource = kResources[object % 8];
    std::string ns = "ns-" + std::to_string(object % 500);
    RequestRecord rec;
    rec.pid = 100;
    rec.conn_id = 0xc000000000 + client;
    rec.stream_id = static_cast<uint32_t>(2 * i + 1);
    rec.end_ns = 1'000'000'000'000 + i * kRecordStepNs;
    rec.start_ns = rec.end_ns - 2'000'000;
    rec.peer_address = ParseTcpEndpoint("10.244." + std::to_string(client % 250) + "." +
                                        std::to_string(client % 200) + ":40000");
    rec.local_address = ParseTcpEndpoint("10.0.0.2:6443");
    // One Identity per record, as written: the reader shares equal ones again (one per client).
    Identity id;
    id.kind = Identity::Kind::kServiceAccount;
    id.sa_namespace = "tenant-" + std::to_string(client % 500);
    id.sa_name = "controller-" + std::to_string(client);
    id.user = "system:serviceaccount:" + id.sa_namespace + ":" + id.sa_name;
    id.pod_name = id.sa_name + "-7d9f";
    id.user_agent = client % 3 ? "controller/v1.2.3 (linux/amd64) kubernetes/abc" : "kubectl/v1.31.0";
    id.component = client % 3 ? "controller" : "kubectl";
    rec.identity = ShareIdentity(std::move(id));
    rec.response.priority_level = "workload-low";
    rec.status = 200;
    int kind = static_cast<int>((r >> 40) % 100);
    std::string base = std::string(object % 8 == 7 ? "/api/v1/" : "/api/v1/namespaces/" + ns + "/") + resource;
    if (kind < 45) {
      rec.method = "GET";
      rec.path = base + "/obj-" + std::to_string(object);
      rec.response_bytes = 1500;
    } else if (kind < 60) {
      rec.method = "GET";
      rec.path = base + (kind % 3 == 0 ? "" : kind % 3 == 1 ? "?resourceVersion=0" : "?limit=500");
      rec.response_bytes = 150000;
    } else if (kind < 65) {
      rec.method = "GET";
      rec.path = base + "?watch=true&resourceVersion=123&timeoutSeconds=300";
    } else if (kind < 85) {
      rec.method = "PUT";
      rec.path = base + "/obj-" + std::to_string(object);
      rec.status = kind < 67 ? 409 : 200;
      rec.response.object_seen = true;
      rec.response.generation = static_cast<int64_t>(i % 50);
      rec.response.finalizers_seen = true;
    } else if (kind < 95) {
      rec.method = "PATCH";
      rec.path = base + "/obj-" + std::to_string(object) + "/status";
    } else if (kind < 98) {
      rec.method = "DELETE";
      rec.path = base + "/obj-" + std::to_string(object);
    } else {
      rec.method = "GET";
      rec.path = base;
      rec.status = 429;
      rec.response.retry_after_s = 1;
    }
    (*w)->Write(rec);
    if (i % 10 == 0) {
      EtcdRequest e;
      e.pid = 200;
      e.start_ns = rec.start_ns + 100'000;
      e.end_ns = rec.end_ns - 100'000;
      e.method = kind < 60 ? "/etcdserverpb.KV/Range" : "/etcdserverpb.KV/Txn";
      e.request = kind < 60 ? EtcdMessage::kRangeRequest : EtcdMessage::kTxnRequest;
      e.decoded.registry = true;
      e.decoded.prefix = kind >= 45 && kind < 60;
      e.decoded.resource = resource;
      e.decoded.namespace_ = ns;
      e.kvs = e.decoded.prefix ? 200 : 1;
      e.kv_bytes = static_cast<uint64_t>(e.kvs) * 1500;
      e.code = 0;
      e.identity.user = "kube-apiserver-etcd-client";
      (*w)->Write(e);
    }
  }
  w->reset();
  std::rename((path + ".tmp").c_str(), path.c_str());
}

// CPU time of this thread: the machine is shared, wall time is not the pipeline's.
double ThreadCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

long ProcKiB(const char* file, const std::string& field) {
  std::ifstream status(file);
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field, 0) == 0) return std::stol(line.substr(field.size()));
  }
  return -1;
}
long RssKiB() { return ProcKiB("/proc/self/status", "VmRSS:"); }
// Of it on transparent huge pages: the agent runs with its heap on them (agent/heap_pages.h;
// ctest sets GLIBC_TUNABLES as the Helm chart does).
long HugeKiB() { return ProcKiB("/proc/self/smaps_rollup", "AnonHugePages:"); }

void CountMemory(benchmark::State& state) {
  state.counters["rss_mib"] = static_cast<double>(RssKiB()) / 1024.0;
  state.counters["huge_mib"] = static_cast<double>(HugeKiB()) / 1024.0;
}

// The detectors' limits: the defaults (4,096 clients per detector, 10,000 objects: with 10,000
// clients live the client tables evict on most records), or sized to hold this capture's live
// set (no evictions of clients; objects per client still turn over).
DetectorsConfig Limits(bool sized) {
  DetectorsConfig d;
  if (!sized) return d;
  constexpr size_t kClientKeys = 4 * kClients;  // a client's resources
  d.update_loop.max_resources = kClientKeys;
  d.update_loop.max_objects = 4 * kObjects;
  d.list_storm.max_keys = kClientKeys;
  d.conflict_storm.max_keys = kClientKeys;
  d.conflict_storm.max_objects = kObjects;
  d.throttled_client.max_clients = 2 * kClients;
  d.stuck_finalizers.max_writing_clients = 2 * kClients;
  d.relist_churn.max_keys = kClientKeys;
  d.etcd_range_storm.max_list_clients = kClientKeys;
  return d;
}

// `stormwatch replay`'s own loop, as fast as it goes: reading the file included.
void BM_ReplayFile(benchmark::State& state) {
  const size_t records = 1'000'000;
  const bool sized = state.range(0) != 0;
  const std::string path = CapturePath(records);
  WriteCapture(path, records);
  uint64_t processed = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto exporter = std::make_unique<PrometheusExporter>();
    auto pipeline = std::make_unique<MeteredPipeline>(exporter.get(), Limits(sized),
                                                      [](const StormTransition&) {});
    auto reader = CaptureReader::Open(path);
    if (!reader) {
      state.SkipWithError(reader.error().message.c_str());
      return;
    }
    state.ResumeTiming();
    auto stats = ReplayCapture(**reader, *pipeline, /*recorded_pace=*/false, /*drain_s=*/0);
    state.PauseTiming();
    if (!stats) {
      state.SkipWithError(stats.error().message.c_str());
      return;
    }
    processed += stats->requests + stats->etcd_calls;
    CountMemory(state);
    pipeline.reset();  // teardown is not the pipeline's per-record cost
    exporter.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(static_cast<int64_t>(processed));
  state.SetLabel(sized ? "limits sized to the live set" : "default limits");
}

// The capture of BM_Pipeline's variant `variant` (0 and 1: 10,000 clients; 2: 100 clients),
// read into memory. REPLAY_BENCH_RECORDS=N keeps the first N records only: for runs under
// callgrind or DHAT, whose instruction and allocation counts repeat where timings do not.
std::optional<std::vector<CaptureRecord>> LoadCapture(benchmark::State& state, int variant) {
  const size_t records = 1'000'000;
  const bool hot = variant == 2;
  const std::string path = CapturePath(records, hot ? kHotClients : kClients);
  WriteCapture(path, records, hot ? kHotClients : kClients, hot ? kHotObjects : kObjects);
  auto reader = CaptureReader::Open(path);
  if (!reader) {
    state.SkipWithError(reader.error().message.c_str());
    return std::nullopt;
  }
  const char* limit = std::getenv("REPLAY_BENCH_RECORDS");
  const size_t max_records = limit ? std::strtoull(limit, nullptr, 10) : SIZE_MAX;
  std::vector<CaptureRecord> loaded;
  while (loaded.size() < max_records) {
    auto next = (*reader)->Next();
    if (!next || !*next) break;
    loaded.push_back(std::move(**next));
  }
  return loaded;
}

std::string BearerToken(int client);
constexpr const char* kUserAgents[] = {"kubectl/v1.31.0",
                                       "controller/v1.2.3 (linux/amd64) kubernetes/abc"};
const char* UserAgentOf(int client) { return kUserAgents[client % 3 ? 1 : 0]; }

// Identities as the live path gets them: each request's bearer token and user agent resolved
// through the agent's identity cache (a keyed hash of the ~1.2 KB token, then a lookup; a JWT
// decode on a miss), instead of the identity the capture file stored. The capture's client
// is its connection's (conn_id = 0xc000000000 + client).
struct LiveIdentities {
  IdentityCache cache{AssemblerLimits{}.max_identities};
  std::vector<std::string> tokens;  // per client
  LiveIdentities() {
    for (int c = 0; c < kClients; ++c) tokens.push_back(BearerToken(c));
    // Every client resolved once: the steady state of a cache larger than the client set.
    for (int c = 0; c < kClients; ++c) cache.Resolve(tokens[c], UserAgentOf(c));
  }
  IdentityRef Resolve(const RequestRecord& r) {
    const int client = static_cast<int>(r.conn_id - 0xc000000000);
    return cache.Resolve(tokens[client], UserAgentOf(client));
  }
};

// What one pass of the per-record loop measured.
struct LoopFigures {
  uint64_t records = 0, ticks = 0, counted = 0;
  double loop_ns = 0, tick_ns = 0;  // this thread's CPU time
  double staging_ns = 0;            // copying events into staging (BM_PipelineFromEvents/1)
};

// The detectors evaluated at each recorded second, as the agent's drain loop does once a
// second, timed apart (a cost per second and per tracked key, not per record).
class RecordedSeconds {
 public:
  void At(uint64_t end_ns, RequestPipeline& pipeline, LoopFigures& f) {
    const int64_t s = static_cast<int64_t>(end_ns / 1'000'000'000);
    if (s == second_) return;
    if (second_ >= 0) {
      const double tick_start = ThreadCpuNs();
      pipeline.Tick(s * 1'000'000'000 + 10'000'000);
      f.tick_ns += ThreadCpuNs() - tick_start;
      ++f.ticks;
    }
    second_ = s;
  }

 private:
  int64_t second_ = -1;
};

uint64_t WarmupRecords() {
  const char* warmup = std::getenv("REPLAY_BENCH_WARMUP");
  return warmup ? std::strtoull(warmup, nullptr, 10) : 0;
}

// One record of a loop: `step(count)` collected by callgrind past the warm-up, its allocations
// counted (where `step` sets g_count_allocations = count) past the first 100k records or the
// warm-up, when each client's and object's state exists.
template <typename Step>
void MeasuredStep(LoopFigures& f, uint64_t warmup_records, Step step) {
  const bool collect = f.records >= warmup_records;
  if (collect) CALLGRIND_TOGGLE_COLLECT;
  const bool count = f.records >= std::max<uint64_t>(warmup_records, 100'000);
  step(count);
  g_count_allocations = false;
  f.counted += count;
  if (collect) CALLGRIND_TOGGLE_COLLECT;
  ++f.records;
}

// Benchmark passes over one pipeline each (made and torn down untimed, default alert sink),
// `pass(pipeline)` timed; the figures summed, rss_mib after the last pass.
template <typename Pass>
LoopFigures RunPasses(benchmark::State& state, const DetectorsConfig& detectors, Pass pass) {
  LoopFigures total;
  g_allocations = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto exporter = std::make_unique<PrometheusExporter>();
    auto pipeline = std::make_unique<MeteredPipeline>(exporter.get(), detectors,
                                                      [](const StormTransition&) {});
    state.ResumeTiming();
    const LoopFigures f = pass(*pipeline);
    // REPLAY_BENCH_EVICTIONS=1: how each detector's tables fared over the pass (how many keys
    // turned over, how many newcomers were refused), printed after it.
    if (std::getenv("REPLAY_BENCH_EVICTIONS") != nullptr) {
      for (const auto& d : pipeline->detectors()) {
        const DetectorStats st = d->Stats();
        std::fprintf(stderr, "%s: observed %llu, evictions %llu, refusals %llu, tracked %zu\n",
                     d->storm(), static_cast<unsigned long long>(st.observed),
                     static_cast<unsigned long long>(st.evictions),
                     static_cast<unsigned long long>(st.refusals), st.tracked);
      }
    }
    total.records += f.records;
    total.ticks += f.ticks;
    total.counted += f.counted;
    total.loop_ns += f.loop_ns;
    total.tick_ns += f.tick_ns;
    total.staging_ns += f.staging_ns;
    state.PauseTiming();
    CountMemory(state);
    pipeline.reset();  // teardown is not the pipeline's per-record cost
    exporter.reset();
    state.ResumeTiming();
  }
  return total;
}

// The live path after the ring buffer over `loaded`: each record copied (as the protocol stage
// builds it from ring-buffer bytes) and handed to `pipeline`, the detectors evaluated at each
// recorded second, timed apart (a cost per second and per tracked key, not per record).
// REPLAY_BENCH_WARMUP=M: under callgrind --collect-atstart=no, the first M records are not
// counted (each client's and object's first request creates state and series: a short sample
// from the start counts mostly those). Allocations are counted past the first 100k records (or
// the warm-up), when each client's and object's state exists: the steady state.
LoopFigures ReplayLoaded(const std::vector<CaptureRecord>& loaded, RequestPipeline& pipeline,
                         LiveIdentities* live = nullptr) {
  const uint64_t warmup_records = WarmupRecords();
  LoopFigures f;
  const double loop_start = ThreadCpuNs();
  RecordedSeconds seconds;
  for (const CaptureRecord& rec : loaded) {
    const bool request = std::holds_alternative<RequestRecord>(rec);
    seconds.At(request ? std::get<RequestRecord>(rec).end_ns : std::get<EtcdRequest>(rec).end_ns,
               pipeline, f);
    // Copied just before the pipeline takes it and freed once processed (hot in cache, as on
    // the live path): copies of the whole capture made beforehand were freed cold, one
    // scattered record at a time, 40% of the time, a cost the live path does not have.
    MeasuredStep(f, warmup_records, [&](bool count) {
      if (request) {
        RequestRecord copy(std::get<RequestRecord>(rec));
        g_count_allocations = count;
        if (live) copy.identity = live->Resolve(copy);
        pipeline.ReplayRequest(std::move(copy));
      } else {
        EtcdRequest copy(std::get<EtcdRequest>(rec));
        g_count_allocations = count;
        pipeline.ReplayEtcdCall(std::move(copy));
      }
    });
  }
  f.loop_ns = ThreadCpuNs() - loop_start;
  return f;
}

// The live path after the ring buffer: request records and etcd calls, already decoded (as the
// protocol stage hands them over), through RequestInfo, keys, metrics and every detector, with
// the detectors evaluated at each recorded second. The capture is read into memory first.
void BM_Pipeline(benchmark::State& state) {
  // 0: default limits; 1: limits sized to the live set; 2: 100 clients, default limits;
  // 3: as 0, each request's identity resolved from its bearer token as live (LiveIdentities).
  const bool sized = state.range(0) == 1;
  const bool hot = state.range(0) == 2;
  const auto loaded = LoadCapture(state, hot ? 2 : 0);
  if (!loaded) return;
  std::unique_ptr<LiveIdentities> live;
  if (state.range(0) == 3) live = std::make_unique<LiveIdentities>();
  const LoopFigures total = RunPasses(state, Limits(sized), [&](RequestPipeline& pipeline) {
    return ReplayLoaded(*loaded, pipeline, live.get());
  });
  state.SetItemsProcessed(static_cast<int64_t>(total.records));
  // items_per_second counts both; these split them: the per-record path alone (records/s
  // without the evaluations) and one evaluation of every detector (ms per recorded second).
  state.counters["per_record_rate"] = total.records / ((total.loop_ns - total.tick_ns) / 1e9);
  state.counters["eval_ms"] = total.ticks ? total.tick_ns / total.ticks / 1e6 : 0;
  state.counters["allocs_per_record"] =
      total.counted ? static_cast<double>(g_allocations) / total.counted : 0;
  state.SetLabel(hot     ? "100 clients, 1,000 objects, default limits"
                 : sized ? "limits sized to the live set"
                 : live  ? "default limits, identities resolved from tokens"
                         : "default limits");
}

// The capture's requests as the ring buffer holds them: for each, the HTTP/2 request event
// the BPF program writes (every header field client-go sends, with the client's bearer token,
// and the connection's ends) and its response event (status, bytes written, the APF UIDs
// kube-apiserver answers with, Retry-After on a 429, and the start of a write's response body:
// the object, or a 409's Status). One arena in record order, as a ring holds them. The
// capture's etcd calls are left out: their probes are etcd's.
struct RingEvents {
  struct Request {
    size_t request_at, request_len, response_at, response_len;
    uint64_t end_ns;
  };
  std::vector<uint8_t> bytes;
  std::vector<Request> requests;
};

sw_sock_addr SockAddrOf(const std::optional<TcpEndpoint>& e) {
  sw_sock_addr out{};
  if (!e) return out;
  out.ip_len = 4;  // the capture's clients are IPv4: the BPF program reports 4 bytes
  out.port = e->port;
  std::memcpy(out.ip, e->ip.data() + 12, 4);
  return out;
}

// A write's response body as kube-apiserver starts it: the object (JSON), or a 409's Status.
std::string WriteResponseBody(const RequestRecord& r) {
  if (r.status == 409) {
    return R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":)"
           R"("Operation cannot be fulfilled on the object: the object has been modified; please )"
           R"(apply your changes to the latest version and try again","reason":"Conflict",)"
           R"("details":{"name":"obj"},"code":409})";
  }
  return R"({"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"obj","namespace":"ns",)"
         R"("uid":"5e1f2a3b-9a8b-4c6d-8e7f-0a1b2c3d4e5f","resourceVersion":"48213377",)"
         R"("generation":)" + std::to_string(r.response.generation) +
         R"(,"creationTimestamp":"2026-11-30T08:00:00Z","finalizers":["example.com/cleanup"]},)"
         R"("data":{"config.yaml":"replicas: 3\nmode: active\n"}})";
}

RingEvents EventsOf(const std::vector<CaptureRecord>& loaded, const LiveIdentities& identities) {
  RingEvents ring;
  ring.requests.reserve(loaded.size());
  auto append = [&](const std::vector<uint8_t>& event) {
    ring.bytes.insert(ring.bytes.end(), event.begin(), event.end());
    return event.size();
  };
  for (const CaptureRecord& rec : loaded) {
    const auto* r = std::get_if<RequestRecord>(&rec);
    if (!r) continue;
    const int client = static_cast<int>(r->conn_id - 0xc000000000);
    const bool write = r->method[0] == 'P' || r->method[0] == 'D';
    const bool kubectl = UserAgentOf(client) == kUserAgents[0];
    std::vector<std::pair<std::string_view, std::string_view>> fields = {
        {":method", r->method},
        {":scheme", "https"},
        {":authority", "10.0.0.2:6443"},
        {":path", r->path},
        {"accept", kubectl ? "application/json" : "application/vnd.kubernetes.protobuf, */*"},
        {"user-agent", UserAgentOf(client)},
        {"authorization", identities.tokens[client]},
        {"accept-encoding", "gzip"}};
    if (write && r->method != "DELETE") {
      fields.push_back({"content-type", r->method == "PATCH" ? "application/merge-patch+json"
                                                             : "application/json"});
      fields.push_back({"content-length", "412"});
    }
    RingEvents::Request at{};
    at.end_ns = r->end_ns;
    at.request_at = ring.bytes.size();
    at.request_len = append(H2RequestEventBytes(
        {SW_EV_H2_REQUEST, r->pid, r->start_ns, r->conn_id, r->stream_id, 0}, fields,
        SockAddrOf(r->peer_address), SockAddrOf(r->local_address)));

    sw_h2_response response{};
    response.hdr = {SW_EV_H2_RESPONSE, r->pid, r->end_ns, r->conn_id, r->stream_id, 0};
    response.status = r->status;
    response.wrote_bytes = static_cast<int64_t>(r->response_bytes);
    // kube-apiserver's X-Kubernetes-PF-*-UID headers (36-character UIDs).
    constexpr std::string_view kLevelUid = "3f6c1d2e-8a9b-4c0d-9e1f-2a3b4c5d6e7f";
    constexpr std::string_view kSchemaUid = "7a8b9c0d-1e2f-4a3b-8c4d-5e6f7a8b9c0d";
    response.priority_level_uid_len = kLevelUid.size();
    response.flow_schema_uid_len = kSchemaUid.size();
    std::memcpy(response.priority_level_uid, kLevelUid.data(), kLevelUid.size());
    std::memcpy(response.flow_schema_uid, kSchemaUid.data(), kSchemaUid.size());
    if (r->status == 429) {
      response.retry_after_len = 1;
      response.retry_after[0] = '1';
    }
    const std::string body = write ? WriteResponseBody(*r) : "";
    response.body_len = static_cast<uint32_t>(body.size());
    at.response_at = ring.bytes.size();
    at.response_len = append(EventBytes(response, offsetof(sw_h2_response, body), body));
    ring.requests.push_back(at);
  }
  return ring;
}

// A request as HTTP/1.1 over TLS, as the crypto/tls probes write it: one Read event with the
// request's head (every header client-go sends, the bearer token) and body, one Write event with
// the response's head (status, Content-Length, the APF UID headers, Retry-After on a 429) and
// body. Each event holds a call's first SW_TLS_CAPTURE bytes and, when the call moved more, its
// last SW_TLS_TAIL bytes. Bodies: a write's object or Status as in EventsOf; other responses'
// bytes are filler (only writes' bodies are read).
void AppendTlsEvent(const RequestRecord& r, uint32_t direction, uint64_t ts_ns,
                    std::string_view head, std::string_view body, uint64_t body_len,
                    std::vector<uint8_t>& out) {
  sw_tls_data fixed{};
  fixed.hdr = {SW_EV_TLS_DATA, r.pid, ts_ns, r.conn_id, 0, 0};
  fixed.direction = direction;
  const uint64_t total = head.size() + body_len;
  fixed.total_len = static_cast<uint32_t>(total);
  fixed.captured = static_cast<uint32_t>(std::min<uint64_t>(total, SW_TLS_CAPTURE));
  std::string data(head.substr(0, fixed.captured));
  // `body` holds the body's bytes when it is short; a long one is filler throughout.
  const auto body_byte = [&](uint64_t i) { return i < body.size() ? body[i] : 'x'; };
  for (uint64_t i = 0; data.size() < fixed.captured; ++i) data += body_byte(i);
  if (total > fixed.captured) {
    fixed.tail_len = static_cast<uint32_t>(std::min<uint64_t>(total - fixed.captured, SW_TLS_TAIL));
    for (uint32_t i = 0; i < fixed.tail_len; ++i) {
      fixed.tail[i] = static_cast<uint8_t>(body_byte(body_len - fixed.tail_len + i));
    }
  }
  const std::vector<uint8_t> event = EventBytes(fixed, offsetof(sw_tls_data, data), data);
  out.insert(out.end(), event.begin(), event.end());
}

RingEvents::Request AppendHttp1Events(const RequestRecord& r, const LiveIdentities& identities,
                                      std::vector<uint8_t>& out) {
  const int client = static_cast<int>(r.conn_id - 0xc000000000);
  const bool write = r.method[0] == 'P' || r.method[0] == 'D';
  const bool kubectl = UserAgentOf(client) == kUserAgents[0];
  std::string head = r.method + " " + r.path + " HTTP/1.1\r\nHost: 10.0.0.2:6443\r\n" +
                     "User-Agent: " + UserAgentOf(client) + "\r\nAccept: " +
                     (kubectl ? "application/json" : "application/vnd.kubernetes.protobuf, */*") +
                     "\r\nAuthorization: " + identities.tokens[client] +
                     "\r\nAccept-Encoding: gzip\r\n";
  std::string request_body;
  if (write && r.method != "DELETE") {
    request_body = std::string(412, ' ');
    request_body.front() = '{';
    request_body.back() = '}';
    head += std::string("Content-Type: ") +
            (r.method == "PATCH" ? "application/merge-patch+json" : "application/json") +
            "\r\nContent-Length: 412\r\n";
  }
  head += "\r\n";
  RingEvents::Request at{};
  at.end_ns = r.end_ns;
  at.request_at = out.size();
  AppendTlsEvent(r, SW_TLS_READ, r.start_ns, head, request_body, request_body.size(), out);
  at.request_len = out.size() - at.request_at;

  const std::string body = write ? WriteResponseBody(r) : "";
  const uint64_t body_len = write ? body.size() : r.response_bytes;
  const char* reason = r.status == 409 ? "Conflict" : r.status == 429 ? "Too Many Requests" : "OK";
  std::string response = "HTTP/1.1 " + std::to_string(r.status) + " " + reason +
                         "\r\nAudit-Id: 0b4c9a3e-5f6d-4e7a-8b9c-0d1e2f3a4b5c"
                         "\r\nCache-Control: no-cache, private\r\nContent-Type: application/json"
                         "\r\nX-Kubernetes-Pf-Flowschema-Uid: 7a8b9c0d-1e2f-4a3b-8c4d-5e6f7a8b9c0d"
                         "\r\nX-Kubernetes-Pf-Prioritylevel-Uid: 3f6c1d2e-8a9b-4c0d-9e1f-2a3b4c5d6e7f\r\n";
  if (r.status == 429) response += "Retry-After: 1\r\n";
  response += "Date: Sat, 05 Dec 2026 12:00:00 GMT\r\nContent-Length: " + std::to_string(body_len) +
              "\r\n\r\n";
  at.response_at = out.size();
  AppendTlsEvent(r, SW_TLS_WRITE, r.end_ns, response, body, body_len, out);
  at.response_len = out.size() - at.response_at;
  return at;
}

// The live path from the ring buffer on: each request's two events decoded, assembled into a
// record, its identity resolved from its token, then as BM_Pipeline. REPLAY_BENCH_WARMUP and
// the allocation count as there (the first 100k requests, or the warm-up, not counted).
// Where the drain reads the events from is `source`'s:
//  - kArena: HTTP/2 events read in place from the 1.5 GB arena, so every event is cold (read
//    from memory): more misses than live, where the drain reads what the BPF program wrote
//    moments before;
//  - kStaged: each batch of kStagedBatch requests' HTTP/2 events copied into a reused staging
//    buffer just before the drain reads them, as a ring buffer holds the latest events; the
//    copy is neither timed (benchmark timer paused, its CPU time apart) nor collected by
//    callgrind. Fewer misses than live, where another core wrote the events: they come from
//    the shared cache, not this core's. The live path lies between the two.
//  - kHttp1: as kStaged, each batch's HTTP/1.1 events (AppendHttp1Events) written into the
//    staging buffer, untimed and not collected.
constexpr size_t kStagedBatch = 256;
enum class EventSource { kArena, kStaged, kHttp1 };

LoopFigures ReplayEvents(benchmark::State& state, const std::vector<CaptureRecord>& loaded,
                         const LiveIdentities& identities, const RingEvents& ring,
                         RequestPipeline& pipeline, EventSource source) {
  const uint64_t warmup_records = WarmupRecords();
  LoopFigures f;
  const double loop_start = ThreadCpuNs();
  RecordedSeconds seconds;
  std::vector<uint8_t> staging;
  std::vector<RingEvents::Request> batch;
  auto drain = [&](const uint8_t* bytes, const RingEvents::Request& at) {
    seconds.At(at.end_ns, pipeline, f);
    MeasuredStep(f, warmup_records, [&](bool count) {
      g_count_allocations = count;
      pipeline.OnEvent(std::span(bytes + at.request_at, at.request_len));
      pipeline.OnEvent(std::span(bytes + at.response_at, at.response_len));
    });
  };
  std::vector<const RequestRecord*> requests;
  if (source == EventSource::kHttp1) {
    for (const CaptureRecord& rec : loaded) {
      if (const auto* r = std::get_if<RequestRecord>(&rec)) requests.push_back(r);
    }
  }
  const size_t count = source == EventSource::kHttp1 ? requests.size() : ring.requests.size();
  for (size_t first = 0; first < count; first += kStagedBatch) {
    const size_t end = std::min(count, first + kStagedBatch);
    if (source == EventSource::kArena) {
      for (size_t i = first; i < end; ++i) drain(ring.bytes.data(), ring.requests[i]);
      continue;
    }
    state.PauseTiming();
    const double staging_start = ThreadCpuNs();
    staging.clear();
    batch.clear();
    for (size_t i = first; i < end; ++i) {
      if (source == EventSource::kHttp1) {
        batch.push_back(AppendHttp1Events(*requests[i], identities, staging));
        continue;
      }
      const RingEvents::Request& at = ring.requests[i];
      RingEvents::Request moved = at;
      moved.request_at = staging.size();
      staging.insert(staging.end(), ring.bytes.begin() + at.request_at,
                     ring.bytes.begin() + at.request_at + at.request_len);
      moved.response_at = staging.size();
      staging.insert(staging.end(), ring.bytes.begin() + at.response_at,
                     ring.bytes.begin() + at.response_at + at.response_len);
      batch.push_back(moved);
    }
    f.staging_ns += ThreadCpuNs() - staging_start;
    state.ResumeTiming();
    for (const RingEvents::Request& at : batch) drain(staging.data(), at);
  }
  f.loop_ns = ThreadCpuNs() - loop_start;
  return f;
}

// range(0): the EventSource (0 kArena, 1 kStaged, 2 kHttp1).
void BM_PipelineFromEvents(benchmark::State& state) {
  const auto source = static_cast<EventSource>(state.range(0));
  const auto loaded = LoadCapture(state, 0);
  if (!loaded) return;
  const LiveIdentities identities;
  const RingEvents ring =
      source == EventSource::kHttp1 ? RingEvents{} : EventsOf(*loaded, identities);
  bool lost = false;
  const LoopFigures total = RunPasses(state, Limits(false), [&](RequestPipeline& pipeline) {
    const LoopFigures f = ReplayEvents(state, *loaded, identities, ring, pipeline, source);
    // Every request made a record (a response without its request is not one), and on
    // HTTP/1.1 none was lost or unparseable.
    const Http1Stats& h1 = pipeline.http1().stats();
    const uint64_t http1_loss = h1.head_truncated + h1.unparseable + h1.responses_without_request +
                                h1.requests_without_response + h1.connections_evicted;
    lost = lost || pipeline.stats().requests != f.records || pipeline.stats().decode_errors != 0 ||
           http1_loss != 0;
    return f;
  });
  if (lost) state.SkipWithError("events lost: not as the BPF program writes them");
  state.SetItemsProcessed(static_cast<int64_t>(total.records));
  state.counters["per_record_rate"] =
      total.records / ((total.loop_ns - total.tick_ns - total.staging_ns) / 1e9);
  state.counters["allocs_per_record"] =
      total.counted ? static_cast<double>(g_allocations) / total.counted : 0;
  state.counters["ring_mib"] = static_cast<double>(ring.bytes.size()) / (1 << 20);
  state.SetLabel(
      source == EventSource::kStaged
          ? "requests of 10,000 clients, each batch of 256 requests' events staged just before "
            "the drain reads them, default limits"
      : source == EventSource::kHttp1
          ? "the same requests as HTTP/1.1 over TLS (one Read, one Write event each), staged as "
            "/1, default limits"
          : "requests of 10,000 clients, events read cold from a 1.5 GB arena, default limits");
}

// Where the per-record time goes, timed (callgrind counts instructions and simulated misses;
// this is what they cost on this CPU): the same loop as BM_Pipeline on its capture `range(1)`
// (0: 10,000 clients, 2: 100 clients), default limits, with parts of the pipeline left out.
// range(0): 0 everything; 1 no detectors; 2 no metrics (the pipeline without its exporter);
// 3 no detectors and no metrics; 10 + k: detector k alone (in StormDetectors' order), no
// metrics. The cost of a part is the difference of ns_per_record between two of them in one
// run (the machine is shared: runs minutes apart differ by 10%).
constexpr const char* kDetectorNames[] = {"update_loop",   "list_storm",       "exempt_client",
                                          "conflict_storm", "throttled_client", "stuck_finalizers",
                                          "relist_churn",   "etcd_range_storm"};

DetectorsConfig OnlyDetector(int k) {
  DetectorsConfig d;
  bool* enabled[] = {&d.update_loop.enabled,      &d.list_storm.enabled,
                     &d.exempt_client.enabled,    &d.conflict_storm.enabled,
                     &d.throttled_client.enabled, &d.stuck_finalizers.enabled,
                     &d.relist_churn.enabled,     &d.etcd_range_storm.enabled};
  for (int i = 0; i < 8; ++i) *enabled[i] = i == k;
  return d;
}

void BM_PipelineParts(benchmark::State& state) {
  const int parts = static_cast<int>(state.range(0));
  const auto loaded = LoadCapture(state, static_cast<int>(state.range(1)));
  if (!loaded) return;
  const bool metrics = parts == 0 || parts == 1;
  DetectorsConfig detectors = parts >= 10 ? OnlyDetector(parts - 10)
                              : parts == 1 || parts == 3 ? OnlyDetector(-1)
                                                         : DetectorsConfig{};
  LoopFigures total;
  for (auto _ : state) {
    state.PauseTiming();
    auto exporter = std::make_unique<PrometheusExporter>();
    std::unique_ptr<RequestPipeline> pipeline =
        metrics ? std::make_unique<MeteredPipeline>(exporter.get(), detectors,
                                                    [](const StormTransition&) {})
                : std::make_unique<RequestPipeline>(detectors);
    state.ResumeTiming();
    const LoopFigures f = ReplayLoaded(*loaded, *pipeline);
    total.records += f.records;
    total.loop_ns += f.loop_ns;
    total.tick_ns += f.tick_ns;
    state.PauseTiming();
    pipeline.reset();
    exporter.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(static_cast<int64_t>(total.records));
  state.counters["ns_per_record"] = (total.loop_ns - total.tick_ns) / total.records;
  const std::string capture = state.range(1) == 2 ? "100 clients: " : "10,000 clients: ";
  state.SetLabel(capture + (parts == 0   ? "everything"
                            : parts == 1 ? "no detectors"
                            : parts == 2 ? "no metrics"
                            : parts == 3 ? "no detectors, no metrics"
                                         : std::string(kDetectorNames[parts - 10]) +
                                               " alone, no metrics"));
}

// What the replay leaves out: a capture holds no token, so replayed records come with their
// identity. Live, the protocol stage resolves each request's Authorization and User-Agent
// through the identity cache, decoding the JWT on a miss. This is that step alone, for 10,000
// clients each with its own bound service-account token (the capture's clients), requests
// spread evenly over them as in the capture: ns per request, the cache's hit rate, and what one
// decode costs (a cache of 1 entry: every request a miss).
std::string BearerToken(int client) {
  const std::string ns = "tenant-" + std::to_string(client % 500);
  const std::string sa = "controller-" + std::to_string(client);
  nlohmann::json claims = {
      {"aud", {"https://kubernetes.default.svc.cluster.local"}},
      {"exp", 1780000000},
      {"iat", 1779996400},
      {"iss", "https://kubernetes.default.svc.cluster.local"},
      {"sub", "system:serviceaccount:" + ns + ":" + sa},
      {"kubernetes.io",
       {{"namespace", ns},
        {"node", {{"name", "worker-" + std::to_string(client % 50)}, {"uid", "0b5c6f0e-node"}}},
        {"pod", {{"name", sa + "-7d9f"}, {"uid", "5e1f2a3b-pod-" + std::to_string(client)}}},
        {"serviceaccount", {{"name", sa}, {"uid", "9a8b7c6d-sa-" + std::to_string(client)}}}}}};
  // A real token's signature: RS256's 256 bytes (342 base64url characters), one per token.
  std::mt19937_64 random(static_cast<uint64_t>(client));
  std::string signature(256, '\0');
  for (char& c : signature) c = static_cast<char>(random());
  return "Bearer " + Base64UrlEncode(R"({"alg":"RS256","kid":"3Hq9fYbTQ2"})") + "." +
         Base64UrlEncode(claims.dump()) + "." + Base64UrlEncode(signature);
}

void BM_IdentityResolve(benchmark::State& state) {
  const size_t capacity = static_cast<size_t>(state.range(0));
  std::vector<std::string> tokens;
  for (int c = 0; c < kClients; ++c) tokens.push_back(BearerToken(c));
  constexpr size_t kRequests = 500'000;
  uint64_t hits = 0, misses = 0;
  double ns = 0;
  for (auto _ : state) {
    IdentityCache cache(capacity);
    uint64_t seed = 7;
    // Warm: every client once, then the measured requests.
    for (int c = 0; c < kClients; ++c) {
      benchmark::DoNotOptimize(cache.Resolve(tokens[c], UserAgentOf(c)));
    }
    const uint64_t hits_before = cache.hits(), misses_before = cache.misses();
    const double start = ThreadCpuNs();
    for (size_t i = 0; i < kRequests; ++i) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      const int c = static_cast<int>((seed >> 8) % kClients);
      benchmark::DoNotOptimize(cache.Resolve(tokens[c], UserAgentOf(c)));
    }
    ns += ThreadCpuNs() - start;
    hits += cache.hits() - hits_before;
    misses += cache.misses() - misses_before;
  }
  state.SetItemsProcessed(static_cast<int64_t>(hits + misses));
  state.counters["ns_per_request"] = ns / static_cast<double>(hits + misses);
  state.counters["hit_rate"] = static_cast<double>(hits) / static_cast<double>(hits + misses);
  state.SetLabel(capacity == 1 ? "every request a JWT decode"
                 : "10,000 clients, cache of " + std::to_string(capacity));
}


// A write's response body read for object facts (generation, deletionTimestamp, finalizers,
// resourceVersion), as the BPF program keeps it: the first 4 KB of a Deployment as kube-apiserver
// returns it from an update (typed JSON: kind, apiVersion, metadata with labels, annotations and
// managedFields, then spec and status), so the body is cut. ns per body.
void BM_ObjectFacts(benchmark::State& state) {
  std::string managed;
  for (const char* manager : {"kube-controller-manager", "kubectl-client-side-apply", "argocd-controller"}) {
    managed += std::string(managed.empty() ? "" : ",") + R"({"manager":")" + manager +
               R"(","operation":"Update","apiVersion":"apps/v1","time":"2026-11-30T08:00:00Z",)"
               R"("fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:annotations":{".":{},)"
               R"("f:deployment.kubernetes.io/revision":{}}},"f:status":{"f:availableReplicas":{},)"
               R"("f:conditions":{".":{},"k:{\"type\":\"Available\"}":{".":{},"f:lastTransitionTime":{},)"
               R"("f:lastUpdateTime":{},"f:message":{},"f:reason":{},"f:status":{},"f:type":{}}},)"
               R"("f:observedGeneration":{},"f:readyReplicas":{},"f:replicas":{},"f:updatedReplicas":{}}}})";
  }
  std::string body =
      R"({"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"checkout","namespace":"shop",)"
      R"("uid":"5e1f2a3b-9a8b-4c6d-8e7f-0a1b2c3d4e5f","resourceVersion":"48213377","generation":42,)"
      R"("creationTimestamp":"2026-11-30T08:00:00Z","labels":{"app":"checkout","team":"payments",)"
      R"("app.kubernetes.io/managed-by":"argocd"},"annotations":{"deployment.kubernetes.io/revision":"17",)"
      R"("argocd.argoproj.io/tracking-id":"shop:apps/Deployment:shop/checkout"},)"
      R"("finalizers":["example.com/cleanup"],"managedFields":[)" + managed + R"(]},"spec":{"replicas":3,)";
  while (body.size() < 4096) {
    body += R"("template":{"spec":{"containers":[{"name":"app","image":"registry.example/checkout:1.2.3",)"
            R"("resources":{"requests":{"cpu":"250m","memory":"256Mi"}}}]}},)";
  }
  body.resize(4096);  // the BPF program's SW_BODY_PREFIX
  ResponseFacts facts;
  uint64_t bodies = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(ParseObjectFacts(body, &facts));
    ++bodies;
  }
  if (!facts.object_seen || facts.generation != 42 || facts.finalizers.size() != 1) {
    state.SkipWithError("the body's facts were not read");
  }
  state.SetItemsProcessed(static_cast<int64_t>(bodies));
  state.SetLabel("4 KB of a Deployment (managedFields, spec), typed JSON");
}

// A scrape of a full exporter: 500 clients with their own series plus "other", 200 request
// label sets each (20 resources x 5 verbs x 2 codes), so 100,200 stormwatch_requests_total
// series and as many of response bytes, 1,002 APF series. A scrape holds the exporter's lock
// while it copies the counts of the families the exporter keeps (the drain waits for that); it
// makes their series, the registry's families and the text without it. Printed: ms per
// Collect() (all families, no text), the text's size, and the longest a thread counting
// requests meanwhile (the drain) waited for one count.
void BM_ScrapeFullExporter(benchmark::State& state) {
  PrometheusExporter exporter(ClientSeriesLimits{.max_clients = 500, .idle_s = 600});
  const char* verbs[] = {"GET", "LIST", "UPDATE", "PATCH", "WATCH"};
  const char* codes[] = {"200", "409"};
  std::vector<std::string> clients, resources;
  for (int c = 0; c <= 500; ++c) clients.push_back("system:serviceaccount:ns" + std::to_string(c) + ":sa");
  for (int r = 0; r < 20; ++r) resources.push_back("resource" + std::to_string(r));
  for (const std::string& client : clients) {
    for (const std::string& resource : resources) {
      for (const char* verb : verbs) {
        for (const char* code : codes) {
          RequestObservation o;
          o.labels = {client, verb, "apps", "v1", resource, "", "namespace", code};
          o.response_bytes = 1000;
          o.apf = true;
          o.priority_level = "workload-low";
          o.flow_schema = "service-accounts";
          o.duration_s = 0.01;
          exporter.CountRequest(o);
        }
      }
    }
  }
  // The drain's side: a thread counting requests throughout, its longest wait for one count.
  std::atomic<bool> stop{false};
  std::atomic<int64_t> longest_count_ns{0};
  std::thread drain([&] {
    RequestObservation o;
    o.labels = {clients[0], "GET", "apps", "v1", resources[0], "", "namespace", "200"};
    o.duration_s = 0.01;
    while (!stop.load(std::memory_order_relaxed)) {
      const auto start = std::chrono::steady_clock::now();
      exporter.CountRequest(o);
      const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now() - start).count();
      if (ns > longest_count_ns.load(std::memory_order_relaxed)) longest_count_ns.store(ns);
    }
  });
  double collect_ns = 0, text_bytes = 0;
  uint64_t scrapes = 0;
  for (auto _ : state) {
    const double start = ThreadCpuNs();
    std::vector<prometheus::MetricFamily> families = exporter.Collect();
    collect_ns += ThreadCpuNs() - start;
    text_bytes = static_cast<double>(prometheus::TextSerializer().Serialize(families).size());
    ++scrapes;
  }
  stop = true;
  drain.join();
  state.counters["longest_count_wait_ms"] = static_cast<double>(longest_count_ns.load()) / 1e6;
  const std::string text = exporter.Scrape();
  size_t request_series = 0;
  for (size_t at = text.find("\nstormwatch_requests_total{"); at != std::string::npos;
       at = text.find("\nstormwatch_requests_total{", at + 1)) {
    ++request_series;
  }
  if (request_series != 501 * 200) state.SkipWithError("not every request series was scraped");
  state.counters["collect_ms"] = collect_ns / 1e6 / static_cast<double>(scrapes);
  state.counters["text_MB"] = text_bytes / 1e6;
  state.SetLabel("100,200 request series of 501 clients; collect_ms: Collect() alone (registry included)");
}

// 1.1M records (1M requests + 100k etcd calls) each; the smoke run in CI uses the same file.
BENCHMARK(BM_ReplayFile)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_Pipeline)
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->Arg(3)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
// Not in CI's smoke run (the filter there names the others): 12 passes per capture.
BENCHMARK(BM_PipelineParts)
    ->ArgsProduct({{0, 1, 2, 3, 10, 11, 12, 13, 14, 15, 16, 17}, {0, 2}})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK(BM_PipelineFromEvents)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_ObjectFacts);
BENCHMARK(BM_ScrapeFullExporter)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_IdentityResolve)->Arg(1)->Arg(4096)->Arg(16384)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace
}  // namespace stormwatch

namespace {

// REPLAY_BENCH_NEIGHBOUR_MIB=N: another thread reads and writes random cache lines of an N MiB
// buffer for the whole run, as kube-apiserver and etcd do beside the agent on a control-plane
// node. Alone, the benchmark has the processor's last-level cache to itself (32 MiB on the
// machine the figures come from), which holds most of its working set; with a neighbour, lines
// the pipeline touches are more often evicted between two of its requests.
class CacheNeighbour {
 public:
  explicit CacheNeighbour(size_t mib) : lines_(mib * 1024 * 1024 / 64) {
    if (lines_.empty()) return;
    thread_ = std::thread([this] {
      uint64_t x = 0x9E3779B97F4A7C15;
      while (!stop_.load(std::memory_order_relaxed)) {
        for (int i = 0; i < 4096; ++i) {
          x ^= x << 13;
          x ^= x >> 7;
          x ^= x << 17;
          ++lines_[x % lines_.size()].bytes[x & 63];
        }
      }
    });
  }
  ~CacheNeighbour() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  struct alignas(64) Line {
    unsigned char bytes[64];
  };
  std::vector<Line> lines_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

int main(int argc, char** argv) {
  // Which pages the heap is on changes the figures by 10-20% with 10,000 clients (TLB misses).
  benchmark::AddCustomContext("heap", stormwatch::DescribeHeapPages(stormwatch::CurrentHeapPages()));
  const char* neighbour_mib = std::getenv("REPLAY_BENCH_NEIGHBOUR_MIB");
  const size_t mib = neighbour_mib ? std::strtoull(neighbour_mib, nullptr, 10) : 0;
  benchmark::AddCustomContext(
      "cache_neighbour",
      mib ? std::to_string(mib) + " MiB walked at random by another thread" : "none");
  CacheNeighbour neighbour(mib);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
