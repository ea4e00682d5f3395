#include "agent/options.h"

#include <getopt.h>

#include <charconv>
#include <sstream>

namespace stormwatch {
namespace {

enum Flag {
  kPid = 1000, kTarget, kMetricsAddress, kHealthAddress, kRingBufferBytes, kLogLevel,
  kObjectRate, kObjectSustain, kResourceRate, kResourceSustain, kResolve, kHelp, kVersion,
};

const option kLongOptions[] = {
    {"pid", required_argument, nullptr, kPid},
    {"target", required_argument, nullptr, kTarget},
    {"metrics-address", required_argument, nullptr, kMetricsAddress},
    {"health-address", required_argument, nullptr, kHealthAddress},
    {"ring-buffer-bytes", required_argument, nullptr, kRingBufferBytes},
    {"log-level", required_argument, nullptr, kLogLevel},
    {"update-loop-object-rate", required_argument, nullptr, kObjectRate},
    {"update-loop-object-sustain", required_argument, nullptr, kObjectSustain},
    {"update-loop-resource-rate", required_argument, nullptr, kResourceRate},
    {"update-loop-resource-sustain", required_argument, nullptr, kResourceSustain},
    {"update-loop-resolve", required_argument, nullptr, kResolve},
    {"help", no_argument, nullptr, kHelp},
    {"version", no_argument, nullptr, kVersion},
    {nullptr, 0, nullptr, 0},
};

template <typename T>
Result<T> ParseNumber(const char* flag, std::string_view text) {
  T value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return Error{std::string("--") + flag + ": not a number: '" + std::string(text) + "'"};
  }
  return value;
}

std::vector<std::string> SplitCommas(std::string_view s) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in{std::string(s)};
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

}  // namespace

std::string AgentUsage() {
  return R"(Usage: stormwatch [options]

Traces kube-apiserver (and etcd) with uprobes, attributes every request to its client and
alerts on request storms. Needs root or CAP_BPF + CAP_PERFMON + CAP_SYS_PTRACE.

Targets:
  --target NAME              executable name to attach to; repeatable or comma-separated
                             (default: kube-apiserver,etcd)
  --pid PID                  attach to these processes only; repeatable or comma-separated
Export:
  --metrics-address ADDR     Prometheus endpoint, host:port (default: 0.0.0.0:9847)
  --health-address ADDR      /healthz and /readyz, host:port; "" to disable (default: 0.0.0.0:9848)
  --log-level LEVEL          trace, debug, info, warn, error (default: info)
Capture:
  --ring-buffer-bytes N      BPF ring buffer size, a power of two (default: 16777216)
Runaway UPDATE loop detector (STORMS.md section 1):
  --update-loop-object-rate R        writes/s on one object (default: 5)
  --update-loop-object-sustain S     seconds it must hold (default: 10)
  --update-loop-resource-rate R      writes/s by one client on one resource (default: 100)
  --update-loop-resource-sustain S   seconds it must hold (default: 3)
  --update-loop-resolve S            calm seconds before the alert resolves (default: 10)

Alerts are written to stdout as one JSON line per transition; logs go to stderr.
)";
}

Result<AgentOptions> ParseAgentOptions(int argc, char** argv) {
  AgentOptions o;
  bool targets_given = false;
  optind = 1;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, "", kLongOptions, nullptr)) != -1) {
    std::string_view arg = optarg ? optarg : "";
    switch (c) {
      case kPid:
        for (const std::string& p : SplitCommas(arg)) {
          auto pid = ParseNumber<pid_t>("pid", p);
          if (!pid) return Error{pid.error()};
          if (*pid <= 0) return Error{"--pid: must be positive"};
          o.pids.push_back(*pid);
        }
        break;
      case kTarget:
        if (!targets_given) o.target_names.clear();
        targets_given = true;
        for (const std::string& t : SplitCommas(arg)) o.target_names.push_back(t);
        break;
      case kMetricsAddress:
        if (arg.find(':') == std::string_view::npos) {
          return Error{"--metrics-address: expected host:port, got '" + std::string(arg) + "'"};
        }
        o.metrics_address = arg;
        break;
      case kHealthAddress:
        if (!arg.empty() && arg.find(':') == std::string_view::npos) {
          return Error{"--health-address: expected host:port, got '" + std::string(arg) + "'"};
        }
        o.health_address = arg;
        break;
      case kRingBufferBytes: {
        auto n = ParseNumber<size_t>("ring-buffer-bytes", arg);
        if (!n) return Error{n.error()};
        if (*n < 4096 || (*n & (*n - 1)) != 0) {
          return Error{"--ring-buffer-bytes: must be a power of two >= 4096"};
        }
        o.ring_buffer_bytes = *n;
        break;
      }
      case kLogLevel:
        o.log_level = arg;
        break;
      case kObjectRate:
      case kResourceRate: {
        auto v = ParseNumber<double>(c == kObjectRate ? "update-loop-object-rate"
                                                      : "update-loop-resource-rate", arg);
        if (!v) return Error{v.error()};
        (c == kObjectRate ? o.detectors.update_loop.object_rate : o.detectors.update_loop.resource_rate) = *v;
        break;
      }
      case kObjectSustain:
      case kResourceSustain:
      case kResolve: {
        auto v = ParseNumber<int>(c == kObjectSustain     ? "update-loop-object-sustain"
                                  : c == kResourceSustain ? "update-loop-resource-sustain"
                                                          : "update-loop-resolve",
                                  arg);
        if (!v) return Error{v.error()};
        (c == kObjectSustain     ? o.detectors.update_loop.object_sustain_s
         : c == kResourceSustain ? o.detectors.update_loop.resource_sustain_s
                                 : o.detectors.update_loop.resolve_s) = *v;
        break;
      }
      case kHelp:
        o.show_help = true;
        break;
      case kVersion:
        o.show_version = true;
        break;
      default:
        return Error{std::string("unknown or incomplete option '") + argv[optind - 1] +
                     "' (see --help)"};
    }
  }
  if (optind < argc) return Error{std::string("unexpected argument '") + argv[optind] + "'"};
  auto problems = o.detectors.update_loop.Problems();
  if (!problems.empty()) return Error{"update loop detector: " + problems.front()};
  return o;
}

}  // namespace stormwatch
