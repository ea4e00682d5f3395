// Command-line options of the stormwatch agent. `--pid` and `--metrics-address` are a contract
// with checks outside the project: keep their names and meaning.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "agent/analysis/detector_config.h"
#include "agent/capture/apf_fetcher.h"
#include "agent/core/result.h"
#include "exporters/alertmanager_client.h"

namespace stormwatch {

inline constexpr const char* kDefaultMetricsAddress = "0.0.0.0:9847";
inline constexpr const char* kDefaultHealthAddress = "0.0.0.0:9848";
// /debug/* answer who calls from where: loopback only unless asked (kubectl port-forward).
inline constexpr const char* kDefaultDebugAddress = "127.0.0.1:9849";

struct AgentOptions {
  std::vector<std::string> target_names = {"kube-apiserver", "etcd"};
  std::vector<pid_t> pids;
  std::string metrics_address = kDefaultMetricsAddress;
  std::string health_address = kDefaultHealthAddress;  // "" disables it
  std::string debug_address = kDefaultDebugAddress;    // "" disables it
  size_t ring_buffer_bytes = 16u << 20;
  std::string log_level = "info";
  std::string log_format = "text";  // or json: one JSON object per line
  DetectorsConfig detectors;
  // Series with a client label keep at most this many clients; the rest fold into
  // client="other".
  size_t max_clients_per_metric = 500;
  // APF priority-level and flow-schema UIDs -> names, for UIDs the agent cannot look up.
  std::map<std::string, std::string> apf_static_names;
  // Where the cluster's APF objects are listed to name those UIDs (in cluster by default).
  ApfSourceOptions apf_source;
  AlertmanagerConfig alertmanager;  // url "" = no direct push
  // --record FILE: every request record and etcd call to a capture file ("" = none), rotated.
  std::string record_path;
  uint64_t record_max_bytes = 256ull << 20;
  uint32_t record_files = 4;
  std::string config_path;          // --config; "" when none
  // Hidden --assume-kernel-release: the kernel check reads this release instead of uname's
  // (tests of the refusal on kernels the machine does not run).
  std::string assume_kernel_release;
  bool show_help = false;
  bool show_version = false;
};

Result<AgentOptions> ParseAgentOptions(int argc, char** argv);
std::string AgentUsage();

}  // namespace stormwatch
