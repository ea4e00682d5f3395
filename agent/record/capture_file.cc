#include "agent/record/capture_file.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <utility>

#include <absl/hash/hash.h>

#include "agent/kube/record_keys.h"
#include "capture.pb.h"  // protoc, from proto/capture.proto

namespace stormwatch {
namespace {

namespace pb = stormwatch::capture::v1;

void ToProto(const Identity& id, pb::Identity* out) {
  out->set_kind(static_cast<pb::Identity::Kind>(id.kind));
  out->set_user(id.user);
  out->set_sa_namespace(id.sa_namespace);
  out->set_sa_name(id.sa_name);
  out->set_pod_name(id.pod_name);
  out->set_user_agent(id.user_agent);
  for (const std::string& g : id.groups) out->add_groups(g);
  out->set_system_masters(id.system_masters);
  out->set_component(id.component);
  out->set_component_version(id.component_version);
  out->set_reason(id.reason);
}

Identity::Kind KindOf(const pb::Identity& p) {
  return p.kind() >= 0 && p.kind() <= 3 ? static_cast<Identity::Kind>(p.kind())
                                        : Identity::Kind::kUnknown;
}

Identity FromProto(const pb::Identity& p) {
  Identity id;
  id.kind = KindOf(p);
  id.user = p.user();
  id.sa_namespace = p.sa_namespace();
  id.sa_name = p.sa_name();
  id.pod_name = p.pod_name();
  id.user_agent = p.user_agent();
  id.groups.assign(p.groups().begin(), p.groups().end());
  id.system_masters = p.system_masters();
  id.component = p.component();
  id.component_version = p.component_version();
  id.reason = p.reason();
  return id;
}

// Whether FromProto(p) would equal `id` (its keys aside: they follow from these fields).
bool SameIdentity(const Identity& id, const pb::Identity& p) {
  return id.kind == KindOf(p) && id.user == p.user() && id.sa_namespace == p.sa_namespace() &&
         id.sa_name == p.sa_name() && id.pod_name == p.pod_name() &&
         id.user_agent == p.user_agent() &&
         std::equal(id.groups.begin(), id.groups.end(), p.groups().begin(), p.groups().end()) &&
         id.system_masters == p.system_masters() && id.component == p.component() &&
         id.component_version == p.component_version() && id.reason == p.reason();
}

// The identity of `p`, shared with the earlier records that had the same one. Found by a hash
// of the fields that tell clients apart and confirmed field by field (a collision, or a
// changed field, makes a new identity that takes the slot).
IdentityRef SharedIdentity(const pb::Identity& p, BoundedLru<uint64_t, IdentityRef>& read) {
  IdentityRef& ref = read.FindOrInsert(absl::HashOf(p.user(), p.pod_name(), p.user_agent()),
                                       [] { return IdentityRef(); }, [](uint64_t, IdentityRef&) {});
  if (!ref || !SameIdentity(*ref, p)) ref = ShareIdentity(FromProto(p));
  return ref;
}

void ToProto(const RequestRecord& r, pb::Request* out) {
  out->set_pid(r.pid);
  out->set_conn_id(r.conn_id);
  out->set_stream_id(r.stream_id);
  out->set_start_ns(r.start_ns);
  out->set_end_ns(r.end_ns);
  out->set_protocol(r.protocol);
  out->set_peer_address(FormatTcpEndpoint(r.peer_address));
  out->set_local_address(FormatTcpEndpoint(r.local_address));
  out->set_method(r.method);
  out->set_path(r.path);
  out->set_content_type(r.content_type);
  out->set_status(r.status);
  out->set_response_bytes(r.response_bytes);
  pb::ResponseFacts* f = out->mutable_response();
  f->set_priority_level_uid(r.response.priority_level_uid);
  f->set_flow_schema_uid(r.response.flow_schema_uid);
  f->set_priority_level(r.response.priority_level);
  f->set_flow_schema(r.response.flow_schema);
  f->set_retry_after_s(r.response.retry_after_s);
  f->set_object_seen(r.response.object_seen);
  f->set_generation(r.response.generation);
  f->set_deletion_timestamp(r.response.deletion_timestamp);
  for (const std::string& fin : r.response.finalizers) f->add_finalizers(fin);
  f->set_finalizers_seen(r.response.finalizers_seen);
  f->set_resource_version(r.response.resource_version);
  ToProto(*r.identity, out->mutable_identity());
  pb::EtcdReads* e = out->mutable_etcd();
  e->set_ranges(r.etcd.ranges);
  e->set_keys(r.etcd.keys);
  e->set_bytes(r.etcd.bytes);
  e->set_limit(r.etcd.limit);
}

RequestRecord FromProto(const pb::Request& p, IdentityRef identity) {
  RequestRecord r;
  r.pid = p.pid();
  r.conn_id = p.conn_id();
  r.stream_id = p.stream_id();
  r.start_ns = p.start_ns();
  r.end_ns = p.end_ns();
  r.protocol = p.protocol();
  // Written by FormatTcpEndpoint: anything else reads as unknown.
  r.peer_address = ParseTcpEndpoint(p.peer_address());
  r.local_address = ParseTcpEndpoint(p.local_address());
  r.method = p.method();
  r.path = p.path();
  r.content_type = p.content_type();
  r.status = p.status();
  r.response_bytes = p.response_bytes();
  const pb::ResponseFacts& f = p.response();
  r.response.priority_level_uid = f.priority_level_uid();
  r.response.flow_schema_uid = f.flow_schema_uid();
  r.response.priority_level = f.priority_level();
  r.response.flow_schema = f.flow_schema();
  r.response.retry_after_s = f.retry_after_s();
  r.response.object_seen = f.object_seen();
  r.response.generation = f.generation();
  r.response.deletion_timestamp = f.deletion_timestamp();
  r.response.finalizers.assign(f.finalizers().begin(), f.finalizers().end());
  r.response.finalizers_seen = f.finalizers_seen();
  r.response.resource_version = f.resource_version();
  r.identity = std::move(identity);
  r.etcd = {p.etcd().ranges(), p.etcd().keys(), p.etcd().bytes(), p.etcd().limit()};
  return r;
}

void ToProto(const EtcdRequest& r, pb::EtcdCall* out) {
  out->set_pid(r.pid);
  out->set_start_ns(r.start_ns);
  out->set_end_ns(r.end_ns);
  out->set_stream(r.stream);
  out->set_method(r.method);
  out->set_request(static_cast<uint32_t>(r.request));
  out->set_key_registry(r.decoded.registry);
  out->set_key_prefix(r.decoded.prefix);
  out->set_group(r.decoded.group);
  out->set_resource(r.decoded.resource);
  out->set_namespace_(r.decoded.namespace_);
  out->set_key_resource_prefix(r.decoded.key_prefix);
  out->set_limit(r.limit);
  out->set_revision(r.revision);
  out->set_serializable(r.serializable);
  out->set_keys_only(r.keys_only);
  out->set_count_only(r.count_only);
  out->set_count(r.count);
  out->set_kvs(r.kvs);
  out->set_kv_bytes(r.kv_bytes);
  out->set_more(r.more);
  out->set_txn_succeeded(r.txn_succeeded);
  out->set_code(r.code);
  out->set_peer_address(r.peer_address);
  ToProto(r.identity, out->mutable_identity());
  out->set_stream_message(static_cast<uint32_t>(r.stream_message));
}

EtcdRequest FromProto(const pb::EtcdCall& p) {
  EtcdRequest r;
  r.pid = p.pid();
  r.start_ns = p.start_ns();
  r.end_ns = p.end_ns();
  r.stream = p.stream();
  r.method = p.method();
  r.request = p.request() <= static_cast<uint32_t>(EtcdMessage::kLeaseRevokeRequest)
                  ? static_cast<EtcdMessage>(p.request())
                  : EtcdMessage::kOther;
  r.decoded.registry = p.key_registry();
  r.decoded.prefix = p.key_prefix();
  r.decoded.group = p.group();
  r.decoded.resource = p.resource();
  r.decoded.namespace_ = p.namespace_();
  r.decoded.key_prefix = p.key_resource_prefix();
  r.limit = p.limit();
  r.revision = p.revision();
  r.serializable = p.serializable();
  r.keys_only = p.keys_only();
  r.count_only = p.count_only();
  r.count = p.count();
  r.kvs = p.kvs();
  r.kv_bytes = p.kv_bytes();
  r.more = p.more();
  r.txn_succeeded = p.txn_succeeded();
  r.code = p.code();
  r.peer_address = p.peer_address();
  r.identity = FromProto(p.identity());
  r.stream_message = p.stream_message() <= static_cast<uint32_t>(EtcdStreamMessage::kLeaseKeepAlive)
                         ? static_cast<EtcdStreamMessage>(p.stream_message())
                         : EtcdStreamMessage::kNone;
  return r;
}

// Protobuf's varint, as CodedOutputStream writes a message's size before it.
void AppendVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

}  // namespace

Result<std::unique_ptr<CaptureWriter>> CaptureWriter::Open(const std::string& path, CaptureLimits limits,
                                                           int64_t realtime_offset_ns) {
  if (limits.max_file_bytes < 4096) return Error{"capture files must be allowed at least 4096 bytes"};
  if (limits.max_files < 1) return Error{"capture files: max_files must be at least 1"};
  std::unique_ptr<CaptureWriter> w(new CaptureWriter(path, limits, realtime_offset_ns));
  if (!w->OpenCurrent()) return Error{"cannot write the capture file " + path};
  return w;
}

CaptureWriter::~CaptureWriter() { Flush(); }

bool CaptureWriter::OpenCurrent() {
  out_.close();
  out_.clear();
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_) return false;
  file_bytes_ = 0;
  pb::FileHeader h;
  h.set_magic(kCaptureMagic);
  h.set_version(kCaptureVersion);
  h.set_agent_version("0.1.0");
  h.set_realtime_offset_ns(realtime_offset_ns_);
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  h.set_hostname(host);
  h.set_sequence(sequence_);
  WriteFramed(h.SerializeAsString());
  return static_cast<bool>(out_);
}

