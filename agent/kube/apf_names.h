// Names of API Priority and Fairness objects by UID. kube-apiserver labels every response with
// X-Kubernetes-PF-PriorityLevel-UID and X-Kubernetes-PF-FlowSchema-UID; operators know the
// objects by name ("exempt", "workload-low", "service-accounts"). The names come from the
// cluster's PriorityLevelConfiguration and FlowSchema lists (agent/kube/apf_fetcher.h), with
// a static mapping from configuration as the fallback. Pure parsing plus a thread-safe table.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>

#include "agent/core/result.h"

namespace stormwatch {

// uid -> metadata.name; std::less<> so lookups take a string_view without a copy.
using ApfUidNames = std::map<std::string, std::string, std::less<>>;

// Parses one list response body of GET /apis/flowcontrol.apiserver.k8s.io/VERSION/RESOURCE:
// `list_kind` is "PriorityLevelConfigurationList" or "FlowSchemaList" (any served version).
// Items without a name or uid are skipped; a body that is not such a list is an error.
Result<ApfUidNames> ParseApfList(std::string_view json_body, std::string_view list_kind);

// Thread-safe: the capture path looks names up for every request while the fetcher thread
// replaces what the cluster said. Lookups only take a shared lock, never wait for a fetch.
class ApfNames {
 public:
  // UIDs the cluster lists do not name (yet, or at all, when the fetch fails or is not
  // allowed). UIDs are unique across kinds, so one map serves both lookups.
  void SetStatic(std::map<std::string, std::string> uid_to_name);
  // Replaces the cluster's names with freshly listed ones.
  void Update(ApfUidNames priority_levels, ApfUidNames flow_schemas);

  std::optional<std::string> PriorityLevel(std::string_view uid) const;
  std::optional<std::string> FlowSchema(std::string_view uid) const;

 private:
  std::optional<std::string> Lookup(const ApfUidNames& fetched, std::string_view uid) const;

  mutable std::shared_mutex mu_;
  ApfUidNames priority_levels_;
  ApfUidNames flow_schemas_;
  ApfUidNames static_names_;
};

}  // namespace stormwatch
