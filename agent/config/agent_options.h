// The agent's options as plain data: what the command line (agent/options.cc) and the config
// file (agent/config/config_file.cc) fill in, and what agent.cc and the exporters read. No
// parsing and no behaviour here; the options of lower floors (detectors, APF source) are
// theirs and included.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "agent/analysis/detector_config.h"
#include "agent/kube/apf_fetcher.h"  // ApfSourceOptions

namespace stormwatch {

struct AlertmanagerConfig {
  std::string url;  // e.g. http://127.0.0.1:9093; "" disables the push
  std::chrono::milliseconds timeout{5000};            // per POST
  std::chrono::milliseconds resend_interval{60'000};  // firing alerts are refreshed this often
  std::string runbook_base_url =
      "https://stormwatch.invalid/docs/runbooks";  // + /<storm>.md; set it to where docs/runbooks is published
  std::map<std::string, std::string> labels;  // static labels on every alert, e.g. cluster
  // `namespace` of a storm that has none (a client- or cluster-wide storm): the agent's own
  // (POD_NAMESPACE), as the chart's rules give it, so both paths carry the same labels.
  std::string default_namespace;
  std::string generator_url;                  // the agent's metrics URL; "" omits it
  std::chrono::milliseconds retry_backoff{1000};  // first retry delay, doubled up to resend
  size_t max_queue = 1024;                        // transitions waiting for the sender
};

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
  // Decoded client identities kept (by token and user agent): more distinct tokens than this,
  // live at once, and requests decode their token again.
  size_t max_identities = 16384;
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

}  // namespace stormwatch
