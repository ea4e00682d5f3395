// One request as seen by the agent: the record that crosses protocol -> kube -> analysis.
// Plain data; every stage after capture is a pure function of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/core/counted_ptr.h"
#include "agent/core/strings.h"
#include "agent/core/tcp_endpoint.h"

namespace stormwatch {

// RequestInfo::verb as a number, so the tests every sink makes per request (is it a write, a
// LIST, a WATCH?) compare a byte, not strings. kOther: any other verb, "" included.
enum class KubeVerb : uint8_t {
  kOther, kGet, kList, kWatch, kCreate, kUpdate, kPatch, kDelete, kDeleteCollection, kProxy
};

// Where a request ends up in kube-apiserver's terms (k8s.io/apiserver RequestInfo).
struct RequestInfo {
  bool is_resource_request = false;
  std::string path;         // URL path without the query
  std::string verb;         // kube verb: get list watch create update patch delete
                            // deletecollection proxy, or the lower-cased HTTP method
  KubeVerb verb_kind = KubeVerb::kOther;  // `verb` as a number; ParseRequestInfo sets both
  std::string api_prefix;   // "api" or "apis"
  std::string api_group;    // "" for the core group
  std::string api_version;
  std::string namespace_;
  std::string resource;
  std::string subresource;
  std::string name;
  // How many path parts there are from the resource on: {resource, name, subresource, ...}
  // (upstream Parts; ParseRequestInfo gives the parts themselves on request). A count: the
  // metric scope needs no more, and a record is built per request.
  size_t parts_count = 0;
  // Verb came from a legacy /watch/ or /proxy/ path segment rather than the method.
  bool verb_via_path_prefix = false;
  // Raw (URL-decoded) selectors of list/watch/deletecollection requests, as upstream's
  // AuthorizeWithSelectors reads them; empty otherwise.
  std::string field_selector;
  std::string label_selector;

  // Every field as a new RequestInfo has it, the strings' buffers kept (the parser fills one
  // RequestInfo per request: no allocation once they have grown).
  void Clear() {
    is_resource_request = false;
    verb_kind = KubeVerb::kOther;
    parts_count = 0;
    verb_via_path_prefix = false;
    // One by one, not a loop over a list of pointers: this runs per request, and the list
    // cost more than the clears.
    path.clear();
    verb.clear();
    api_prefix.clear();
    api_group.clear();
    api_version.clear();
    namespace_.clear();
    resource.clear();
    subresource.clear();
    name.clear();
    field_selector.clear();
    label_selector.clear();
  }

  bool operator==(const RequestInfo&) const = default;
};

// Who sent a request. Decoded from credentials; never holds the credential itself.
struct Identity {
  enum class Kind { kUnknown, kAnonymous, kServiceAccount, kUser };
  // First, in 56 bytes: what every request reads (the keys, the user, system:masters). With
  // 10,000 clients a request's identity is mostly out of cache; these used to sit in three
  // cache lines.
  Kind kind = Kind::kUnknown;
  bool system_masters = false;  // a member of system:masters: exempt from APF, cluster-admin
  // RecordKeys::user and ::client of this identity (keyed hashes of `user`, and of user + pod),
  // set once where a shared identity is made (ShareIdentity, agent/kube/record_keys.h), so its
  // requests are not hashed again one by one; keys_set is false in identities built by hand.
  bool keys_set = false;
  uint64_t user_key = 0;
  uint64_t client_key = 0;
  std::string user;             // e.g. system:serviceaccount:ns:name, or a user name
  // Read when a storm is named or a client is shown.
  std::string sa_namespace;     // service accounts only
  std::string sa_name;
  std::string pod_name;         // from the bound token's kubernetes.io claim
  std::string user_agent;
  std::vector<std::string> groups;  // client certificates: the O values
  std::string component;          // parsed from the user agent: kubectl, kube-controller-manager,
  std::string component_version;  // OpenAPI-Generator (the Python client), ...; and its version
  std::string reason;           // why the kind is what it is, e.g. why kUnknown (never secret)

  bool operator==(const Identity&) const = default;
};
static_assert(offsetof(Identity, user) + sizeof(std::string) <= 64);

// One client's identity, shared and immutable: the identity cache (or, on replay, the pipeline)
// makes it once per client; records carry this reference, and detectors keep it rather than a
// copy of its strings per tracked key. Counted without atomics (CountedPtr): identities stay on
// the pipeline's thread.
class IdentityRef {
 public:
  IdentityRef() = default;
  // A new identity, not shared with any other.
  static IdentityRef Make(Identity identity) { return IdentityRef(new Node{1, std::move(identity)}); }

  const Identity& operator*() const { return ptr_.get()->identity; }
  const Identity* operator->() const { return &ptr_.get()->identity; }
  const Identity* get() const { return ptr_ ? &ptr_.get()->identity : nullptr; }
  explicit operator bool() const { return static_cast<bool>(ptr_); }
  // The same shared identity (not equal fields: compare *a == *b for that).
  friend bool operator==(const IdentityRef& a, const IdentityRef& b) { return a.ptr_ == b.ptr_; }

