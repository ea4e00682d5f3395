// RequestInfo from an HTTP method and request target, rule for rule as kube-apiserver's
// k8s.io/apiserver/pkg/endpoints/request/requestinfo.go (RequestInfoFactory with
// APIPrefixes {"api","apis"} and GrouplessAPIPrefixes {"api"}), plus the pieces of Go's
// net/url and apimachinery (query parsing, field and label selector parsing) it relies on.
// Pure functions; malformed input yields a best-effort value, never an exception.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <absl/container/inlined_vector.h>

#include "agent/core/request_record.h"
#include "agent/core/result.h"

namespace stormwatch {

// `path_and_query` is the request target as sent (":path" in HTTP/2), e.g.
// "/api/v1/namespaces/ns/pods?watch=true". An absolute-form target
// ("https://host/api/...") is accepted too. Selectors are filled as with the
// AuthorizeWithSelectors feature gate on (its default from Kubernetes 1.32). `parts`, when
// given, receives upstream's Parts (info.parts_count of them). verb_kind is set with verb.
RequestInfo ParseRequestInfo(std::string_view method, std::string_view path_and_query,
                             std::vector<std::string>* parts = nullptr);

// `verb` (a RequestInfo's) as a KubeVerb; kOther for any other string.
KubeVerb KubeVerbOf(std::string_view verb);
// get, list and watch: the verbs whose query shapes what they cost (QueryShape).
constexpr bool IsRead(KubeVerb v) {
  return v == KubeVerb::kGet || v == KubeVerb::kList || v == KubeVerb::kWatch;
}

// Go's url.PathUnescape / url.QueryUnescape: nullopt on a malformed %-escape.
// `plus_is_space` selects query semantics ('+' decodes to ' ').
std::optional<std::string> PercentDecode(std::string_view s, bool plus_is_space);
// The same into `out` (its buffer reused); false, `out` unspecified, on a malformed escape.
// `s` must not view `out`.
bool PercentDecodeInto(std::string_view s, bool plus_is_space, std::string& out);

// Go's url.ParseQuery: pairs in order, keys and values decoded; pairs that Go drops
// (containing ';', empty, or with a bad escape) are dropped. Inline: a request's query has
// a few parameters, and it is parsed per request.
using QueryParams = absl::InlinedVector<std::pair<std::string, std::string>, 4>;
QueryParams ParseQuery(std::string_view raw_query);
// The raw query of a request target as Go's url.Parse splits it (after the first '?', before a
// '#'; an absolute-form target's scheme and authority skipped).
std::string_view RawQuery(std::string_view path_and_query);

// ParseRequestInfo into `info`, every field set, its strings' buffers reused: parsing request
// after request into one RequestInfo allocates nothing once they have grown (the pipeline's
// way). `query`, when given, receives the target's query parsed when the verb is a read (get,
// list, watch: what QueryShapeOf reads) and is emptied otherwise, so the query is parsed once
// for both.
void ParseRequestInfoInto(std::string_view method, std::string_view path_and_query,
                          RequestInfo& info, std::vector<std::string>* parts = nullptr,
                          QueryParams* query = nullptr);

// First value of query parameter `key` in a request target, URL-decoded; nullopt if absent
// (so "?resourceVersion=" gives "" and no parameter gives nullopt).
std::optional<std::string> QueryParam(std::string_view path_and_query, std::string_view key);

// apimachinery's Convert_Slice_string_To_bool for one value: only "0" and (any case)
// "false" are false; everything else, "" included, is true.
bool QueryBool(std::string_view value);

// One term of a field selector (k8s.io/apimachinery/pkg/fields), value unescaped.
struct FieldSelectorTerm {
  std::string field;
  std::string op;  // "=", "==" or "!="
  std::string value;
};

// fields.ParseSelector: terms sorted as upstream sorts them; error on a term without
// an operator or a bad escape in a value.
Result<std::vector<FieldSelectorTerm>> ParseFieldSelector(std::string_view selector);

// fields.Selector.RequiresExactMatch: the value of the first "=" / "==" term on `field`.
std::optional<std::string> RequiresExactMatch(const std::vector<FieldSelectorTerm>& terms,
                                              std::string_view field);

// labels.Parse, as a validator: the number of requirements, or the parse error.
Result<size_t> ValidateLabelSelector(std::string_view selector);

}  // namespace stormwatch
