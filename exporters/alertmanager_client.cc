#include "exporters/alertmanager_client.h"

#include <curl/curl.h>
#include <spdlog/spdlog.h>
#include <time.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "agent/kube/identity.h"

namespace stormwatch {
namespace {

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             SteadyClock::now().time_since_epoch())
      .count();
}

int64_t WallNowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// Millisecond RFC 3339 in UTC, as Alertmanager itself prints times.
std::string Rfc3339(int64_t realtime_ns) {
  time_t secs = realtime_ns / 1000000000;
  struct tm tm;
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>((realtime_ns / 1000000) % 1000));
  return buf;
}

// Invalid UTF-8 (a user name is whatever a token claimed) is replaced, never thrown on.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// The labels Alertmanager identifies the alert by. Empty values are left out: Alertmanager, like
// Prometheus, treats an empty label as an absent one. The storm's own labels win over static ones.
json Labels(const StormEvidence& e, const AlertmanagerConfig& config) {
  json labels = json::object();
  for (const auto& [name, value] : config.labels) labels[name] = value;
  auto set = [&](const char* name, const std::string& value) {
    if (!value.empty()) labels[name] = value;
  };
  set("alertname", AlertName(e.storm));
  set("storm", e.storm);
  set("severity", e.severity);
  set("client", ClientLabel(e.identity));
  set("group", e.api_group);
  set("resource", e.resource);
  set("namespace", e.namespace_.empty() ? config.default_namespace : e.namespace_);
  return labels;
}

// One storm across evidence updates: its namespace (or severity, when escalated) may change
// while it fires, the storm it is about does not.
std::string StormKey(const StormEvidence& e) {
  return e.storm + '\n' + ClientLabel(e.identity) + '\n' + e.api_group + '\n' + e.resource;
}

// One POST at a time on a reused connection. The multi interface lets the transfer be abandoned
// within ~50 ms of Stop()'s deadline instead of running to its own timeout.
class Poster {
 public:
  Poster() : easy_(curl_easy_init(), curl_easy_cleanup), multi_(curl_multi_init(), curl_multi_cleanup) {}

  // "" on a 2xx answer, else what went wrong.
  std::string Post(const std::string& url, const std::string& body,
                   std::chrono::milliseconds timeout, const std::atomic<int64_t>& give_up_at_ns) {
    if (!easy_ || !multi_) return "libcurl could not be initialised";
    CURL* curl = easy_.get();
    std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> headers(
        curl_slist_append(nullptr, "Content-Type: application/json"), curl_slist_free_all);
    std::string response;
    curl_easy_reset(curl);
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers.get());
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max<int64_t>(timeout.count(), 1)));
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &KeepResponsePrefix);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &response);

    curl_multi_add_handle(multi_.get(), curl);
    int running = 1;
    bool abandoned = false;
    while (true) {
      curl_multi_perform(multi_.get(), &running);
      if (running == 0) break;
      if (SteadyNs() >= give_up_at_ns.load()) {
        abandoned = true;
        break;
      }
      curl_multi_poll(multi_.get(), nullptr, 0, 50, nullptr);
    }
    CURLcode result = CURLE_OK;
    int queued = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi_.get(), &queued)) {
      if (msg->msg == CURLMSG_DONE) result = msg->data.result;
    }
    curl_multi_remove_handle(multi_.get(), curl);

    if (abandoned) return "abandoned at the stop deadline";
    if (result != CURLE_OK) return curl_easy_strerror(result);
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    if (status < 200 || status > 299) return "HTTP " + std::to_string(status) + ": " + response;
    return "";
  }

 private:
  // Alertmanager's answer explains a refusal (e.g. an invalid label); a prefix is enough.
  static size_t KeepResponsePrefix(char* data, size_t size, size_t count, void* out) {
    auto* response = static_cast<std::string*>(out);
    constexpr size_t kKept = 256;
    if (response->size() < kKept) {
      response->append(data, std::min(size * count, kKept - response->size()));
    }
    return size * count;
  }

  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> easy_;
  std::unique_ptr<CURLM, decltype(&curl_multi_cleanup)> multi_;
};

}  // namespace

std::string AlertName(std::string_view storm) {
  std::string name = "Stormwatch";
  bool word_start = true;
  for (char c : storm) {
    if (c == '_') {
      word_start = true;
      continue;
    }
    name += word_start ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    word_start = false;
  }
  return name;
}

AlertmanagerClient::AlertmanagerClient(AlertmanagerConfig config,
                                       int64_t realtime_minus_monotonic_ns)
    : config_(std::move(config)), realtime_minus_monotonic_ns_(realtime_minus_monotonic_ns) {
  curl_global_init(CURL_GLOBAL_DEFAULT);  // reference-counted; thread-safe since curl 7.84
  sender_ = std::thread([this] { Run(); });
}

AlertmanagerClient::~AlertmanagerClient() {
  Stop();
  curl_global_cleanup();
}

void AlertmanagerClient::OnTransition(const StormTransition& t) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    if (!queue_.empty() && queue_.size() >= config_.max_queue) {
      queue_.pop_front();
      ++dropped_;
    }
    queue_.push_back(t);
  }
  wake_.notify_one();
}