 private:
  struct Node {
    uint32_t refs;
    Identity identity;
    static void Destroy(Node* node) { delete node; }
  };

  explicit IdentityRef(Node* made) : ptr_(made) {}

  CountedPtr<Node> ptr_;
};

// The identity of a record nobody has named (kUnknown, no user): one shared instance, so a
// record's identity is never null. Every record starts with it, so records too are made and
// dropped on the pipeline's thread only.
inline const IdentityRef& NoIdentity() {
  static const IdentityRef kNone = IdentityRef::Make(Identity());
  return kNone;
}

// What a read costs the server, from its query (k8s.io/apimachinery ListOptions).
struct QueryShape {
  enum class Consistency { kNotARead, kConsistent, kAny, kExact, kNotOlderThan };
  Consistency consistency = Consistency::kNotARead;  // LIST/WATCH/GET only
  bool paginated = false;            // limit > 0
  bool continued = false;            // a continue token: a later page
  int64_t limit = 0;
  bool label_selector = false;
  bool field_selector = false;
  bool send_initial_events = false;  // WatchList (streaming LIST)
  int64_t timeout_seconds = 0;       // watches: timeoutSeconds
  bool watch_param = false;          // ?watch= true-ish (its first value): metrics' getVerbIfWatch

  bool operator==(const QueryShape&) const = default;
};

// Strings kept only for their buffers, to be filled again: no part of what holds them (equal to
// any other, and not copied with it).
struct SpareStrings {
  std::vector<std::string> strings;
  SpareStrings() = default;
  SpareStrings(const SpareStrings&) {}
  SpareStrings& operator=(const SpareStrings&) { return *this; }
  SpareStrings(SpareStrings&&) = default;
  SpareStrings& operator=(SpareStrings&&) = default;
  bool operator==(const SpareStrings&) const { return true; }
};

// What the response said beyond its status, where captured (zero values when not).
struct ResponseFacts {
  // APF (X-Kubernetes-PF-PriorityLevel-UID / -FlowSchema-UID) and their names when known.
  std::string priority_level_uid;
  std::string flow_schema_uid;
  std::string priority_level;  // e.g. "exempt", "workload-low"; "" when the UID is unmapped
  std::string flow_schema;
  // APF classified the request (its response named a priority level or flow schema), which
  // kube-apiserver does only after authentication.
  bool ThroughApf() const { return !priority_level_uid.empty() || !flow_schema_uid.empty(); }
  int retry_after_s = -1;      // Retry-After of a 429; -1 when absent
  // From the first bytes of a write's response body (a JSON object), when captured.
  // The prefix held an object's metadata at least up to where deletionTimestamp sits, so
  // deletion_timestamp is a fact (agent/kube/object_facts.h); false for Status objects.
  bool object_seen = false;
  int64_t generation = -1;         // metadata.generation; -1 when absent
  bool deletion_timestamp = false; // metadata.deletionTimestamp set: marked for deletion
  std::vector<std::string> finalizers;
  // The prefix reached past metadata.finalizers: an empty `finalizers` means "none", not
  // "cut off before them".
  bool finalizers_seen = false;
  std::string resource_version;
  // The buffers of finalizer names read before: a record reused body after body (the
  // assembler's slots) fills its list without allocating, however long the names.
  SpareStrings spare_finalizers;

  // Appends a finalizer name into a spare string when there is one.
  void AddFinalizer(std::string_view name) {
    if (spare_finalizers.strings.empty()) {
      finalizers.emplace_back(name);
      return;
    }
    finalizers.push_back(std::move(spare_finalizers.strings.back()));
    spare_finalizers.strings.pop_back();
    finalizers.back().assign(name);
  }
  // Empties `finalizers`, keeping its strings as spares.
  void ClearFinalizers() {
    for (std::string& name : finalizers) spare_finalizers.strings.push_back(std::move(name));
    finalizers.clear();
  }

  // Every field as a new ResponseFacts has it, the buffers kept.
  void Clear() {
    priority_level_uid.clear();
    flow_schema_uid.clear();
    priority_level.clear();
    flow_schema.clear();
    resource_version.clear();
    retry_after_s = -1;
    object_seen = false;
    generation = -1;
    deletion_timestamp = false;
    ClearFinalizers();
    finalizers_seen = false;
  }

