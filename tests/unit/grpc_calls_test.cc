// etcd's gRPC calls from synthetic interceptor events (the layout of bpf/events.h): decoding
// refuses lengths past their fields, entry and return join per goroutine, the message structs are
// read through the target's message types, and the pipeline counts them by method, resource,
// client and code, with Range keys and bytes, and never a key in a label.
#include "agent/protocol/grpc_calls.h"

#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <cstddef>
#include <cstring>
#include <vector>

#include "agent/metered_pipeline.h"
#include "agent/pipeline/request_pipeline.h"
#include "bpf/events.h"
#include "tests/unit/etcd_message_types.h"

namespace stormwatch {
namespace {

using testing_etcd::kRangeRespType;
using testing_etcd::kRangeType;
using testing_etcd::kTxnRespType;
using testing_etcd::kTxnType;

std::shared_ptr<EtcdMessageTypes> Types() { return testing_etcd::MessageTypes(); }

std::vector<uint8_t> Call(uint64_t g, uint64_t ts, const std::string& method, uint64_t type,
                          const std::string& key, const std::string& end, int64_t limit = 0,
                          uint64_t cert = 0) {
  sw_grpc_call e{};
  e.hdr.type = SW_EV_GRPC_CALL;
  e.hdr.tgid = 42;
  e.hdr.ts_ns = ts;
  e.hdr.conn = g;
  e.kind = SW_GRPC_UNARY;
  e.method_len = method.size();
  std::memcpy(e.method, method.data(), method.size());
  e.msg_type = type;
  e.msg_len = 112;
  std::memcpy(e.msg + 48, &limit, 8);
  e.key_len = std::min<size_t>(key.size(), SW_ETCD_KEY_MAX);
  e.key_total = key.size();
  std::memcpy(e.key, key.data(), e.key_len);
  e.end_len = end.size();
  e.end_total = end.size();
  std::memcpy(e.end, end.data(), end.size());
  e.peer.ip_len = 4;
  e.peer.ip[0] = 127;
  e.peer.ip[3] = 1;
  e.peer.port = 40000;
  e.client_cert_der = cert;
  e.client_cert_der_len = cert ? 900 : 0;
  std::vector<uint8_t> out(sizeof(e));
  std::memcpy(out.data(), &e, sizeof(e));
  return out;
}

std::vector<uint8_t> Done(uint64_t g, uint64_t ts, int code, uint64_t type, int64_t kvs = 0,
                          int64_t count = 0, bool more = false, uint32_t read = 0, uint64_t bytes = 0) {
  sw_grpc_done e{};
  e.hdr.type = SW_EV_GRPC_DONE;
  e.hdr.tgid = 42;
  e.hdr.ts_ns = ts;
  e.hdr.conn = g;
  e.kind = SW_GRPC_UNARY;
  e.code = code;
  e.msg_type = type;
  e.msg_len = 48;
  std::memcpy(e.msg + 16, &kvs, 8);  // Kvs.len
  e.msg[32] = more;
  std::memcpy(e.msg + 40, &count, 8);
  e.kvs_read = read;
  e.kv_bytes = bytes;
  std::vector<uint8_t> out(sizeof(e));
  std::memcpy(out.data(), &e, sizeof(e));
  return out;
}

TEST(GrpcEvents, LengthsPastTheirFieldsAreErrors) {
  auto call = Call(1, 10, "/etcdserverpb.KV/Range", kRangeType, "/registry/pods/", "/registry/pods0");
  EXPECT_TRUE(DecodeGrpcEvent(call).ok());
  auto shorter = call;
  shorter.pop_back();
  EXPECT_FALSE(DecodeGrpcEvent(shorter).ok());
  auto bad = call;
  reinterpret_cast<sw_grpc_call*>(bad.data())->key_len = SW_ETCD_KEY_MAX + 1;
  EXPECT_FALSE(DecodeGrpcEvent(bad).ok());
  bad = call;
  reinterpret_cast<sw_grpc_call*>(bad.data())->method_len = 200;
  EXPECT_FALSE(DecodeGrpcEvent(bad).ok());
  bad = call;
  reinterpret_cast<sw_grpc_call*>(bad.data())->key_total = 3;  // fewer than kept
  EXPECT_FALSE(DecodeGrpcEvent(bad).ok());
  auto done = Done(1, 20, 0, kRangeRespType);
  reinterpret_cast<sw_grpc_done*>(done.data())->msg_len = SW_GRPC_RESP_MAX + 1;
  EXPECT_FALSE(DecodeGrpcEvent(done).ok());
  EXPECT_FALSE(DecodeGrpcEvent(std::vector<uint8_t>{5, 0, 0}).ok());
}

TEST(GrpcCallsJoin, PerGoroutineBoundedAndCounted) {
  std::vector<EtcdRequest> out;
  GrpcCalls calls([&](EtcdRequest& r) { out.push_back(r); }, /*max_pending=*/2);
  calls.SetMessageTypes(42, Types());
  auto decode = [](const std::vector<uint8_t>& b) { return *DecodeGrpcEvent(b); };
  auto call = [&](const std::vector<uint8_t>& b) { calls.OnCall(std::get<GrpcCallEvent>(decode(b))); };
  auto done = [&](const std::vector<uint8_t>& b) { calls.OnDone(std::get<GrpcDoneEvent>(decode(b))); };
  // Two goroutines interleaved, each joined to its own return.
  call(Call(1, 100, "/etcdserverpb.KV/Range", kRangeType, "/registry/pods/", "/registry/pods0", 500));
  call(Call(2, 110, "/etcdserverpb.KV/Txn", kTxnType, "/registry/configmaps/a/b", ""));
  done(Done(2, 150, 0, kTxnRespType));
  done(Done(1, 400, 0, kRangeRespType, 500, 1200, true, 500, 500 * 300));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].method, "/etcdserverpb.KV/Txn");
  EXPECT_EQ(out[0].request, EtcdMessage::kTxnRequest);
  EXPECT_EQ(out[1].method, "/etcdserverpb.KV/Range");
  EXPECT_EQ(out[1].limit, 500);
  EXPECT_EQ(out[1].kvs, 500);
  EXPECT_EQ(out[1].count, 1200);
  EXPECT_TRUE(out[1].more);
  EXPECT_EQ(out[1].kv_bytes, 150000u);
  EXPECT_EQ(out[1].start_ns, 100u);
  EXPECT_EQ(out[1].end_ns, 400u);
  EXPECT_EQ(out[1].peer_address, "127.0.0.1:40000");
  // Beyond the kvs summed in BPF, the rest at their average size.
  call(Call(3, 500, "/etcdserverpb.KV/Range", kRangeType, "/registry/pods/", "/registry/pods0"));
  done(Done(3, 600, 0, kRangeRespType, 10000, 10000, false, SW_MAX_KVS_READ, SW_MAX_KVS_READ * 100ull));
  EXPECT_EQ(out.back().kv_bytes, 1000000u);
  // A return without its entry, and more pending calls than allowed: counted, bounded.
  done(Done(9, 700, 0, kRangeRespType));
  call(Call(4, 800, "/etcdserverpb.KV/Range", kRangeType, "/registry/a/", ""));
  call(Call(5, 810, "/etcdserverpb.KV/Range", kRangeType, "/registry/b/", ""));
  call(Call(6, 820, "/etcdserverpb.KV/Range", kRangeType, "/registry/c/", ""));
  EXPECT_EQ(calls.pending(), 2u);
  EXPECT_EQ(calls.stats().returns_without_call, 1u);
  EXPECT_EQ(calls.stats().calls_evicted, 1u);
  done(Done(4, 900, 0, kRangeRespType));  // evicted: its return has no call any more
  EXPECT_EQ(calls.stats().returns_without_call, 2u);
  calls.ForgetProcess(42);  // its process exited: the calls still pending are lost, and counted
  EXPECT_EQ(calls.pending(), 0u);
  EXPECT_EQ(calls.stats().calls_evicted, 3u);
}

