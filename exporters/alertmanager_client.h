// Pushes storm alerts straight to Alertmanager's v2 API (POST <url>/api/v2/alerts), for
// clusters where no Prometheus evaluates the chart's rules, or to page before the next scrape.
//
// One alert per storm, labelled like the PrometheusRule's alerts (alertname
// StormwatchUpdateLoop, ..., storm, severity, client, group, resource[, namespace]) so that
// routes and silences written for one match the other. Firing alerts are re-sent every
// resend_interval with endsAt kResendsBeforeExpiry intervals ahead (Alertmanager resolves an
// alert that is not refreshed by its endsAt); Resolved sends endsAt = the resolve time.
//
// OnTransition never blocks on the network: transitions go to a bounded queue (the oldest is
// dropped when full, counted) that a background thread turns into POSTs, retried with
// exponential backoff. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "agent/analysis/storm.h"
#include "agent/config/agent_options.h"

namespace stormwatch {


// Prometheus uses 4 x max(evaluation interval, resend delay) for the same purpose.
inline constexpr int kResendsBeforeExpiry = 4;

// "Stormwatch" + CamelCase(storm): update_loop -> StormwatchUpdateLoop, as
// helm/stormwatch/files/alerts.yaml names the alerts.
std::string AlertName(std::string_view storm);

class AlertmanagerClient {
 public:
  // `realtime_minus_monotonic_ns` converts the detectors' monotonic stamps to wall time
  // (RealtimeMinusMonotonicNs(), exporters/alert_log.h). Starts the sender thread.
  AlertmanagerClient(AlertmanagerConfig config, int64_t realtime_minus_monotonic_ns);
  ~AlertmanagerClient();  // Stop(kDefaultStopDeadline) unless stopped
  AlertmanagerClient(const AlertmanagerClient&) = delete;
  AlertmanagerClient& operator=(const AlertmanagerClient&) = delete;

  void OnTransition(const StormTransition& t);

  // Sends what is still pending, retrying until `deadline` has passed, then joins the sender
  // (a POST in flight is aborted at the deadline). Later transitions are ignored.
  static constexpr std::chrono::milliseconds kDefaultStopDeadline{5000};
  void Stop(std::chrono::milliseconds deadline = kDefaultStopDeadline);

  uint64_t sent() const { return sent_.load(); }        // alerts Alertmanager accepted
  uint64_t failed() const { return failed_.load(); }    // POSTs that failed (retried later)
  uint64_t dropped() const { return dropped_.load(); }  // transitions dropped, queue full

 private:
  void Run();

  const AlertmanagerConfig config_;
  const int64_t realtime_minus_monotonic_ns_;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<StormTransition> queue_;  // guarded by mutex_
  bool stopping_ = false;              // guarded by mutex_
  // steady_clock nanoseconds at which the sender gives up; max while running.
  std::atomic<int64_t> give_up_at_ns_{INT64_MAX};

  std::atomic<uint64_t> sent_{0}, failed_{0}, dropped_{0};
  std::thread sender_;
};

}  // namespace stormwatch
