#include "agent/kube/query_shape.h"

#include <charconv>

#include "agent/kube/request_info.h"

namespace stormwatch {
namespace {

int64_t ToInt(const std::string* v) {
  if (!v) return 0;
  int64_t n = 0;
  std::from_chars(v->data(), v->data() + v->size(), n);
  return n;
}

}  // namespace

QueryShape ParseQueryShape(const RequestInfo& info, std::string_view path_and_query) {
  return QueryShapeOf(info, ParseQuery(RawQuery(path_and_query)));
}

QueryShape QueryShapeOf(const RequestInfo& info, const QueryParams& params) {
  QueryShape s;
  if (!IsRead(info.verb_kind)) return s;
  // First value per key.
  auto param = [&](std::string_view key) -> const std::string* {
    for (const auto& [k, v] : params) {
      if (k == key) return &v;
    }
    return nullptr;
  };
  const std::string* rv = param("resourceVersion");
  const std::string* match = param("resourceVersionMatch");
  const std::string* cont = param("continue");
  s.continued = cont && !cont->empty();
  s.limit = ToInt(param("limit"));
  s.paginated = s.limit > 0;
  s.label_selector = !info.label_selector.empty();
  s.field_selector = !info.field_selector.empty();
  if (const std::string* sie = param("sendInitialEvents")) s.send_initial_events = QueryBool(*sie);
  s.timeout_seconds = ToInt(param("timeoutSeconds"));
  if (const std::string* watch = param("watch")) s.watch_param = QueryBool(*watch);

  using C = QueryShape::Consistency;
  if (s.continued) {
    s.consistency = C::kExact;  // the page is read at the token's resourceVersion
  } else if (!rv || rv->empty()) {
    s.consistency = C::kConsistent;
  } else if (*rv == "0") {
    s.consistency = C::kAny;
  } else if (match && *match == "Exact") {
    s.consistency = C::kExact;
  } else {
    // NotOlderThan, or a plain RV: a GET/LIST at least that new, a WATCH from that point.
    s.consistency = C::kNotOlderThan;
  }
  return s;
}

const char* ConsistencyName(QueryShape::Consistency c) {
  switch (c) {
    case QueryShape::Consistency::kConsistent: return "consistent";
    case QueryShape::Consistency::kAny: return "any";
    case QueryShape::Consistency::kExact: return "exact";
    case QueryShape::Consistency::kNotOlderThan: return "not_older_than";
    default: return "";
  }
}

bool IsConsistentUnpaginatedClusterList(const RequestRecord& r) {
  return r.info.verb_kind == KubeVerb::kList && r.info.namespace_.empty() && !r.shape.paginated &&
         r.shape.consistency == QueryShape::Consistency::kConsistent;
}

}  // namespace stormwatch
