// Ring-buffer records (bpf/events.h) through the agent's own ring callback,
// RequestPipeline::OnEvent: HTTP/2 request and response events (agent/protocol/h2_events,
// request_assembler), TLS data and close events (tls_events, http1_stream), etcd gRPC calls
// (grpc_calls), and everything the pipeline does with a joined request (request_info,
// identity, object facts, detectors). Input: records of [u16 length][bytes].
#include "agent/metered_pipeline.h"
#include "agent/pipeline/request_pipeline.h"
#include "tests/fuzz/fuzz_common.h"

using namespace stormwatch;

namespace {

// etcd 3.5's message types as tests/unit/grpc_calls_test.cc has them.
std::shared_ptr<EtcdMessageTypes> Types() {
  auto t = std::make_shared<EtcdMessageTypes>();
  t->by_type = {{0x1000, EtcdMessage::kRangeRequest}, {0x2000, EtcdMessage::kRangeResponse},
                {0x3000, EtcdMessage::kTxnRequest}, {0x4000, EtcdMessage::kTxnResponse}};
  t->fields.range_limit = 48;
  t->fields.range_revision = 56;
  t->fields.range_serializable = 72;
  t->fields.range_keys_only = 73;
  t->fields.range_count_only = 74;
  t->fields.range_resp_kvs = 8;
  t->fields.range_resp_more = 32;
  t->fields.range_resp_count = 40;
  t->fields.txn_resp_succeeded = 8;
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static PrometheusExporter* exporter = new PrometheusExporter();  // metric families: once
  static auto types = Types();
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