// The certificate at 0xcafe is the API server's etcd client certificate.
std::optional<Identity> ApiserverCertIdentity(const RequestConnection& c) {
  if (c.client_cert_der != 0xcafe) return std::nullopt;
  Identity id;
  id.kind = Identity::Kind::kUser;
  id.user = "kube-apiserver-etcd-client";
  return id;
}

std::string Metrics(PrometheusExporter& e) {
  return prometheus::TextSerializer().Serialize(e.Collect());
}

TEST(PipelineEtcd, CountsByMethodResourceClientAndCode) {
  PrometheusExporter exporter;
  MeteredPipeline pipeline(&exporter, DetectorsConfig{}, [](const StormTransition&) {},
                           AssemblerLimits{}, ConnectionLookups{.identity = ApiserverCertIdentity});
  pipeline.SetTargetRole(42, TargetRole::kEtcd);
  pipeline.SetEtcdMessageTypes(42, Types());
  pipeline.OnEvent(Call(1, 100, "/etcdserverpb.KV/Range", kRangeType, "/registry/pods/", "/registry/pods0", 0, 0xcafe));
  pipeline.OnEvent(Done(1, 2'000'100, 0, kRangeRespType, 3, 3, false, 3, 3000));
  pipeline.OnEvent(Call(1, 3'000'000, "/etcdserverpb.KV/Txn", kTxnType, "/registry/example.com/widgets/ns/w", "", 0, 0xcafe));
  pipeline.OnEvent(Done(1, 4'000'000, 9, kTxnRespType));  // FailedPrecondition
  pipeline.OnEvent(Call(7, 5'000'000, "/etcdserverpb.KV/Range", kRangeType, "/registry/secrets/kube-system/token", ""));
  pipeline.OnEvent(Done(7, 6'000'000, -1, 0));
  std::string m = Metrics(exporter);
  EXPECT_NE(m.find(R"(stormwatch_etcd_requests_total{client="kube-apiserver-etcd-client",code="OK",method="/etcdserverpb.KV/Range",resource="pods"} 1)"), std::string::npos) << m;
  EXPECT_NE(m.find(R"(stormwatch_etcd_requests_total{client="kube-apiserver-etcd-client",code="FailedPrecondition",method="/etcdserverpb.KV/Txn",resource="widgets.example.com"} 1)"), std::string::npos) << m;
  EXPECT_NE(m.find(R"(stormwatch_etcd_requests_total{client="unknown",code="Unknown",method="/etcdserverpb.KV/Range",resource="secrets"} 1)"), std::string::npos) << m;
  EXPECT_NE(m.find(R"(stormwatch_etcd_range_keys_total{client="kube-apiserver-etcd-client",resource="pods"} 3)"), std::string::npos) << m;
  EXPECT_NE(m.find(R"(stormwatch_etcd_range_bytes_total{client="kube-apiserver-etcd-client",resource="pods"} 3000)"), std::string::npos) << m;
  EXPECT_NE(m.find(R"(stormwatch_etcd_request_duration_seconds_count{method="/etcdserverpb.KV/Range",resource="pods"} 1)"), std::string::npos) << m;
  // Keys name objects: none of them is in a label.
  EXPECT_EQ(m.find("kube-system"), std::string::npos);
  EXPECT_EQ(m.find("token"), std::string::npos);
  EXPECT_EQ(m.find("stormwatch_requests_total{"), std::string::npos);
  EXPECT_EQ(pipeline.stats().etcd_calls, 3u);
}