void CaptureWriter::WriteFramed(const std::string& bytes) {
  scratch_.clear();
  AppendVarint(scratch_, bytes.size());
  scratch_ += bytes;
  out_.write(scratch_.data(), static_cast<std::streamsize>(scratch_.size()));
  if (!out_) {
    ++stats_.write_errors;
    return;
  }
  file_bytes_ += scratch_.size();
  stats_.bytes += scratch_.size();
}

void CaptureWriter::Rotate() {
  // FILE -> FILE.1 -> FILE.2 ...; the oldest beyond max_files - 1 goes.
  out_.close();
  std::error_code ec;
  const uint32_t keep = limits_.max_files - 1;
  if (keep == 0) {
    std::filesystem::remove(path_, ec);
  } else {
    std::filesystem::remove(path_ + "." + std::to_string(keep), ec);
    for (uint32_t i = keep; i > 1; --i) {
      std::filesystem::rename(path_ + "." + std::to_string(i - 1), path_ + "." + std::to_string(i), ec);
    }
    std::filesystem::rename(path_, path_ + ".1", ec);
  }
  ++sequence_;
  ++stats_.rotations;
  if (!OpenCurrent()) ++stats_.write_errors;
}

void CaptureWriter::WriteRecord(const std::string& bytes) {
  // + the size's varint (at most 10 bytes): a file never outgrows max_file_bytes.
  if (file_bytes_ + bytes.size() + 10 > limits_.max_file_bytes) Rotate();
  WriteFramed(bytes);
  ++stats_.records;
}

