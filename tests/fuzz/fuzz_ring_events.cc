// Ring-buffer records (bpf/events.h) through the agent's own ring callback,
// RequestPipeline::OnEvent: HTTP/2 request and response events (agent/protocol/h2_events,
// request_assembler), TLS data and close events (tls_events, http1_stream), etcd gRPC calls
// (grpc_calls), and everything the pipeline does with a joined request (request_info,
// identity, object facts, detectors). Input: records of [u16 length][bytes].
#include "agent/metered_pipeline.h"
#include "agent/pipeline/request_pipeline.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/unit/etcd_message_types.h"

using namespace stormwatch;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static PrometheusExporter* exporter = new PrometheusExporter();  // metric families: once
  static auto types = testing_etcd::MessageTypes();
  fuzz::Input in(data, size);
  MeteredPipeline pipeline(exporter, DetectorsConfig{}, [](const StormTransition&) {});
  pipeline.SetTargetRole(43, TargetRole::kEtcd);
  pipeline.SetEtcdMessageTypes(43, types);
  while (!in.empty()) {
    std::string_view record = in.Piece();
    pipeline.OnEvent({reinterpret_cast<const uint8_t*>(record.data()), record.size()});
  }
  pipeline.Tick(int64_t{3600} * 1000000000);
  return 0;
}
