// A request's method and target (agent/kube/request_info, query_shape): the kube verb, resource
// and names, query parameters, field and label selectors, the LIST's consistency and pagination.
// Input: method "\n--\n" path and query.
#include <cstdlib>

#include "agent/kube/query_shape.h"
#include "agent/kube/request_info.h"
#include "tests/fuzz/fuzz_common.h"

using namespace stormwatch;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  std::string_view method = in.Field();
  std::string_view target = in.Rest();
  RequestInfo info = ParseRequestInfo(method, target);
  QueryShape shape = ParseQueryShape(info, target);
  (void)ConsistencyName(shape.consistency);
  // The pipeline's way: one RequestInfo and one query reused from input to input, the shape
  // taken from the query parsed with the RequestInfo. Both must equal a fresh parse.
  static RequestInfo reused;
  static QueryParams reused_query;
  ParseRequestInfoInto(method, target, reused, /*parts=*/nullptr, &reused_query);
  if (!(reused == info) || !(QueryShapeOf(reused, reused_query) == shape)) abort();
  // The verb's number, set rule by rule, names the verb's string.
  if (info.verb_kind != KubeVerbOf(info.verb)) abort();
  RequestRecord r;
  r.method = std::string(method);
  r.path = std::string(target);
  r.info = info;
  r.shape = shape;
  (void)IsConsistentUnpaginatedClusterList(r);
  auto query = ParseQuery(target);
  for (const auto& [key, value] : query) {
    if (key == "fieldSelector") {
      if (auto terms = ParseFieldSelector(value)) (void)RequiresExactMatch(*terms, "metadata.name");
    } else if (key == "labelSelector") {
      (void)ValidateLabelSelector(value);
    } else {
      (void)QueryBool(value);
    }
  }
  (void)PercentDecode(target, true);
  (void)QueryParam(target, "watch");
  (void)ParseFieldSelector(target);
  (void)ValidateLabelSelector(target);
  return 0;
}