void CaptureWriter::Write(const RequestRecord& r) {
  pb::Record rec;
  ToProto(r, rec.mutable_request());
  WriteRecord(rec.SerializeAsString());
}

void CaptureWriter::Write(const EtcdRequest& r) {
  pb::Record rec;
  ToProto(r, rec.mutable_etcd());
  WriteRecord(rec.SerializeAsString());
}

void CaptureWriter::Flush() {
  if (out_.is_open()) out_.flush();
}

namespace {
enum class Frame { kOk, kEnd, kTruncated, kTooBig, kBadVarint };

// One length-delimited message from `in` into `out`.
Frame ReadFramed(std::ifstream& in, std::string& out, uint64_t* consumed) {
  uint64_t size = 0;
  int shift = 0;
  int c = in.get();
  if (c == std::char_traits<char>::eof()) return Frame::kEnd;
  *consumed = 0;
  while (true) {
    ++*consumed;
    size |= static_cast<uint64_t>(c & 0x7f) << shift;
    if (!(c & 0x80)) break;
    shift += 7;
    if (shift > 35) return Frame::kBadVarint;
    c = in.get();
    if (c == std::char_traits<char>::eof()) return Frame::kTruncated;
  }
  if (size > kMaxCaptureRecordBytes) return Frame::kTooBig;
  out.resize(size);
  in.read(out.data(), static_cast<std::streamsize>(size));
  *consumed += static_cast<uint64_t>(in.gcount());
  if (static_cast<uint64_t>(in.gcount()) != size) return Frame::kTruncated;
  return Frame::kOk;
}
}  // namespace