// A record stamped past 2^62 ns since boot is corrupt: refused and counted before any detector
// turns its time into signed windows (the fuzzer's ring events overflowed one at 2^63 - 4000).
TEST(PipelineEtcd, RecordsWithImplausibleTimesAreRefusedAndCounted) {
  PrometheusExporter exporter;
  MeteredPipeline pipeline(&exporter, DetectorsConfig{}, [](const StormTransition&) {});
  pipeline.SetEtcdMessageTypes(42, Types());
  const uint64_t corrupt = ~uint64_t{0} - 3999;  // -4000 as a signed time
  pipeline.OnEvent(Call(1, corrupt, "/etcdserverpb.KV/Range", kRangeType, "/registry/pods/", ""));
  pipeline.OnEvent(Done(1, corrupt + 10, 0, kRangeRespType));
  pipeline.OnEvent(Call(2, kLatestPlausibleEventNs + 1, "/etcdserverpb.KV/Range", kRangeType, "/registry/pods/", ""));
  EXPECT_EQ(pipeline.stats().decode_errors, 3u);
  EXPECT_EQ(pipeline.stats().etcd_calls, 0u);
  // The last plausible time still counts.
  pipeline.OnEvent(Call(3, kLatestPlausibleEventNs - 10, "/etcdserverpb.KV/Range", kRangeType, "/registry/pods/", ""));
  pipeline.OnEvent(Done(3, kLatestPlausibleEventNs, 0, kRangeRespType));
  pipeline.Tick(static_cast<int64_t>(kLatestPlausibleEventNs));
  EXPECT_EQ(pipeline.stats().decode_errors, 3u);
  EXPECT_EQ(pipeline.stats().etcd_calls, 1u);
}

TEST(PipelineEtcd, ResourceLabelsAreBounded) {
  PrometheusExporter exporter;
  MeteredPipeline pipeline(&exporter, DetectorsConfig{}, [](const StormTransition&) {});
  pipeline.SetEtcdMessageTypes(42, Types());
  for (int i = 0; i < 600; ++i) {
    pipeline.OnEvent(Call(1, i * 10, "/etcdserverpb.KV/Range", kRangeType, "/registry/junk" + std::to_string(i) + "/x", ""));
    pipeline.OnEvent(Done(1, i * 10 + 5, 0, kRangeRespType));
  }
  std::string m = Metrics(exporter);
  EXPECT_NE(m.find(R"(resource="junk511"})"), std::string::npos);
  EXPECT_EQ(m.find(R"(resource="junk512"})"), std::string::npos);
  EXPECT_NE(m.find(R"(stormwatch_etcd_requests_total{client="unknown",code="OK",method="/etcdserverpb.KV/Range",resource="other"} 88)"), std::string::npos) << m;
}

