// The metrics sink (exporters/request_metrics.h): what it counts per request, read back from
// the exporter's scrape.
#include "exporters/request_metrics.h"

#include <gtest/gtest.h>

#include <string>

#include "agent/kube/request_info.h"

namespace stormwatch {
namespace {

RequestRecord WriteRecord(std::optional<BodyFacts> body) {
  RequestRecord r;
  r.method = "PUT";
  r.path = "/api/v1/namespaces/a/configmaps/c";
  r.info = ParseRequestInfo("PUT", r.path);
  r.status = 200;
  r.start_ns = 1'000;
  r.end_ns = 2'000;
  r.body_read = body;
  return r;
}

// Bodies read are counted per encoding and result, each pair its own series, exactly; a
// replayed record whose encoding or result is out of range (a capture file is input) is
// counted under the names such values have ("other", "unreadable"), not a crash.
TEST(RequestMetrics, CountsResponseBodiesPerEncodingAndResult) {
  PrometheusExporter exporter;
  RequestMetrics metrics(&exporter, nullptr);
  for (int i = 0; i < 3; ++i) {
    metrics.OnRequest(WriteRecord(BodyFacts{BodyEncoding::kJson, BodyFactsResult::kObject}));
  }
  metrics.OnRequest(WriteRecord(BodyFacts{BodyEncoding::kProtobuf, BodyFactsResult::kPartial}));
  metrics.OnRequest(WriteRecord(BodyFacts{BodyEncoding::kJson, BodyFactsResult::kNotObject}));
  metrics.OnRequest(WriteRecord(std::nullopt));  // no body read: nothing counted
  metrics.OnRequest(WriteRecord(
      BodyFacts{static_cast<BodyEncoding>(7), static_cast<BodyFactsResult>(9)}));
  metrics.OnRequest(WriteRecord(BodyFacts{BodyEncoding::kOther, BodyFactsResult::kUnreadable}));
  const std::string text = exporter.Scrape();
  auto count = [&](const std::string& labels) {
    const std::string series = "stormwatch_response_bodies_total{" + labels + "} ";
    const size_t at = text.find(series);
    return at == std::string::npos ? std::string("absent")
                                   : text.substr(at + series.size(), text.find('\n', at) - at - series.size());
  };
  EXPECT_EQ(count(R"(encoding="json",result="object")"), "3") << text;
  EXPECT_EQ(count(R"(encoding="protobuf",result="partial")"), "1");
  EXPECT_EQ(count(R"(encoding="other",result="unreadable")"), "2");
  EXPECT_EQ(count(R"(encoding="json",result="not_object")"), "1");
  EXPECT_EQ(count(R"(encoding="json",result="partial")"), "absent");
  EXPECT_NE(text.find(R"(stormwatch_requests_total{client="unknown",code="200",group="",resource="configmaps",scope="resource",subresource="",verb="PUT",version="v1"} 8)"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace stormwatch
