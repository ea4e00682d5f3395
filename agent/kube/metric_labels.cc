#include "agent/kube/metric_labels.h"

#include <array>
#include <cctype>

#include "agent/kube/request_info.h"

namespace stormwatch {
namespace {

bool EqualsUpper(std::string_view s, std::string_view upper) {
  if (s.size() != upper.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (std::toupper(static_cast<unsigned char>(s[i])) != upper[i]) return false;
  }
  return true;
}

// validRequestMethods in metrics.go; anything else is reported as "other". The verb as a
// static string (the label's value), matched case-insensitively as metrics.go upper-cases.
std::string_view ReportedVerb(std::string_view verb) {
  static constexpr std::array<std::string_view, 14> kValid = {
      "APPLY", "CONNECT", "CREATE", "DELETE", "DELETECOLLECTION", "GET",   "LIST",
      "PATCH", "POST",    "PROXY",  "PUT",    "UPDATE",           "WATCH", "WATCHLIST"};
  for (std::string_view v : kValid) {
    if (EqualsUpper(verb, v)) return v;
  }
  return "other";
}

// validConnectRequests in metrics.go.
bool IsConnectSubresource(std::string_view subresource) {
  return subresource == "log" || subresource == "exec" || subresource == "portforward" ||
         subresource == "attach" || subresource == "proxy";
}

}  // namespace

std::string_view MetricScope(const RequestInfo& info, std::string_view method) {
  if (!info.is_resource_request) return "";
  // The installer's route scope: a route with {name} (or {path:*}), or a POST, is
  // "resource"; a name from a field selector is not in the route.
  if (info.parts.size() >= 2 || EqualsUpper(method, "POST")) return "resource";
  if (!info.namespace_.empty()) return "namespace";
  return "cluster";
}

MetricLabels MetricLabelsFor(const RequestInfo& info, std::string_view method,
                             std::string_view content_type, std::string_view path_and_query) {
  MetricLabels labels;
  labels.scope = MetricScope(info, method);
  if (info.is_resource_request) {
    labels.group = info.api_group;
    labels.version = info.api_version;
    labels.resource = info.resource;
    labels.subresource = info.subresource;
  }

  // cleanVerb: the installer suggests WATCH/WATCHLIST for the legacy /watch/ routes.
  if (info.verb_via_path_prefix && info.verb == "watch") {
    labels.verb = "WATCH";
    return labels;
  }
  // CanonicalVerb: GET/HEAD split into GET and LIST by scope; other methods as they are.
  const bool get = EqualsUpper(method, "GET");
  std::string_view verb = ReportedVerb(method);
  if (get || EqualsUpper(method, "HEAD")) {
    verb = (labels.scope != "resource" && !labels.scope.empty()) ? "LIST" : "GET";
  }
  // CleanVerb: getVerbIfWatch (the method upper-cased is GET or LIST).
  if (get || EqualsUpper(method, "LIST")) {
    if (auto watch = QueryParam(path_and_query, "watch"); watch && QueryBool(*watch)) {
      verb = "WATCH";
    }
  }
  if (verb == "WATCHLIST") verb = "WATCH";
  if (verb == "PATCH" && content_type == "application/apply-patch+yaml") verb = "APPLY";
  if (info.is_resource_request && IsConnectSubresource(info.subresource)) verb = "CONNECT";
  labels.verb = verb;
  return labels;
}

}  // namespace stormwatch
