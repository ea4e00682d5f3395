#include "agent/options.h"

#include <getopt.h>

#include <charconv>
#include <sstream>
#include <utility>

#include "agent/config/config_file.h"
#include "agent/log_format.h"

namespace stormwatch {
namespace {

enum Flag {
  kPid = 1000, kTarget, kMetricsAddress, kHealthAddress, kRingBufferBytes, kLogLevel,
  kObjectRate, kObjectSustain, kResourceRate, kResourceSustain, kResolve, kHelp, kVersion,
  kConfig, kAlertmanagerUrl, kApiserverUrl, kApiserverTokenFile, kApiserverCaFile,
  kRecord, kRecordMaxBytes, kRecordFiles, kDebugAddress, kLogFormat, kAssumeKernelRelease,
};

const option kLongOptions[] = {
    {"pid", required_argument, nullptr, kPid},
    {"target", required_argument, nullptr, kTarget},
    {"metrics-address", required_argument, nullptr, kMetricsAddress},
    {"health-address", required_argument, nullptr, kHealthAddress},
    {"debug-address", required_argument, nullptr, kDebugAddress},
    {"log-format", required_argument, nullptr, kLogFormat},
    {"assume-kernel-release", required_argument, nullptr, kAssumeKernelRelease},  // hidden
    {"ring-buffer-bytes", required_argument, nullptr, kRingBufferBytes},
    {"log-level", required_argument, nullptr, kLogLevel},
    {"update-loop-object-rate", required_argument, nullptr, kObjectRate},
    {"update-loop-object-sustain", required_argument, nullptr, kObjectSustain},
    {"update-loop-resource-rate", required_argument, nullptr, kResourceRate},
    {"update-loop-resource-sustain", required_argument, nullptr, kResourceSustain},
    {"update-loop-resolve", required_argument, nullptr, kResolve},
    {"config", required_argument, nullptr, kConfig},
    {"alertmanager-url", required_argument, nullptr, kAlertmanagerUrl},
    {"apiserver-url", required_argument, nullptr, kApiserverUrl},
    {"apiserver-token-file", required_argument, nullptr, kApiserverTokenFile},
    {"apiserver-ca-file", required_argument, nullptr, kApiserverCaFile},
    {"record", required_argument, nullptr, kRecord},
    {"record-max-bytes", required_argument, nullptr, kRecordMaxBytes},
    {"record-files", required_argument, nullptr, kRecordFiles},
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

// Applies one command-line flag; "" or what is wrong. The first --target/--pid replaces the
// file's (or default) list, later ones add to it.
std::string ApplyFlag(int flag, std::string_view arg, AgentOptions& o, bool& targets_given,
                      bool& pids_given) {
  switch (flag) {
    case kPid:
      if (!pids_given) o.pids.clear();
      pids_given = true;
      for (const std::string& p : SplitCommas(arg)) {
        auto pid = ParseNumber<pid_t>("pid", p);
        if (!pid) return pid.error().message;
        if (*pid <= 0) return "--pid: must be positive";
        o.pids.push_back(*pid);
      }
      return "";
    case kTarget:
      if (!targets_given) o.target_names.clear();
      targets_given = true;
      for (const std::string& t : SplitCommas(arg)) o.target_names.push_back(t);
      return "";
    case kMetricsAddress:
      if (std::string p = AddressProblem(arg); !p.empty()) {
        return "--metrics-address: " + p + ", got '" + std::string(arg) + "'";
      }
      o.metrics_address = arg;
      return "";
    case kHealthAddress:
      if (std::string p = arg.empty() ? "" : AddressProblem(arg); !p.empty()) {
        return "--health-address: " + p + ", got '" + std::string(arg) + "'";
      }
      o.health_address = arg;
      return "";
    case kDebugAddress:
      if (std::string p = arg.empty() ? "" : AddressProblem(arg); !p.empty()) {
        return "--debug-address: " + p + ", got '" + std::string(arg) + "'";
      }
      o.debug_address = arg;
      return "";
    case kLogFormat:
      if (std::string p = LogFormatProblem(arg); !p.empty()) return "--log-format: " + p;
      o.log_format = arg;
      return "";
    case kAssumeKernelRelease:
      o.assume_kernel_release = arg;
      return "";
    case kRingBufferBytes: {
      auto n = ParseNumber<size_t>("ring-buffer-bytes", arg);
      if (!n) return n.error().message;
      if (std::string p = RingBufferBytesProblem(*n); !p.empty()) return "--ring-buffer-bytes: " + p;
      o.ring_buffer_bytes = *n;
      return "";
    }
    case kLogLevel:
      if (std::string p = LogLevelProblem(arg); !p.empty()) return "--log-level: " + p;
      o.log_level = arg;
      return "";
    case kAlertmanagerUrl:
      if (std::string p = arg.empty() ? "" : HttpUrlProblem(arg); !p.empty()) {
        return "--alertmanager-url: " + p + ", got '" + std::string(arg) + "'";
      }
      o.alertmanager.url = arg;
      return "";
    case kApiserverUrl:
      o.apf_source.apiserver_url = arg;
      return "";
    case kApiserverTokenFile:
      o.apf_source.token_file = arg;
      return "";
    case kApiserverCaFile:
      o.apf_source.ca_file = arg;
      return "";
    case kRecord:
      if (arg.empty()) return "--record: expected a file path";
      o.record_path = arg;
      return "";
    case kRecordMaxBytes: {
      auto n = ParseNumber<uint64_t>("record-max-bytes", arg);
      if (!n) return n.error().message;
      if (*n < 4096) return "--record-max-bytes: at least 4096";
      o.record_max_bytes = *n;
      return "";
    }
    case kRecordFiles: {
      auto n = ParseNumber<uint32_t>("record-files", arg);
      if (!n) return n.error().message;
      if (*n < 1 || *n > 1000) return "--record-files: 1..1000";
      o.record_files = *n;
      return "";
    }
    case kObjectRate:
    case kResourceRate: {
      auto v = ParseNumber<double>(flag == kObjectRate ? "update-loop-object-rate"
                                                       : "update-loop-resource-rate", arg);
      if (!v) return v.error().message;
      (flag == kObjectRate ? o.detectors.update_loop.object_rate
                           : o.detectors.update_loop.resource_rate) = *v;
      return "";
    }
    case kObjectSustain:
    case kResourceSustain:
    case kResolve: {
      auto v = ParseNumber<int>(flag == kObjectSustain     ? "update-loop-object-sustain"
                                : flag == kResourceSustain ? "update-loop-resource-sustain"
                                                           : "update-loop-resolve",
                                arg);
      if (!v) return v.error().message;
      (flag == kObjectSustain     ? o.detectors.update_loop.object_sustain_s
       : flag == kResourceSustain ? o.detectors.update_loop.resource_sustain_s
                                  : o.detectors.update_loop.resolve_s) = *v;
      return "";
    }
    case kHelp:
      o.show_help = true;
      return "";
    case kVersion:
      o.show_version = true;
      return "";
  }
  return "unhandled flag";
}

}  // namespace

std::string AgentUsage() {
  return R"(Usage: stormwatch [options]

Traces kube-apiserver (and etcd) with uprobes, attributes every request to its client and
alerts on request storms. Needs root or CAP_BPF + CAP_PERFMON + CAP_SYS_PTRACE.

Configuration:
  --config FILE              YAML file with any of the settings below and more
                             (docs/configuration.md); flags given here override it
Targets:
  --target NAME              executable name to attach to; repeatable or comma-separated
                             (default: kube-apiserver,etcd)
  --pid PID                  attach to these processes only; repeatable or comma-separated
Export:
  --metrics-address ADDR     Prometheus endpoint, host:port (default: 0.0.0.0:9847)
  --health-address ADDR      /healthz and /readyz, host:port; "" to disable (default: 0.0.0.0:9848)
  --debug-address ADDR       /debug/clients (who calls from where), host:port; "" to disable
                             (default: 127.0.0.1:9849, this node only)
  --log-level LEVEL          trace, debug, info, warn, error (default: info)
  --log-format FORMAT        text, or json: one JSON object per line (default: text)
  --alertmanager-url URL     also push alerts to Alertmanager's v2 API, e.g.
                             http://127.0.0.1:9093 (default: none)
APF names (the agent's own credentials; get/list on flowcontrol objects):
  --apiserver-url URL        https URL of the API server (default: in cluster, from
                             KUBERNETES_SERVICE_HOST/PORT)
  --apiserver-token-file F   bearer token file (default: the pod's service-account token)
  --apiserver-ca-file F      CA bundle (default: the pod's service-account ca.crt)
Capture:
  --ring-buffer-bytes N      BPF ring buffer size, a power of two (default: 16777216)
  --record FILE              also write every request record and etcd call to a capture file
                             (no tokens, keys or bodies; docs/capture-files.md), replayed
                             offline by `stormwatch replay FILE`
  --record-max-bytes N       rotate the capture file at N bytes (default: 268435456)
  --record-files K           keep at most K files: FILE, FILE.1, ... (default: 4)
Runaway UPDATE loop detector (docs/storms.md):
  --update-loop-object-rate R        writes/s on one object (default: 5)
  --update-loop-object-sustain S     seconds it must hold (default: 10)
  --update-loop-resource-rate R      writes/s by one client on one resource (default: 100)
  --update-loop-resource-sustain S   seconds it must hold (default: 3)
  --update-loop-resolve S            calm seconds before the alert resolves (default: 10)

Alerts are written to stdout as one JSON line per transition; logs go to stderr.
`stormwatch replay --help` for replaying a capture file; `stormwatch config-schema` prints
the JSON Schema of the configuration file.
`stormwatch top URL...` for a live view of the busiest clients (`stormwatch top --help`).
)";
}

Result<AgentOptions> ParseAgentOptions(int argc, char** argv) {
  // Flags override the file whatever their order: collect them, load the file, then apply them.
  std::vector<std::pair<int, std::string>> flags;
  std::string config_path;
  optind = 1;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, "", kLongOptions, nullptr)) != -1) {
    if (c == '?' || c == ':') {
      return Error{std::string("unknown or incomplete option '") + argv[optind - 1] +
                   "' (see --help)"};
    }
    if (c == kConfig) {
      config_path = optarg;
      if (config_path.empty()) return Error{"--config: expected a file path"};
    } else {
      flags.emplace_back(c, optarg ? optarg : "");
    }
  }
  if (optind < argc) return Error{std::string("unexpected argument '") + argv[optind] + "'"};

  AgentOptions o;
  if (!config_path.empty()) {
    auto loaded = ApplyConfigFile(config_path, std::move(o));
    if (!loaded) return loaded.error();
    o = std::move(*loaded);
    o.config_path = config_path;
  }
  bool targets_given = false, pids_given = false;
  for (const auto& [flag, arg] : flags) {
    if (std::string error = ApplyFlag(flag, arg, o, targets_given, pids_given); !error.empty()) {
      return Error{error};
    }
  }
  auto problems = o.detectors.update_loop.Problems();
  if (!problems.empty()) return Error{"update loop detector: " + problems.front()};
  return o;
}

}  // namespace stormwatch