Result<std::unique_ptr<CaptureReader>> CaptureReader::Open(const std::string& path) {
  std::unique_ptr<CaptureReader> r(new CaptureReader());
  r->path_ = path;
  r->in_.open(path, std::ios::binary);
  if (!r->in_) return Error{"cannot read " + path};
  uint64_t consumed = 0;
  pb::FileHeader h;
  if (ReadFramed(r->in_, r->scratch_, &consumed) != Frame::kOk || !h.ParseFromString(r->scratch_) ||
      h.magic() != kCaptureMagic) {
    return Error{path + " is not a stormwatch capture file"};
  }
  if (h.version() != kCaptureVersion) {
    return Error{path + " is a version " + std::to_string(h.version()) +
                 " capture file; this stormwatch reads version " + std::to_string(kCaptureVersion)};
  }
  r->offset_ = consumed;
  r->header_ = {h.version(), h.agent_version(), h.hostname(), h.realtime_offset_ns(), h.sequence()};
  return r;
}

CaptureReader::~CaptureReader() = default;

Result<std::optional<CaptureRecord>> CaptureReader::Next() {
  uint64_t consumed = 0;
  const uint64_t at = offset_;
  switch (ReadFramed(in_, scratch_, &consumed)) {
    case Frame::kEnd:
      return std::optional<CaptureRecord>();
    case Frame::kTruncated:
      truncated_tail_ = consumed;  // a recording cut short: what came before stands
      return std::optional<CaptureRecord>();
    case Frame::kTooBig:
    case Frame::kBadVarint:
      return Error{path_ + ": corrupt record size at offset " + std::to_string(at)};
    case Frame::kOk:
      break;
  }
  offset_ += consumed;
  if (!record_) record_ = std::make_unique<pb::Record>();
  pb::Record& rec = *record_;
  if (!rec.ParseFromString(scratch_)) {
    return Error{path_ + ": undecodable record at offset " + std::to_string(at)};
  }
  if (rec.has_request()) {
    return std::optional<CaptureRecord>(
        FromProto(rec.request(), SharedIdentity(rec.request().identity(), identities_)));
  }
  if (rec.has_etcd()) return std::optional<CaptureRecord>(FromProto(rec.etcd()));
  return Error{path_ + ": record of an unknown kind at offset " + std::to_string(at)};
}

}  // namespace stormwatch
