#include "exporters/process_collector.h"

#include <time.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace stormwatch {
namespace {

double Seconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

prometheus::MetricFamily One(const char* name, const char* help, prometheus::MetricType type,
                             double value) {
  prometheus::ClientMetric m;
  if (type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  return {name, help, type, {m}};
}

}  // namespace

std::optional<ProcessStats> ReadProcessStats(const std::string& proc_dir) {
  std::ifstream stat_file(proc_dir + "/stat");
  std::string stat;
  if (!std::getline(stat_file, stat)) return std::nullopt;
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so fields are counted
  // from the last ')'; the token after it is field 3 (proc(5)).
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(stat.substr(close + 1));
  std::vector<std::string> fields;
  for (std::string f; rest >> f;) fields.push_back(f);
  auto field = [&](size_t number) -> double {  // proc(5)'s 1-based field number
    return number - 3 < fields.size() ? std::stod(fields[number - 3]) : 0;
  };
  if (fields.size() < 22) return std::nullopt;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  ProcessStats s;
  s.cpu_seconds = (field(14) + field(15)) / ticks;  // utime + stime
  s.virtual_bytes = field(23);
  s.resident_bytes = field(24) * static_cast<double>(sysconf(_SC_PAGESIZE));
  // starttime (field 22) is in ticks of CLOCK_BOOTTIME: now minus the time since then gives the
  // start to 1/CLK_TCK, where /proc/stat's btime is whole seconds.
  s.start_time_seconds = Seconds(CLOCK_REALTIME) - (Seconds(CLOCK_BOOTTIME) - field(22) / ticks);

  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(proc_dir + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++s.open_fds;
  }
  std::ifstream limits(proc_dir + "/limits");
  for (std::string line; std::getline(limits, line);) {
    // "Max open files            1048576              1048576              files"
    if (line.rfind("Max open files", 0) != 0) continue;
    std::istringstream cols(line.substr(sizeof("Max open files") - 1));
    std::string soft;
    cols >> soft;
    s.max_fds = soft == "unlimited" ? -1 : std::stod(soft);
  }
  return s;
}

std::vector<prometheus::MetricFamily> ProcessCollector::Collect() const {
  std::optional<ProcessStats> s;
  try {
    s = ReadProcessStats(proc_dir_);
  } catch (const std::exception&) {  // std::stod on a field /proc never writes: no series
  }
  if (!s) return {};
  using prometheus::MetricType;
  return {
      One("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
          MetricType::Counter, s->cpu_seconds),
      One("process_resident_memory_bytes", "Resident memory size in bytes.", MetricType::Gauge,
          s->resident_bytes),
      One("process_virtual_memory_bytes", "Virtual memory size in bytes.", MetricType::Gauge,
          s->virtual_bytes),
      One("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
          MetricType::Gauge, s->start_time_seconds),
      One("process_open_fds", "Number of open file descriptors.", MetricType::Gauge, s->open_fds),
      One("process_max_fds", "Maximum number of open file descriptors.", MetricType::Gauge,
          s->max_fds),
  };
}

}  // namespace stormwatch