void AlertmanagerClient::Stop(std::chrono::milliseconds deadline) {
  {
    std::lock_guard lock(mutex_);
    if (!stopping_) {
      stopping_ = true;
      give_up_at_ns_.store(SteadyNs() + std::chrono::nanoseconds(deadline).count());
    }
  }
  wake_.notify_one();
  if (sender_.joinable()) sender_.join();
}

void AlertmanagerClient::Run() {
  std::string base = config_.url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  const std::string endpoint = base + "/api/v2/alerts";
  const int64_t offset = realtime_minus_monotonic_ns_;
  const auto max_backoff = std::max(config_.resend_interval, config_.retry_backoff);
  Poster poster;
  // Per storm: the alert Alertmanager holds as firing, re-sent every resend_interval.
  std::map<std::string, json> firing;
  // Per label set: alerts to send; a later state of the same alert replaces an earlier one.
  std::map<std::string, json> pending;
  auto resend_at = SteadyClock::now() + config_.resend_interval;
  auto retry_at = SteadyClock::time_point::min();
  auto backoff = config_.retry_backoff;
  bool stop_seen = false;

  auto make_alert = [&](const StormTransition& t, const json& labels) {
    const StormEvidence& e = t.evidence;
    json alert = {
        {"labels", labels},
        {"annotations",
         {{"summary", e.summary},
          {"description", e.fix},
          {"evidence", Dump(e.details)},
          {"runbook_url", config_.runbook_base_url + "/" + e.storm + ".md"}}},
        {"startsAt", Rfc3339((e.since_ns != 0 ? e.since_ns : t.at_ns) + offset)},
    };
    if (!config_.generator_url.empty()) alert["generatorURL"] = config_.generator_url;
    return alert;
  };
  auto expires = [&] {
    return Rfc3339(WallNowNs() + kResendsBeforeExpiry *
                                     std::chrono::nanoseconds(config_.resend_interval).count());
  };
  auto apply = [&](const StormTransition& t) {
    std::string key = StormKey(t.evidence);
    json labels = Labels(t.evidence, config_);
    auto known = firing.find(key);
    if (t.state == StormState::kFiring) {
      if (known != firing.end() && known->second["labels"] != labels) {
        // The same storm under other labels: end the alert Alertmanager knows.
        json ended = known->second;
        ended["endsAt"] = Rfc3339(t.at_ns + offset);
        pending[Dump(ended["labels"])] = ended;
      }
      json alert = make_alert(t, labels);
      alert["endsAt"] = expires();
      pending[Dump(labels)] = alert;
      firing[key] = std::move(alert);
      return;
    }
    // Resolve the label set Alertmanager holds, even if the last evidence differs.
    json alert = make_alert(t, known != firing.end() ? known->second["labels"] : labels);
    alert["endsAt"] = Rfc3339(t.at_ns + offset);
    pending[Dump(alert["labels"])] = alert;
    if (known != firing.end()) firing.erase(known);
  };

  while (true) {
    std::deque<StormTransition> arrived;
    {
      std::unique_lock lock(mutex_);
      auto wake_at = resend_at;
      if (!pending.empty()) wake_at = std::min(wake_at, retry_at);
      if (stop_seen) {
        wake_at = std::min(wake_at, SteadyClock::time_point(std::chrono::nanoseconds(give_up_at_ns_.load())));
      }
      wake_.wait_until(lock, wake_at, [&] { return !queue_.empty() || stopping_ != stop_seen; });
      arrived.swap(queue_);
      stop_seen = stopping_;
    }
    for (const StormTransition& t : arrived) apply(t);

    auto now = SteadyClock::now();
    if (now >= resend_at) {
      for (auto& [key, alert] : firing) {
        alert["endsAt"] = expires();
        pending[Dump(alert["labels"])] = alert;
      }
      resend_at = now + config_.resend_interval;
    }
    if (!pending.empty() && now >= retry_at) {
      json batch = json::array();
      for (const auto& [labels, alert] : pending) batch.push_back(alert);
      auto timeout = config_.timeout;
      if (stop_seen) {
        auto left = std::chrono::nanoseconds(give_up_at_ns_.load() - SteadyNs());
        timeout = std::min(timeout, std::chrono::duration_cast<std::chrono::milliseconds>(left));
      }
      std::string error = poster.Post(endpoint, Dump(batch), timeout, give_up_at_ns_);
      if (error.empty()) {
        sent_ += pending.size();
        pending.clear();
        backoff = config_.retry_backoff;
        retry_at = SteadyClock::time_point::min();
      } else {
        ++failed_;
        spdlog::warn("alertmanager {}: {} alert(s) not delivered, retrying in {} ms: {}", endpoint,
                     pending.size(), backoff.count(), error);
        retry_at = SteadyClock::now() + backoff;
        backoff = std::min(backoff * 2, max_backoff);
      }
    }
    if (stop_seen && (pending.empty() || SteadyNs() >= give_up_at_ns_.load())) break;
  }
  if (!pending.empty()) {
    spdlog::warn("alertmanager {}: stopping with {} alert(s) undelivered", endpoint, pending.size());
  }
}

}  // namespace stormwatch
