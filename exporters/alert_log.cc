#include "exporters/alert_log.h"

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "agent/kube/identity.h"

namespace stormwatch {
namespace {

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

const char* KindName(Identity::Kind k) {
  switch (k) {
    case Identity::Kind::kServiceAccount: return "serviceaccount";
    case Identity::Kind::kUser: return "user";
    case Identity::Kind::kAnonymous: return "anonymous";
    default: return "unknown";
  }
}

}  // namespace

int64_t RealtimeMinusMonotonicNs() {
  timespec rt, mono;
  clock_gettime(CLOCK_REALTIME, &rt);
  clock_gettime(CLOCK_MONOTONIC, &mono);
  return (int64_t{rt.tv_sec} - mono.tv_sec) * 1000000000 + (rt.tv_nsec - mono.tv_nsec);
}

std::string FormatAlertJson(const StormTransition& t, int64_t offset) {
  const StormEvidence& e = t.evidence;
  using nlohmann::ordered_json;
  ordered_json identity = {{"user", e.identity.user}, {"kind", KindName(e.identity.kind)}};
  if (e.identity.kind == Identity::Kind::kServiceAccount) {
    identity["service_account"] = {{"namespace", e.identity.sa_namespace},
                                   {"name", e.identity.sa_name}};
  }
  if (!e.identity.pod_name.empty()) identity["pod"] = e.identity.pod_name;
  if (!e.identity.groups.empty()) identity["groups"] = e.identity.groups;
  if (e.identity.system_masters) identity["system_masters"] = true;
  identity["user_agent"] = e.identity.user_agent;
  if (!e.identity.component.empty()) {
    identity["component"] = e.identity.component;
    identity["component_version"] = e.identity.component_version;
  }
  ordered_json doc = {
      {"time", Rfc3339(t.at_ns + offset)},
      {"alert", "StormwatchStorm"},
      {"storm", e.storm},
      {"state", t.state == StormState::kFiring ? "firing" : "resolved"},
      {"severity", e.severity},
      {"client", ClientLabel(e.identity)},
      {"identity", identity},
      {"group", e.api_group},
      {"resource", e.resource},
      {"namespace", e.namespace_},
      {"since", Rfc3339(e.since_ns + offset)},
      {"evidence", e.details},
      {"summary", e.summary},
      {"fix", e.fix},
  };
  return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace stormwatch
