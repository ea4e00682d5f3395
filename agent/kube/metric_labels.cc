#include "agent/kube/metric_labels.h"

#include <array>
#include <cctype>

#include "agent/kube/request_info.h"

namespace stormwatch {
namespace {

std::string ToUpper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// validRequestMethods in metrics.go; anything else is reported as "other".
bool IsValidReportedVerb(std::string_view verb) {
  static constexpr std::array<std::string_view, 14> kValid = {
      "APPLY", "CONNECT", "CREATE", "DELETE", "DELETECOLLECTION", "GET",   "LIST",
      "PATCH", "POST",    "PROXY",  "PUT",    "UPDATE",           "WATCH", "WATCHLIST"};
  for (std::string_view v : kValid) {
    if (v == verb) return true;
  }
  return false;
}

// validConnectRequests in metrics.go.
bool IsConnectSubresource(std::string_view subresource) {
  return subresource == "log" || subresource == "exec" || subresource == "portforward" ||
         subresource == "attach" || subresource == "proxy";
}

}  // namespace

std::string MetricScope(const RequestInfo& info, std::string_view method) {
  if (!info.is_resource_request) return "";
  // The installer's route scope: a route with {name} (or {path:*}), or a POST, is
  // "resource"; a name from a field selector is not in the route.
  if (info.parts.size() >= 2 || ToUpper(method) == "POST") return "resource";
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

  // CanonicalVerb: GET/HEAD split into GET and LIST by scope; other methods as they are.
  std::string upper_method = ToUpper(method);
  std::string verb = upper_method;
  if (verb == "GET" || verb == "HEAD") {
    verb = (labels.scope != "resource" && !labels.scope.empty()) ? "LIST" : "GET";
  }

  // cleanVerb: the installer suggests WATCH/WATCHLIST for the legacy /watch/ routes.
  if (info.verb_via_path_prefix && info.verb == "watch") {
    labels.verb = "WATCH";
    return labels;
  }
  // CleanVerb.
  if (upper_method == "GET" || upper_method == "LIST") {  // getVerbIfWatch
    if (auto watch = QueryParam(path_and_query, "watch"); watch && QueryBool(*watch)) {
      verb = "WATCH";
    }
  }
  if (verb == "WATCHLIST") verb = "WATCH";
  if (verb == "PATCH" && content_type == "application/apply-patch+yaml") verb = "APPLY";
  if (info.is_resource_request && IsConnectSubresource(info.subresource)) verb = "CONNECT";
  labels.verb = IsValidReportedVerb(verb) ? verb : "other";
  return labels;
}

}  // namespace stormwatch
