#include "agent/kube/metric_labels.h"

#include <array>

#include "agent/kube/request_info.h"

namespace stormwatch {
namespace {

constexpr bool EqualsUpper(std::string_view s, std::string_view upper) {
  if (s.size() != upper.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    // ASCII only, as std::toupper in the C locale, without a call per character.
    const char c = s[i] >= 'a' && s[i] <= 'z' ? static_cast<char>(s[i] - 'a' + 'A') : s[i];
    if (c != upper[i]) return false;
  }
  return true;
}

// validRequestMethods in metrics.go; anything else is reported as "other".
constexpr std::array<std::string_view, 14> kValidVerbs = {
    "APPLY", "CONNECT", "CREATE", "DELETE", "DELETECOLLECTION", "GET",   "LIST",
    "PATCH", "POST",    "PROXY",  "PUT",    "UPDATE",           "WATCH", "WATCHLIST"};

// The verb as a static string (the label's value), matched case-insensitively as metrics.go
// upper-cases. By length first: only the valid verbs of the method's length are compared (this
// runs per request).
constexpr std::string_view ReportedVerb(std::string_view verb) {
  std::string_view candidates[4] = {};
  switch (verb.size()) {
    case 3: candidates[0] = "GET", candidates[1] = "PUT"; break;
    case 4: candidates[0] = "LIST", candidates[1] = "POST"; break;
    case 5: candidates[0] = "PATCH", candidates[1] = "WATCH", candidates[2] = "APPLY",
            candidates[3] = "PROXY"; break;
    case 6: candidates[0] = "DELETE", candidates[1] = "UPDATE", candidates[2] = "CREATE"; break;
    case 7: candidates[0] = "CONNECT"; break;
    case 9: candidates[0] = "WATCHLIST"; break;
    case 16: candidates[0] = "DELETECOLLECTION"; break;
    default: break;
  }
  for (std::string_view v : candidates) {
    if (!v.empty() && EqualsUpper(verb, v)) return v;
  }
  return "other";
}
// Every valid verb, in either case, is found among the candidates of its length.
constexpr bool ReportedVerbFindsEveryValidVerb() {
  for (std::string_view v : kValidVerbs) {
    if (ReportedVerb(v) != v) return false;
    char lower[16] = {};
    for (size_t i = 0; i < v.size(); ++i) lower[i] = static_cast<char>(v[i] - 'A' + 'a');
    if (ReportedVerb(std::string_view(lower, v.size())) != v) return false;
  }
  return ReportedVerb("HEAD") == "other" && ReportedVerb("GOT") == "other" &&
         ReportedVerb("") == "other";
}
static_assert(ReportedVerbFindsEveryValidVerb());

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
  if (info.parts_count >= 2 || EqualsUpper(method, "POST")) return "resource";
  if (!info.namespace_.empty()) return "namespace";
  return "cluster";
}

MetricLabels MetricLabelsFor(const RequestInfo& info, const QueryShape& shape,
                             std::string_view method, std::string_view content_type,
                             std::string_view path_and_query) {
  MetricLabels labels;
  labels.scope = MetricScope(info, method);
  if (info.is_resource_request) {
    labels.group = info.api_group;
    labels.version = info.api_version;
    labels.resource = info.resource;
    labels.subresource = info.subresource;
  }

  // cleanVerb: the installer suggests WATCH/WATCHLIST for the legacy /watch/ routes.
  if (info.verb_via_path_prefix && info.verb_kind == KubeVerb::kWatch) {
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
    // A read's shape has the parameter from its query parsed once; other verbs (a "get"
    // method, say, which RequestInfo does not take for a GET) read it here.
    const bool watch = IsRead(info.verb_kind) ? shape.watch_param : [&] {
      auto param = QueryParam(path_and_query, "watch");
      return param && QueryBool(*param);
    }();
    if (watch) verb = "WATCH";
  }
  if (verb == "WATCHLIST") verb = "WATCH";
  if (verb == "PATCH" && content_type == "application/apply-patch+yaml") verb = "APPLY";
  if (info.is_resource_request && IsConnectSubresource(info.subresource)) verb = "CONNECT";
  labels.verb = verb;
  return labels;
}

namespace {

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// A DNS-1123 label: [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 characters.
bool IsDnsLabel(std::string_view s) {
  if (s.empty() || s.size() > 63 || !IsLowerAlnum(s.front()) || !IsLowerAlnum(s.back())) return false;
  for (char c : s) {
    if (!IsLowerAlnum(c) && c != '-') return false;
  }
  return true;
}

// A DNS-1123 subdomain: dot-separated labels, at most 253 characters.
bool IsDnsSubdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  while (true) {
    const size_t dot = s.find('.');
    if (!IsDnsLabel(s.substr(0, dot))) return false;
    if (dot == std::string_view::npos) return true;
    s.remove_prefix(dot + 1);
  }
}

}  // namespace

bool CouldBeServedResource(const MetricLabels& labels) {
  if (labels.resource.empty()) return true;  // not a resource request: no API labels
  return IsDnsLabel(labels.resource) && (labels.group.empty() || IsDnsSubdomain(labels.group));
}

bool CouldBeServedVersion(const MetricLabels& labels) {
  if (labels.resource.empty()) return true;
  if (!labels.subresource.empty() && !IsDnsLabel(labels.subresource)) return false;
  if (labels.version.empty() || labels.version.size() > 63) return false;
  for (char c : labels.version) {
    if (!IsLowerAlnum(c)) return false;
  }
  return true;
}

bool CouldBeServedApi(const MetricLabels& labels) {
  return CouldBeServedResource(labels) && CouldBeServedVersion(labels);
}

}  // namespace stormwatch
