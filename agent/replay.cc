#include "agent/replay.h"

#include <prometheus/text_serializer.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "agent/config/config_file.h"
#include "agent/options.h"
#include "agent/metered_pipeline.h"
#include "agent/pipeline/request_pipeline.h"
#include "agent/record/capture_file.h"
#include "exporters/alert_log.h"
#include "exporters/prometheus_exporter.h"

namespace stormwatch {

std::string ReplayUsage() {
  return R"(Usage: stormwatch replay FILE [options]

Runs a capture file (written by stormwatch --record FILE) through the agent's pipeline and
detectors offline, then prints the alert lines and the final metrics.
  --config PATH      detector thresholds, as for the agent (default: built-in thresholds)
  --pace recorded    replay at the pace recorded (default: as fast as possible)
  --drain-s N        seconds evaluated after the last record (default: 30)
  --no-metrics       print the alerts only
)";
}

Result<ReplayOptions> ParseReplayOptions(int argc, char** argv) {
  ReplayOptions o;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> Result<std::string> {
      if (i + 1 >= argc) return Error{std::string(flag) + ": expected a value"};
      return std::string(argv[++i]);
    };
    if (a == "--config") {
      auto v = value("--config");
      if (!v) return v.error();
      o.config_path = *v;
    } else if (a == "--pace") {
      auto v = value("--pace");
      if (!v) return v.error();
      if (*v != "recorded" && *v != "full") return Error{"--pace: recorded or full, got '" + *v + "'"};
      o.recorded_pace = *v == "recorded";
    } else if (a == "--drain-s") {
      auto v = value("--drain-s");
      if (!v) return v.error();
      char* end = nullptr;
      long n = std::strtol(v->c_str(), &end, 10);
      if (end == v->c_str() || *end || n < 0 || n > 3600) return Error{"--drain-s: 0..3600, got '" + *v + "'"};
      o.drain_s = static_cast<int>(n);
    } else if (a == "--no-metrics") {
      o.print_metrics = false;
    } else if (a == "--help" || a == "-h") {
      return Error{ReplayUsage()};
    } else if (o.path.empty() && !a.starts_with("--")) {
      o.path = a;
    } else {
      return Error{"unexpected argument '" + a + "' (see stormwatch replay --help)"};
    }
  }
  if (o.path.empty()) return Error{"expected a capture file (see stormwatch replay --help)"};
  return o;
}

Result<ReplayStats> ReplayCapture(CaptureReader& reader, RequestPipeline& pipeline, bool recorded_pace,
                                  int drain_s) {
  // The live loop evaluates 10 ms after each second closes; so does the replay, in the
  // recording's time.
  constexpr int64_t kSecond = 1'000'000'000, kAfterBucket = 10'000'000;
  // Record times are CLOCK_MONOTONIC ns (about 146 years fit below 2^62), and the longest
  // detector window is minutes: an hour of catch-up ticks drains every one of them.
  constexpr uint64_t kMaxTimeNs = uint64_t{1} << 62;
  constexpr int64_t kMaxCatchUpTicks = 3600;
  int64_t next_tick = -1;
  int64_t first_ns = -1, last_ns = 0;
  const auto wall_start = std::chrono::steady_clock::now();
  ReplayStats stats;
  auto advance = [&](int64_t now) {
    if (next_tick < 0) next_tick = (now / kSecond + 1) * kSecond + kAfterBucket;
    // A gap longer than any detector's window is not ticked through second by second (a file
    // whose clock jumps by years would take hours): the last kMaxCatchUpTicks seconds are.
    if (now >= next_tick && (now - next_tick) / kSecond > kMaxCatchUpTicks) {
      next_tick += ((now - next_tick) / kSecond - kMaxCatchUpTicks) * kSecond;
    }
    while (now >= next_tick) {
      pipeline.Tick(next_tick);
      next_tick += kSecond;
    }
  };
  while (true) {
    auto next = reader.Next();
    if (!next) return next.error();
    if (!*next) break;
    const auto [start_ns, end_ns] = std::visit(
        [](const auto& r) { return std::pair<uint64_t, uint64_t>(r.start_ns, r.end_ns); }, **next);
    if (std::max(start_ns, end_ns) > kMaxTimeNs) {
      return Error{"a record spans " + std::to_string(start_ns) + ".." + std::to_string(end_ns) +
                   " ns, past any monotonic clock: a corrupt capture file"};
    }
    const int64_t end = static_cast<int64_t>(end_ns);
    if (first_ns < 0) first_ns = end;
    if (recorded_pace) std::this_thread::sleep_until(wall_start + std::chrono::nanoseconds(end - first_ns));
    advance(end);
    last_ns = std::max(last_ns, end);
    if (auto* r = std::get_if<RequestRecord>(&**next)) {
      ++stats.requests;
      pipeline.ReplayRequest(std::move(*r));
    } else {
      ++stats.etcd_calls;
      pipeline.ReplayEtcdCall(std::move(std::get<EtcdRequest>(**next)));
    }
  }
  if (first_ns >= 0) advance(last_ns + int64_t{drain_s} * kSecond);
  return stats;
}

int RunReplay(const ReplayOptions& options) {
  AgentOptions agent;
  if (!options.config_path.empty()) {
    auto loaded = ApplyConfigFile(options.config_path, agent);
    if (!loaded) {
      std::fprintf(stderr, "stormwatch replay: %s\n", loaded.error().message.c_str());
      return 1;
    }
    agent = std::move(*loaded);
  }
  auto reader = CaptureReader::Open(options.path);
  if (!reader) {
    std::fprintf(stderr, "stormwatch replay: %s\n", reader.error().message.c_str());
    return 1;
  }
  const int64_t offset = (*reader)->header().realtime_offset_ns;
  PrometheusExporter exporter(ClientSeriesLimits{.max_clients = agent.max_clients_per_metric});
  MeteredPipeline pipeline(&exporter, agent.detectors, [&](const StormTransition& t) {
    std::string line = FormatAlertJson(t, offset);
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fputc('\n', stdout);
  });

  auto stats = ReplayCapture(**reader, pipeline, options.recorded_pace, options.drain_s);
  if (!stats) {
    std::fprintf(stderr, "stormwatch replay: %s\n", stats.error().message.c_str());
    return 1;
  }
  std::fflush(stdout);
  if (options.print_metrics) {
    std::string text = prometheus::TextSerializer().Serialize(exporter.Collect());
    std::fwrite(text.data(), 1, text.size(), stdout);
  }
  std::fprintf(stderr, "stormwatch replay: %llu requests, %llu etcd calls%s\n",
               static_cast<unsigned long long>(stats->requests),
               static_cast<unsigned long long>(stats->etcd_calls),
               (*reader)->truncated_tail_bytes() ? " (the last record was cut short and skipped)" : "");
  return 0;
}

}  // namespace stormwatch
