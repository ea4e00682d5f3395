// The agent's own process_* series, with the names and meaning every Prometheus client library
// gives them (prometheus.io/docs/instrumenting/writing_clientlibs, "Process metrics"), read from
// /proc at each scrape: dashboards and alerts written for any exporter's CPU, memory and file
// descriptors work on the agent unchanged.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <optional>
#include <string>
#include <vector>

namespace stormwatch {

struct ProcessStats {
  double cpu_seconds = 0;        // user + system
  double resident_bytes = 0;
  double virtual_bytes = 0;
  double start_time_seconds = 0;  // since the Unix epoch
  double open_fds = 0;
  double max_fds = 0;             // the soft RLIMIT_NOFILE
};

// `proc_dir`: /proc/self, or /proc/PID (tests read a child's). nullopt when it cannot be read.
std::optional<ProcessStats> ReadProcessStats(const std::string& proc_dir);

class ProcessCollector : public prometheus::Collectable {
 public:
  explicit ProcessCollector(std::string proc_dir = "/proc/self") : proc_dir_(std::move(proc_dir)) {}
  // Empty when /proc cannot be read: a scrape never fails for it.
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::string proc_dir_;
};

}  // namespace stormwatch