  bool operator==(const ResponseFacts&) const = default;
};

// How a response body was encoded, and what reading its first bytes established
// (agent/kube/object_facts.h).
enum class BodyEncoding { kJson, kProtobuf, kOther };

// What reading a response body established.
enum class BodyFactsResult {
  kObject,      // an object whose facts are known (ResponseFacts::object_seen)
  kPartial,     // an object, cut before its metadata said enough
  kNotObject,   // a Status, a List, or not a Kubernetes object
  kUnreadable,  // malformed, or an encoding the agent does not read (CBOR, YAML)
};

struct BodyFacts {
  BodyEncoding encoding = BodyEncoding::kOther;
  BodyFactsResult result = BodyFactsResult::kUnreadable;
  bool operator==(const BodyFacts&) const = default;
};

// The connection a request came on, as far as naming its client needs it.
struct RequestConnection {
  uint32_t pid = 0;
  uint64_t conn = 0;                 // *serverConn (HTTP/2) or *net/http.conn (HTTP/1.1)
  bool http1 = false;
  uint64_t client_cert_der = 0;      // HTTP/2, no token: where the BPF program found the
  uint32_t client_cert_der_len = 0;  // connection's client certificate (DER) in the target
};

// What a request read from etcd, when the etcd Range it caused was seen on the same node
// (agent/pipeline/etcd_links.h): consistent LISTs.
struct EtcdReads {
  uint32_t ranges = 0;  // 0: not matched (no etcd attached here, or not found)
  int64_t keys = 0;     // kvs the Range returned
  uint64_t bytes = 0;   // their key + value bytes
  int64_t limit = 0;    // the Range's limit (a cache-served consistent LIST reads 1 key)
  bool operator==(const EtcdReads&) const = default;
};

// Hashes of who and what a request is about, computed once per record (agent/kube/record_keys.h)
// so every detector keys its state by integers instead of building and hashing strings. Keyed
// (a per-process secret), so a client cannot craft names that collide with another's.
struct RecordKeys {
  uint64_t user = 0;      // identity.user
  uint64_t client = 0;    // identity.user + pod: replicas of one service account told apart
  uint64_t resource = 0;  // API group + resource
  uint64_t object = 0;    // resource + namespace + name
  bool set = false;       // false: not computed (detectors compute them themselves)
  bool operator==(const RecordKeys&) const = default;
};

struct RequestRecord {
  // Capture facts.
  uint32_t pid = 0;
  uint64_t conn_id = 0;         // server-side connection object address in the target
  uint32_t stream_id = 0;       // HTTP/2 stream, 0 for HTTP/1.1
  uint64_t start_ns = 0;        // CLOCK_MONOTONIC (bpf_ktime_get_ns)
  uint64_t end_ns = 0;
  std::string protocol = "HTTP/2";  // or "HTTP/1.1"
  std::optional<TcpEndpoint> peer_address;   // the client's end as the server sees it
  std::optional<TcpEndpoint> local_address;  // the server's; either nullopt when unknown

  // HTTP facts.
  std::string method;           // GET PUT POST PATCH DELETE ...
  std::string path;             // path + query, as sent
  std::string content_type;
  int status = 0;
  uint64_t response_bytes = 0;
  ResponseFacts response;
  // Transient: the start of a write's response body, parsed into `response` and cleared by the
  // pipeline before the record goes anywhere (a body may hold a Secret). A view of the bytes
  // the body was captured in (the ring buffer's event, an HTTP/1.1 exchange): never copied,
  // valid until the record is delivered.
  std::string_view response_body_prefix;
  // What reading that prefix established; empty when there was none to read.
  std::optional<BodyFacts> body_read;

  // Kubernetes facts, filled by agent/kube.
  RequestInfo info;
  QueryShape shape;
  // Who sent it, shared, never null: the identity cache's on the live path, interned by the
  // pipeline on replay (RequestPipeline::InternIdentity). A record does not copy its strings.
  IdentityRef identity = NoIdentity();
  // Transient: the fingerprint of the credential `identity` was resolved from (a keyed hash of a
  // bearer JWT's end and the user agent: CredentialFingerprint), 0 when none; the pipeline
  // remembers it for the connection once the response shows the server authenticated it
  // (agent/pipeline/connection_credentials.h) and clears it before the record goes anywhere.
  uint64_t credential_fingerprint = 0;
  RecordKeys keys;  // of identity and info, once both are final

  EtcdReads etcd;

  // Every field as a new record has it (protocol "HTTP/2"), the strings' buffers kept: for a
  // record reused request after request (the HTTP/2 assembler's slots). A new field is cleared
  // here too (RequestRecord.ClearIsANewRecordWithItsBuffersKept fails until it is).
  void Clear() {
    pid = stream_id = 0;
    conn_id = start_ns = end_ns = 0;
    SetField(protocol, "HTTP/2");
    peer_address.reset();
    local_address.reset();
    method.clear();
    path.clear();
    content_type.clear();
    status = 0;
    response_bytes = 0;
    response.Clear();
    response_body_prefix = {};
    body_read.reset();
    info.Clear();
    shape = QueryShape();
    identity = NoIdentity();
    credential_fingerprint = 0;
    keys = RecordKeys();
    etcd = EtcdReads();
  }

  bool operator==(const RequestRecord&) const = default;
};

}  // namespace stormwatch
