// Everything between a captured event and the sinks: decode, join request and response, name
// the request the way kube-apiserver does and attribute it, once, into one immutable record;
// then hand that record to every sink (agent/analysis/record_sink.h): the storm detectors, the
// per-client views, the recorder, and what the caller adds (the metrics, the alert outputs).
// No BPF here: tests drive it with synthetic events.
#pragma once

#include <absl/numeric/int128.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "agent/analysis/detector_config.h"
#include "agent/analysis/record_sink.h"
#include "agent/analysis/storm.h"
#include "agent/analysis/storm_detectors.h"
#include "agent/core/bounded_lru.h"
#include "agent/capture/connection_ends.h"
#include "agent/kube/apf_names.h"
#include "agent/kube/request_info.h"
#include "agent/core/etcd_request.h"
#include "agent/core/request_record.h"
#include "agent/pipeline/client_peers.h"
#include "agent/pipeline/connection_credentials.h"
#include "agent/pipeline/etcd_links.h"
#include "agent/protocol/grpc_calls.h"
#include "agent/protocol/http1_stream.h"
#include "agent/protocol/request_assembler.h"

namespace stormwatch {

// JWT decoding per request is the costliest step after capture; identities repeat, so decoded
// ones are kept by a keyed hash of (authorization, user agent) (CredentialKey), shared with every
// record and detector that names them. Bounded, least recently used first out. The token itself
// is never kept.
class IdentityCache {
 public:
  explicit IdentityCache(size_t capacity) : lru_(capacity, Recency::kApproximate) {}
  IdentityRef Resolve(std::string_view authorization, std::string_view user_agent);
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }

 private:
  BoundedLru<absl::uint128, IdentityRef> lru_;  // by CredentialKey(authorization, user agent)
  uint64_t hits_ = 0, misses_ = 0;
};

// Records stamped later than this (ns since boot) are refused as corrupt: see OnEvent.
inline constexpr uint64_t kLatestPlausibleEventNs = uint64_t{1} << 62;

struct PipelineStats {
  uint64_t events = 0;
  uint64_t decode_errors = 0;
  uint64_t requests = 0;
  uint64_t etcd_calls = 0;  // joined gRPC calls of etcd targets
};

// What a traced process is: its requests mean different things. kube-apiserver's requests are
// the Kubernetes API (stormwatch_requests_total mirrors apiserver_request_total); etcd's
// (gRPC over the same Go HTTP/2 server code) are the apiserver's storage reads and writes.
enum class TargetRole { kApiServer, kEtcd };
// (The role comes from the target's code, agent/capture/target_manager.cc, not its file name.)

// What the pipeline reads from a target's memory per connection. agent.cc wires the readers of
// agent/capture; unit tests inject fakes. Any of them may be empty.
struct ConnectionLookups {
  // The identity of a connection without a bearer token (its client certificate), if any.
  std::function<std::optional<Identity>(const RequestConnection& connection)> identity{};
  // An HTTP/1.1 connection's ends (HTTP/2 events carry theirs), and its close.
  std::function<ConnectionEnds(uint32_t pid, uint64_t http_conn)> http1_ends{};
  std::function<void(uint32_t pid, uint64_t http_conn)> http1_closed{};
};

// APF UIDs to names (agent/kube/apf_names.h), and a nudge when a UID had no name yet.
struct ApfNaming {
  const ApfNames* names = nullptr;
  std::function<void()> on_unknown_uid;
};

class RequestPipeline {
 public:
  explicit RequestPipeline(const DetectorsConfig& detectors, AssemblerLimits limits = {},
                           ConnectionLookups connections = {}, ApfNaming apf = {});
  ~RequestPipeline();

  // Every finished record, storm transition and tick goes to `sink` too, after the
  // pipeline's own sinks (detectors, client views, recorder), in the order added. Not owned:
  // it must outlive the pipeline's use.
  void AddSink(RecordSink* sink) { sinks_.push_back(sink); }

  // One ring-buffer record.
  void OnEvent(std::span<const uint8_t> bytes);

  // Capture files (agent/record): every request record and etcd call, as the pipeline has it
  // once identity is resolved and body and key are gone, goes to the recorder; a recorded one
  // comes back through the same stages after that point (`stormwatch replay`).
  struct Recorder {
    std::function<void(const RequestRecord&)> request{};
    std::function<void(const EtcdRequest&)> etcd{};  // {}: designated initialisers may leave it out
  };
  void SetRecorder(Recorder recorder);
  void ReplayRequest(RequestRecord&& r);
  void ReplayEtcdCall(EtcdRequest&& r);
  // Once a second: expire stale requests, run the detectors, hand their transitions and the
  // pipeline's loss counters to the sinks.
  void Tick(int64_t now_ns);
  void SetTargetRole(uint32_t tgid, TargetRole role) { roles_[tgid] = role; }
  // An etcd target attached at its gRPC interceptor: how to read its messages.
  void SetEtcdMessageTypes(uint32_t tgid, std::shared_ptr<const EtcdMessageTypes> types) {
    grpc_.SetMessageTypes(tgid, std::move(types));
  }
  void ForgetProcess(uint32_t tgid) {
    assembler_.ForgetProcess(tgid);
    credentials_.ForgetProcess(tgid);
    http1_.ForgetProcess(tgid);
    grpc_.ForgetProcess(tgid);
    roles_.erase(tgid);
  }

