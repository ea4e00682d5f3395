// The label values kube-apiserver puts on apiserver_request_total for a request, so that
// stormwatch's per-client series line up with the server's own (no per-client label there).
//
// Derived from k8s.io/apiserver/pkg/endpoints/metrics/metrics.go (MonitorRequest, cleanVerb,
// CleanVerb, CanonicalVerb, getVerbIfWatch, CleanScope) and the scope that
// endpoints/installer.go hands to InstrumentRouteFunc, current as of Kubernetes 1.30+:
//
//   verb   CanonicalVerb(HTTP method, scope): GET/HEAD -> "LIST" unless scope is "resource"
//          (or ""), else "GET"; every other method is reported as itself: POST, PUT, PATCH,
//          DELETE. So updates are "PUT", creates "POST", and a collection delete is "DELETE"
//          (the installer's "DELETECOLLECTION"/"UPDATE"/"CREATE" never reach this label).
//          Then: legacy /watch/ path -> "WATCH"; GET with ?watch= true-ish -> "WATCH";
//          PATCH with Content-Type application/apply-patch+yaml -> "APPLY"; a resource request
//          whose subresource is log, exec, portforward, attach or proxy -> "CONNECT" (this wins
//          over WATCH/APPLY); anything outside the known set (e.g. OPTIONS) -> "other".
//          "WATCHLIST" is normalised to "WATCH" upstream, so it never appears.
//   scope  the installer's route scope: "resource" when the path names an object (or the
//          method is POST), else "namespace" under /namespaces/{ns}/, else "cluster";
//          "" for non-resource requests. A name taken from fieldSelector=metadata.name= does
//          not make a LIST "resource" scoped (the route has no {name}).
//   Non-resource requests (e.g. /healthz, /apis): verb is the upper-cased method through the
//   same rules (GET and HEAD -> "GET"), group/version/resource/subresource empty, scope "".
//   Upstream records these only on its termination/429 paths, with the path in the
//   subresource label on one of them; we keep it empty to bound cardinality.
//   The legacy /proxy/ prefix has no route in current servers (404, not instrumented); we
//   report it by the same method rules.
#pragma once

#include <string>
#include <string_view>

#include "agent/core/request_record.h"

namespace stormwatch {

// Views: verb and scope of static strings, the rest of the RequestInfo's (valid while it is):
// no copy per request.
struct MetricLabels {
  std::string_view verb;
  std::string_view group;
  std::string_view version;
  std::string_view resource;
  std::string_view subresource;
  std::string_view scope;

  bool operator==(const MetricLabels&) const = default;
};

// `info` must come from ParseRequestInfo(method, path_and_query), `shape` from its query
// (ParseQueryShape / QueryShapeOf).
MetricLabels MetricLabelsFor(const RequestInfo& info, const QueryShape& shape,
                             std::string_view method, std::string_view content_type,
                             std::string_view path_and_query);

// The route scope described above.
std::string_view MetricScope(const RequestInfo& info, std::string_view method);

// Whether group, version, resource and subresource could name a served API at all: resources
// and subresources are lower-case DNS labels, groups DNS subdomains, versions lower-case
// alphanumerics (k8s.io/apimachinery validation, as CRD names are checked). Anything else came
// from a path no route serves, may not even be UTF-8 (which Prometheus refuses in a label value,
// failing the whole scrape), and is reported as resource "other".
bool CouldBeServedApi(const MetricLabels& labels);
// Its two halves: the group and resource (the same for every request of the pair: asked once
// per pair where pairs are remembered) and the version and subresource.
bool CouldBeServedResource(const MetricLabels& labels);
bool CouldBeServedVersion(const MetricLabels& labels);

}  // namespace stormwatch
