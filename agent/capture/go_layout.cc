#include "agent/capture/go_layout.h"

#include "agent/capture/layout_deriver.h"

namespace stormwatch {
namespace {

using K = GoKind;
constexpr uint64_t kPtr = 8, kString = 16, kSlice = 24, kIface = 16;

// The HTTP/2 server's own fields: without them no request is seen.
void DeriveHttp2(Deriver& d, const Http2Stack& stack, sw_go_offsets& o) {
  const std::string& p = stack.type_prefix;
  o.mhf_headers_frame = d.Offset(p + "MetaHeadersFrame", stack.embed_prefix + "HeadersFrame", {K::kPointer}, kPtr);
  auto fields = d.Field(p + "MetaHeadersFrame", "Fields", {K::kSlice}, kSlice);
  o.frame_stream_id = d.Offset(p + "HeadersFrame", stack.embed_prefix + "FrameHeader.StreamID", {K::kUint32});
  if (fields) {
    auto elem = d.types().Elem(fields->type);
    if (!elem) {
      d.Fail(p + "MetaHeadersFrame", "Fields", elem.error().message);
    } else {
      o.mhf_fields = fields->offset;
      o.field_size = elem->size;
      o.field_name = d.Offset(elem->name, "Name", {K::kString}, kString);
      o.field_value = d.Offset(elem->name, "Value", {K::kString}, kString);
    }
  }
  o.sc_conn = d.Offset(p + "serverConn", "conn", {K::kInterface}, kIface);
  o.rw_rws = d.Offset(p + "responseWriter", "rws", {K::kPointer}, kPtr);
  o.rws_stream = d.Offset(p + "responseWriterState", "stream", {K::kPointer}, kPtr);
  o.rws_status = d.Offset(p + "responseWriterState", "status", {K::kInt}, 8);
  o.rws_wrote_bytes = d.Offset(p + "responseWriterState", "wroteBytes", {K::kInt64}, 8);
  o.stream_sc = d.Offset(p + "stream", "sc", {K::kPointer}, kPtr);
  o.stream_id = d.Offset(p + "stream", "id", {K::kUint32}, 4);
}

// The start of a write's response body, still in the stream's bufio.Writer.
void DeriveBody(Deriver& d, const Http2Stack& stack, sw_go_offsets& o) {
  const std::string rws = stack.type_prefix + "responseWriterState";
  auto req = d.Field(rws, "req", {K::kPointer, K::kStruct});
  o.rws_bw = d.Offset(rws, "bw", {K::kPointer}, kPtr);
  o.bufio_buf = d.Offset("bufio.Writer", "buf", {K::kSlice}, kSlice);
  o.bufio_n = d.Offset("bufio.Writer", "n", {K::kInt}, 8);
  if (!req) return;
  o.rws_req = req->offset;
  o.rws_req_inline = req->type.kind == K::kStruct;
  GoType request = req->type;
  if (!o.rws_req_inline) {
    auto elem = d.types().Elem(req->type);
    if (!elem) {
      d.Fail(rws, "req", elem.error().message);
      return;
    }
    request = *elem;
  }
  o.req_method = d.Offset(request.name, "Method", {K::kString}, kString);
}

// The connection's ends: *tls.Conn or *net.TCPConn -> *netFD -> *TCPAddr.
void DeriveAddrs(Deriver& d, sw_go_offsets& o) {
  o.tls_conn_conn = d.Offset("crypto/tls.Conn", "conn", {K::kInterface}, kIface);
  o.tcpconn_fd = d.Offset("net.TCPConn", "conn.fd", {K::kPointer}, kPtr);
  o.netfd_family = d.Offset("net.netFD", "family", {K::kInt}, 8);
  o.netfd_sotype = d.Offset("net.netFD", "sotype", {K::kInt}, 8);
  o.netfd_laddr = d.Offset("net.netFD", "laddr", {K::kInterface}, kIface);
  o.netfd_raddr = d.Offset("net.netFD", "raddr", {K::kInterface}, kIface);
  o.tcpaddr_ip = d.Offset("net.TCPAddr", "IP", {K::kSlice}, kSlice);
  o.tcpaddr_port = d.Offset("net.TCPAddr", "Port", {K::kInt}, 8);
  o.read_addrs = d.ok();
}

void DeriveCertificates(Deriver& d, sw_go_offsets& o) {
  o.tls_peer_certificates = d.Offset("crypto/tls.Conn", "peerCertificates", {K::kSlice}, kSlice);
  o.x509_raw = d.Offset("crypto/x509.Certificate", "Raw", {K::kSlice}, kSlice);
  if (!d.ok() || o.tls_peer_certificates == 0) o.tls_peer_certificates = 0;  // 0 = not read
}

// The handler's response header map: APF UIDs and Retry-After.
void DeriveHeaderMap(Deriver& d, const Http2Stack& stack, sw_go_offsets& o) {
  const std::string rws = stack.type_prefix + "responseWriterState";
  auto header = d.Field(rws, "handlerHeader", {K::kMap}, kPtr);
  if (!header) return;
  auto m = d.types().MapLayout(header->type);
  if (!m) {
    d.Fail(header->type.name, "", m.error().message);
    return;
  }
  if (m->key_size != kString || m->elem_size != kSlice) {
    d.Fail(header->type.name, "", header->type.name + " is not a map[string][]string");
    return;
  }
  o.rws_handler_header = header->offset;
  o.keys_offset = m->keys_offset;
  o.key_stride = m->key_stride;
  o.elems_offset = m->elems_offset;
  o.elem_stride = m->elem_stride;
  uint64_t group = m->swiss ? m->group_size : m->bucket_size;
  if (m->swiss) {
    o.map_swiss = 1;
    o.map_dir_ptr = d.Offset("internal/runtime/maps.Map", "dirPtr", {K::kUnsafePointer}, kPtr);
    o.map_dir_len = d.Offset("internal/runtime/maps.Map", "dirLen", {K::kInt}, 8);
    o.table_groups = d.Offset("internal/runtime/maps.table", "groups.data", {K::kUnsafePointer}, kPtr);
    o.table_mask = d.Offset("internal/runtime/maps.table", "groups.lengthMask", {K::kUint64}, 8);
  } else {
    // The BPF program reads runtime.hmap at fixed offsets (it never changed from Go 1.12 to its
    // end in 1.23); the binary must agree.
    struct { const char* field; uint32_t at; GoKind kind; } hmap[] = {
        {"count", SW_HMAP_COUNT, K::kInt}, {"flags", SW_HMAP_FLAGS, K::kUint8},
        {"B", SW_HMAP_B, K::kUint8}, {"buckets", SW_HMAP_BUCKETS, K::kUnsafePointer},
        {"oldbuckets", SW_HMAP_OLDBUCKETS, K::kUnsafePointer}};
    for (const auto& f : hmap) {
      auto got = d.Field("runtime.hmap", f.field, {f.kind});
      if (got && got->offset != f.at) {
        d.Fail("runtime.hmap", f.field, "runtime.hmap." + std::string(f.field) + " is at " +
                                            std::to_string(got->offset) + ", not " + std::to_string(f.at));
      }
    }
  }
  if (group > SW_MAP_GROUP_MAX) {
    d.Fail(header->type.name, "", "map group of " + std::to_string(group) + " bytes is too big");
  }
  if (d.ok()) o.group_size = group;
}

void DeriveHttp1(Deriver& d, sw_go_offsets& o) {
  o.conn_reader_conn = d.Offset("net/http.connReader", "conn", {K::kPointer}, kPtr);
  o.http_conn_rwc = d.Offset("net/http.conn", "rwc", {K::kInterface}, kIface);
}

}  // namespace

namespace {
// A stack by its package and the prefix of its type names there (net/http's bundled copy
// prefixes them with "http2"): its type prefix and probed function names follow.
Http2Stack MakeStack(Http2StackKind kind, std::string name, const std::string& pkg,
                     const std::string& embed_prefix) {
  return {kind, std::move(name), pkg + "." + embed_prefix, embed_prefix,
          pkg + ".(*" + embed_prefix + "serverConn).processHeaders",
          pkg + ".(*" + embed_prefix + "responseWriter).handlerDone"};
}
}  // namespace

const std::vector<Http2Stack>& Http2Stacks() {
  static const std::vector<Http2Stack> kStacks = {
      MakeStack(Http2StackKind::kXNet, "x/net", "golang.org/x/net/http2", ""),
      MakeStack(Http2StackKind::kStd, "std", "net/http", "http2"),
      MakeStack(Http2StackKind::kStdInternal, "std-internal", "net/http/internal/http2", ""),
  };
  return kStacks;
}

const Http2Stack& XNetHttp2Stack() { return Http2Stacks()[0]; }
const Http2Stack& StdHttp2Stack() { return Http2Stacks()[1]; }
const Http2Stack& StdInternalHttp2Stack() { return Http2Stacks()[2]; }

Result<GoLayout> DeriveGoLayout(const GoTypes& types, const Http2Stack& stack, LayoutGap* gap) {
  GoLayout layout;
  sw_go_offsets& o = layout.offsets;
  Deriver d(types);
  DeriveHttp2(d, stack, o);
  if (!d.ok()) {
    if (gap) *gap = d.gap();
    return Error{stack.name + " HTTP/2 stack: " + d.gap().message, ErrorCode::kNotFound};
  }
  // Optional parts: each all or nothing, a caveat when off.
  auto optional = [&](const char* what, auto&& derive) {
    d.Reset();
    derive();
    if (d.ok()) return true;
    layout.caveats.push_back(std::string(what) + " not read (" + d.gap().message + ")");
    return false;
  };
  layout.write_bodies = optional("write response bodies", [&] { DeriveBody(d, stack, o); });
  if (!layout.write_bodies) {
    o.rws_req = o.rws_req_inline = o.req_method = o.rws_bw = o.bufio_buf = o.bufio_n = 0;
  }
  o.capture_write_bodies = 0;  // the agent turns it on for API servers with the fields found
  if (!optional("client addresses", [&] { DeriveAddrs(d, o); })) o.read_addrs = 0;
  if (!optional("client certificates", [&] { DeriveCertificates(d, o); })) {
    o.tls_peer_certificates = o.x509_raw = 0;
  }
  if (!optional("response headers (APF, Retry-After)", [&] { DeriveHeaderMap(d, stack, o); })) {
    o.group_size = 0;
  }
  layout.http1 = optional("HTTP/1.1", [&] { DeriveHttp1(d, o); });
  return layout;
}

}  // namespace stormwatch
