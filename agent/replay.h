// `stormwatch replay FILE`: a capture file (agent/record/capture_file.h) through the same
// pipeline and detectors as live, offline, without BPF or privileges. Prints the alert lines
// (as the live agent writes them to stdout) and then the final metrics in Prometheus' text
// format. Time is the recording's: the detectors are evaluated at each recorded second, as the
// live loop evaluates them just after each second closes.
#pragma once

#include <cstdint>
#include <string>

#include "agent/core/result.h"

namespace stormwatch {

struct ReplayOptions {
  std::string path;
  std::string config_path;   // detector thresholds, as the agent's --config
  bool recorded_pace = false;  // false: as fast as it goes; true: at the pace recorded
  int drain_s = 30;          // seconds evaluated after the last record (alerts resolve)
  bool print_metrics = true;
};

class CaptureReader;
class RequestPipeline;

struct ReplayStats {
  uint64_t requests = 0;
  uint64_t etcd_calls = 0;
};
// Every record of `reader` into `pipeline` (at the recorded pace, or as fast as it goes),
// evaluating the detectors at each recorded second, then `drain_s` seconds more. The loop of
// `stormwatch replay` and of the replay benchmark.
Result<ReplayStats> ReplayCapture(CaptureReader& reader, RequestPipeline& pipeline, bool recorded_pace,
                                  int drain_s);

Result<ReplayOptions> ParseReplayOptions(int argc, char** argv);  // argv[1] == "replay"
std::string ReplayUsage();
// The exit code: 0, or 1 with the error on stderr.
int RunReplay(const ReplayOptions& options);

}  // namespace stormwatch