  const PipelineStats& stats() const { return stats_; }
  const RequestAssembler& assembler() const { return assembler_; }
  const ConnectionCredentials& credentials() const { return credentials_; }
  uint64_t credential_hits() const { return credential_hits_; }
  const Http1Connections& http1() const { return http1_; }
  const GrpcCalls& grpc() const { return grpc_; }
  const EtcdLinks& etcd_links() const { return etcd_links_; }
  const StormDetectors& storms() const { return storms_; }
  const std::vector<std::unique_ptr<StormDetector>>& detectors() const { return storms_.detectors(); }
  // The busiest clients with the peer IPs they connect from (/debug/clients).
  nlohmann::json ClientsSnapshot(int64_t now_ns) const { return peers_.Snapshot(now_ns); }
  // For /debug/top (`stormwatch top`), once a second: ClientPeers::TopDocument.
  nlohmann::json TopSnapshot(int64_t now_ns) { return peers_.TopDocument(now_ns); }

 private:
  // `replayed`: the record's identity came from a capture, one per record: interned here.
  void OnRequest(RequestRecord& r, bool replayed = false);
  // Swaps info's path and name with parse_buffers_ (called twice for a replayed record: lent,
  // then back).
  void LendParseBuffers(RequestInfo& info);
  void OnHttp1Exchange(const Http1Exchange& x);
  void NameApfLevels(ResponseFacts& facts);
  PipelineHealth Health() const;
  ResolvedIdentity Resolve(const RequestConnection& connection, std::string_view authorization,
                           std::string_view user_agent);
  // After the response: `r`'s credential remembered for its connection if the server
  // authenticated it; the fingerprint cleared either way.
  void SettleCredential(RequestRecord& r);
  // etcd's calls: from its gRPC interceptor (OnEtcdCall), or, where that was not found, from
  // its HTTP/2 server (OnEtcdHttp2Request: method and HTTP status only).
  void OnEtcdCall(EtcdRequest& r);
  void OnEtcdHttp2Request(const RequestRecord& r);
  // The resource label of an etcd key, from a bounded vocabulary (keys are client-chosen).
  std::string_view EtcdResource(const EtcdKey& key);
  // The record is final: every sink gets it.
  void Deliver(const RequestRecord& r);
  void Deliver(const EtcdRequest& r);
  // One shared, immutable Identity per client (RecordKeys::client) on replay too, so detectors
  // keep one pointer per client, as live, not one per replayed record. Bounded: an identity pushed out
  // lives on where a detector still holds it; the next request of its client interns it anew.
  IdentityRef InternIdentity(const RequestRecord& r);

  IdentityCache identities_;
  // Each connection's last authenticated credential, looked up before identities_: most
  // requests are named without hashing their whole token. As many slots as identities_.
  ConnectionCredentials credentials_;
  uint64_t credential_hits_ = 0;  // requests named by credentials_
  // As many as the live identity cache holds (limits.max_identities), so a replay shares
  // identities as the live path does.
  BoundedLru<uint64_t, IdentityRef> interned_identities_;
  ConnectionLookups connections_;
  ClientPeers peers_;
  RequestAssembler assembler_;
  Http1Connections http1_;
  GrpcCalls grpc_;
  EtcdLinks etcd_links_;
  std::unordered_set<std::string> etcd_resources_;
  ApfNaming apf_;
  StormDetectors storms_;
  CallbackSink recorder_;
  std::vector<RecordSink*> sinks_;  // storms_, peers_, recorder_, then those added
  PipelineStats stats_;
  std::unordered_map<uint32_t, TargetRole> roles_;  // by process; unknown = apiserver
  // Buffers OnRequest parses a replayed record's path and name into, kept from record to record.
  struct ParseBuffers {
    std::string path, name;
  } parse_buffers_;
  QueryParams query_;  // a read's query, parsed once for its RequestInfo and its QueryShape
  // HTTP/1.1 exchanges' record, reused (Clear keeps its buffers), as the assembler's slots are
  // for HTTP/2: a record allocates nothing once its strings have grown.
  RequestRecord http1_record_;
  // The HTTP/2 events handled, one of each kind, decoded in place (DecodeH2EventInto). Their
  // views are the ring buffer's bytes: valid only within OnEvent.
  H2RequestEvent h2_request_;
  H2ResponseEvent h2_response_;
};

}  // namespace stormwatch
