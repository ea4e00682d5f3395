// The shape of a read, from its query string: the facts that decide what it costs
// kube-apiserver and etcd (STORMS.md section 2). Pure.
//
// resourceVersion semantics (k8s.io/apimachinery ListOptions, API concepts "Resource versions"):
//   ""            consistent read: a quorum read from etcd (before ConsistentListFromCache)
//   "0"           any: served from the watch cache, possibly stale
//   "N", Exact    exactly N (etcd, or the cache if it still has it)
//   "N", NotOlderThan or no match on a LIST: at least N, from the cache
// A LIST with a continue token is a later page: it reads at the token's resourceVersion.
#pragma once

#include <string_view>

#include "agent/core/request_record.h"
#include "agent/kube/request_info.h"

namespace stormwatch {

QueryShape ParseQueryShape(const RequestInfo& info, std::string_view path_and_query);
// The same from the query as ParseRequestInfoInto gave it (parsed once per request).
QueryShape QueryShapeOf(const RequestInfo& info, const QueryParams& query);

// Label values: "consistent", "any", "exact", "not_older_than", "" (not a read).
const char* ConsistencyName(QueryShape::Consistency c);

// The expensive LIST of STORMS.md section 2: consistent, unpaginated, cluster scope.
bool IsConsistentUnpaginatedClusterList(const RequestRecord& r);

}  // namespace stormwatch