// One message of an open stream (no return follows), as the watch and lease programs send it.
std::vector<uint8_t> StreamMessage(uint8_t kind, uint64_t ts, const std::string& key, const std::string& end,
                                   int64_t id, int64_t rev, uint64_t cert = 0) {
  std::vector<uint8_t> out = Call(9, ts, "", 0, key, end, 0, cert);
  sw_grpc_call e;
  std::memcpy(&e, out.data(), sizeof(e));
  e.kind = kind;
  e.msg_len = 0;
  e.stream = 0xc000123000;
  e.id = id;
  e.rev = rev;
  std::memcpy(out.data(), &e, sizeof(e));
  return out;
}

TEST(PipelineEtcd, StreamMessagesAreCountedAsTheyCome) {
  PrometheusExporter exporter;
  MeteredPipeline pipeline(&exporter, DetectorsConfig{}, [](const StormTransition&) {},
                           AssemblerLimits{}, ConnectionLookups{.identity = ApiserverCertIdentity});
  pipeline.SetTargetRole(42, TargetRole::kEtcd);
  pipeline.SetEtcdMessageTypes(42, Types());
  for (int i = 0; i < 3; ++i) {
    pipeline.OnEvent(StreamMessage(SW_GRPC_WATCH_CREATE, 100 + i, "/registry/configmaps/", "/registry/configmaps0", 0, 812));
  }
  pipeline.OnEvent(StreamMessage(SW_GRPC_WATCH_CREATE, 200, "/registry/example.com/widgets/ns/w", "", 0, 0));
  pipeline.OnEvent(StreamMessage(SW_GRPC_WATCH_CANCEL, 300, "", "", 5, 0));
  // A Watch stream opened by the API server (goroutine 5), whose handler made watch stream
  // 0xc000123000: the watch messages on it from then on are the API server's.
  std::vector<uint8_t> open = Call(5, 310, "/etcdserverpb.Watch/Watch", 0, "", "", 0, 0xcafe);
  open[offsetof(sw_grpc_call, kind)] = SW_GRPC_STREAM;
  pipeline.OnEvent(open);
  std::vector<uint8_t> made = StreamMessage(SW_GRPC_WATCH_STREAM, 320, "", "", 0, 0);
  reinterpret_cast<sw_grpc_call*>(made.data())->hdr.conn = 5;
  pipeline.OnEvent(made);
  pipeline.OnEvent(StreamMessage(SW_GRPC_WATCH_CREATE, 330, "/registry/pods/", "/registry/pods0", 0, 0));
  pipeline.OnEvent(StreamMessage(SW_GRPC_WATCH_CANCEL, 340, "", "", 1, 0));
  for (int i = 0; i < 4; ++i) pipeline.OnEvent(StreamMessage(SW_GRPC_LEASE_KEEPALIVE, 400 + i, "", "", 0x694d7a1b, 0, 0xcafe));
  std::string bad = std::string(reinterpret_cast<const char*>(StreamMessage(9, 500, "", "", 0, 0).data()), sizeof(sw_grpc_call));
  pipeline.OnEvent(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bad.data()), bad.size()));
  std::string m = Metrics(exporter);
  EXPECT_NE(m.find(R"(stormwatch_etcd_stream_messages_total{client="unknown",message="watch_create",method="/etcdserverpb.Watch/Watch",resource="configmaps"} 3)"), std::string::npos) << m;
  EXPECT_NE(m.find(R"(stormwatch_etcd_stream_messages_total{client="unknown",message="watch_create",method="/etcdserverpb.Watch/Watch",resource="widgets.example.com"} 1)"), std::string::npos) << m;
  EXPECT_NE(m.find(R"(stormwatch_etcd_stream_messages_total{client="unknown",message="watch_cancel",method="/etcdserverpb.Watch/Watch",resource=""} 1)"), std::string::npos) << m;
  EXPECT_NE(m.find(R"(stormwatch_etcd_stream_messages_total{client="kube-apiserver-etcd-client",message="lease_keepalive",method="/etcdserverpb.Lease/LeaseKeepAlive",resource=""} 4)"), std::string::npos) << m;
  EXPECT_NE(m.find(R"(stormwatch_etcd_stream_messages_total{client="kube-apiserver-etcd-client",message="watch_create",method="/etcdserverpb.Watch/Watch",resource="pods"} 1)"), std::string::npos) << m;
  EXPECT_NE(m.find(R"(stormwatch_etcd_stream_messages_total{client="kube-apiserver-etcd-client",message="watch_cancel",method="/etcdserverpb.Watch/Watch",resource=""} 1)"), std::string::npos) << m;
  // Not calls: etcd's call counts are for whole streams (this one is still open).
  EXPECT_EQ(m.find("stormwatch_etcd_requests_total{"), std::string::npos) << m;
  EXPECT_EQ(m.find("/registry"), std::string::npos);
  EXPECT_EQ(pipeline.stats().decode_errors, 1u);
}

}  // namespace
}  // namespace stormwatch
