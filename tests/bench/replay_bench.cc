// The whole user-space pipeline on a recorded capture: records/s per core from a capture file
// through RequestInfo, identity labels, metrics and every detector, and the memory it holds.
//
// The capture (written once by the benchmark, CaptureWriter as the agent writes it): 1M request
// records from 10,000 clients (service accounts in 500 namespaces, user agents of real clients)
// over 100,000 objects of 8 resources, GETs, LISTs (a third consistent), WATCHes, PUTs (some
// 409s), PATCHes, DELETEs and 429s, at 15,000 records/s of recorded time; plus one etcd call per
// 10 requests. `replay_bench --benchmark_min_time=...` prints records/s (items_per_second) and
// the process RSS after each run; CI runs it briefly as a smoke test.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "agent/pipeline/request_pipeline.h"
#include "agent/record/capture_file.h"
#include "agent/replay.h"
#include "exporters/prometheus_exporter.h"

namespace stormwatch {
namespace {

constexpr int kClients = 10000, kObjects = 100000;
constexpr uint64_t kRecordStepNs = 1'000'000'000 / 15000;

const char* const kResources[] = {"pods", "configmaps", "secrets", "services",
                                  "endpoints", "leases", "events", "nodes"};

std::string CapturePath(size_t records) {
  return "/tmp/stormwatch-replay-bench-" + std::to_string(records) + ".swcap";
}

void WriteCapture(const std::string& path, size_t records) {
  if (std::ifstream(path).good()) return;
  auto w = CaptureWriter::Open(path + ".tmp", {.max_file_bytes = 1ull << 40, .max_files = 1}, 0);
  if (!w) std::abort();
  uint64_t seed = 7;
  auto next = [&] { return seed = seed * 6364136223846793005ULL + 1442695040888963407ULL; };
  for (size_t i = 0; i < records; ++i) {
    uint64_t r = next();
    int client = static_cast<int>((r >> 8) % kClients);
    int object = static_cast<int>((r >> 24) % kObjects);
    const char* resource = kResources[object % 8];
    std::string ns = "ns-" + std::to_string(object % 500);
    RequestRecord rec;
    rec.pid = 100;
    rec.conn_id = 0xc000000000 + client;
    rec.stream_id = static_cast<uint32_t>(2 * i + 1);
    rec.end_ns = 1'000'000'000'000 + i * kRecordStepNs;
    rec.start_ns = rec.end_ns - 2'000'000;
    rec.peer_address = "10.244." + std::to_string(client % 250) + "." + std::to_string(client % 200) + ":40000";
    rec.local_address = "10.0.0.2:6443";
    rec.identity.kind = Identity::Kind::kServiceAccount;
    rec.identity.sa_namespace = "tenant-" + std::to_string(client % 500);
    rec.identity.sa_name = "controller-" + std::to_string(client);
    rec.identity.user = "system:serviceaccount:" + rec.identity.sa_namespace + ":" + rec.identity.sa_name;
    rec.identity.pod_name = rec.identity.sa_name + "-7d9f";
    rec.identity.user_agent = client % 3 ? "controller/v1.2.3 (linux/amd64) kubernetes/abc" : "kubectl/v1.31.0";
    rec.identity.component = client % 3 ? "controller" : "kubectl";
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

long RssKiB() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

void BM_ReplayPipeline(benchmark::State& state) {
  const size_t records = static_cast<size_t>(state.range(0));
  const std::string path = CapturePath(records);
  WriteCapture(path, records);
  uint64_t processed = 0;
  for (auto _ : state) {
    state.PauseTiming();
    PrometheusExporter exporter;
    RequestPipeline pipeline(&exporter, DetectorsConfig{}, [](const StormTransition&) {});
    auto reader = CaptureReader::Open(path);
    if (!reader) {
      state.SkipWithError(reader.error().c_str());
      return;
    }
    state.ResumeTiming();
    // The loop of `stormwatch replay` itself, as fast as it goes.
    auto stats = ReplayCapture(**reader, pipeline, /*recorded_pace=*/false, /*drain_s=*/0);
    if (!stats) {
      state.SkipWithError(stats.error().c_str());
      return;
    }
    processed += stats->requests + stats->etcd_calls;
    state.PauseTiming();
    state.counters["rss_mib"] = static_cast<double>(RssKiB()) / 1024.0;
    state.ResumeTiming();
  }
  state.SetItemsProcessed(static_cast<int64_t>(processed));
  state.counters["records"] = static_cast<double>(records + records / 10);
}

// 1.1M records (1M requests + 100k etcd calls); the smoke run in CI uses the same file.
BENCHMARK(BM_ReplayPipeline)->Arg(1'000'000)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace
}  // namespace stormwatch

BENCHMARK_MAIN();
