#include "agent/protocol/http1_stream.h"

#include "agent/core/strings.h"
#include "agent/protocol/http1_parser.h"

#include <absl/container/inlined_vector.h>

#include <algorithm>
#include <climits>
#include <optional>
#include <utility>

namespace stormwatch {
namespace {

using http1::AppendWiping;
using http1::CheckRequestLine;
using http1::ChunkedDecoder;
using http1::FindHeadEnd;
using http1::FindRequestLineStart;
using http1::kGapMarker;
using http1::kStatusLineStart;
using http1::LineVerdict;
using http1::ParseRequestHead;
using http1::ParseResponseHead;
using http1::RequestHead;
using http1::ResponseHead;
using http1::ResumeFrom;
using http1::Wipe;

enum class ReadState { kHead, kBody, kChunkedBody, kResync };
enum class WriteState { kHead, kLengthBody, kChunkedBody, kChunkedLost, kUntilClose, kResync };

// POST, PUT, PATCH, DELETE: the requests whose response bodies are kept (Http1Exchange).
bool IsWrite(std::string_view method) {
  return method == "POST" || method == "PUT" || method == "PATCH" || method == "DELETE";
}

// The end of a chunked body when its framing was lost: the last data chunk's CR LF, the
// zero-size chunk and the blank line. Go flushes after each response, so it ends a write.
constexpr std::string_view kChunkedEnd = "\r\n0\r\n\r\n";

}  // namespace

// The bytes of one head being gathered across calls.
struct Http1Connections::HeadBuffer {
  std::string bytes;
  size_t scanned = 0;         // FindHeadEnd resumes here
  bool gap = false;           // some of its bytes were not captured (kGapMarker stands for them)
  bool line_checked = false;  // the first line was judged valid
  uint64_t start_ns = 0;
  ~HeadBuffer() { Wipe(bytes); }
  void Reset() {
    Wipe(bytes);
    scanned = 0;
    gap = false;
    line_checked = false;
    start_ns = 0;
  }
};

struct Http1Connections::PendingRequest {
  uint64_t start_ns = 0;
  std::string method, path, content_type, user_agent;
  std::string authorization;
  bool head_request = false;  // HEAD: the response has no body whatever its headers say
  bool connect = false;
  bool truncated = false;
  PendingRequest() = default;
  PendingRequest(const PendingRequest&) = delete;  // no stray copies of the authorization
  PendingRequest& operator=(const PendingRequest&) = delete;
  ~PendingRequest() { Wipe(authorization); }
  // As new, the strings' buffers kept.
  void Reset() {
    start_ns = 0;
    method.clear();
    path.clear();
    content_type.clear();
    user_agent.clear();
    Wipe(authorization);
    head_request = connect = truncated = false;
  }
};

struct Http1Connections::ResponseInProgress {
  bool has_request = false;
  bool upgrade = false;  // the connection stops being HTTP once this response is out
  bool truncated = false;
  int status = 0;
  uint64_t bytes = 0;      // body bytes on the wire so far
  uint64_t remaining = 0;  // Content-Length bytes still to come
  std::string priority_level_uid, flow_schema_uid;
  int retry_after_s = -1;
  std::string body_prefix;
  bool prefix_open = true;  // the body is kept (a write's) and no byte of it went by unseen yet
  ChunkedDecoder chunks;
  std::string last_bytes;  // the last contiguous bytes written, while chunked framing is lost

  ResponseInProgress() = default;
  ResponseInProgress(const ResponseInProgress&) = delete;  // no stray copies of the body
  ResponseInProgress& operator=(const ResponseInProgress&) = delete;
  ~ResponseInProgress() { Wipe(body_prefix); }

  // As new, the strings' buffers kept (a new field is reset here too).
  void Reset() {
    has_request = upgrade = truncated = false;
    status = 0;
    bytes = remaining = 0;
    priority_level_uid.clear();
    flow_schema_uid.clear();
    retry_after_s = -1;
    Wipe(body_prefix);
    prefix_open = true;
    chunks = ChunkedDecoder{};
    last_bytes.clear();
  }
};

struct Http1Connections::Connection {
  enum class Kind { kUnknown, kHttp1, kIgnored };

  uint32_t tgid = 0;
  uint64_t conn = 0;
  uint64_t last_ns = 0;
  uint64_t last_write_ns = 0;
  Kind kind = Kind::kUnknown;
  Http1IgnoreReason ignored = Http1IgnoreReason::kNotHttp1;

  ReadState read_state = ReadState::kHead;
  // A head cut across calls, while it is gathered (null otherwise: most heads arrive whole and
  // are parsed where they lie).
  std::unique_ptr<HeadBuffer> request_head;
  uint64_t request_body_remaining = 0;
  ChunkedDecoder request_chunks;
  // Read, not yet answered; oldest first. Clients rarely pipeline: one at a time, inline.
  absl::InlinedVector<std::unique_ptr<PendingRequest>, 2> pending;

  WriteState write_state = WriteState::kHead;
  std::unique_ptr<HeadBuffer> response_head;
  // From its head to its end: null in between, so an idle connection's state stays small (with
  // thousands of connections it is out of cache; a spare is not).
  std::unique_ptr<ResponseInProgress> response;
};

const char* Http1IgnoreReasonName(Http1IgnoreReason reason) {
  switch (reason) {
    case Http1IgnoreReason::kHttp2:
      return "http2";
    case Http1IgnoreReason::kClientSide:
      return "client_side";
    case Http1IgnoreReason::kNotHttp1:
      return "not_http1";
    case Http1IgnoreReason::kUpgraded:
      return "upgraded";
  }
  return "unknown";
}

Http1Connections::Http1Connections(ExchangeSink sink, Http1Limits limits)
    : sink_(std::move(sink)), limits_(limits), connections_(limits.max_connections) {}

Http1Connections::~Http1Connections() = default;

Http1Connections::Connection& Http1Connections::Touch(uint32_t tgid, uint64_t conn,
                                                      uint64_t ts_ns) {
  Connection& c = *connections_.FindOrInsert(
      Key{tgid, conn},
      [&] {
        auto made = std::make_unique<Connection>();
        made->tgid = tgid;
        made->conn = conn;
        return made;
      },
      [&](const Key&, const std::unique_ptr<Connection>& evicted) {
        ++stats_.connections_evicted;
        CountLost(*evicted);
      });
  c.last_ns = ts_ns;
  return c;
}

Http1Connections::PendingRequest& Http1Connections::PushPending(Connection& c) {
  c.pending.push_back(spare_requests_.Take());
  return *c.pending.back();
}

void Http1Connections::PopPending(Connection& c) {
  std::unique_ptr<PendingRequest> r = std::move(c.pending.front());
  c.pending.erase(c.pending.begin());
  r->Reset();  // the token wiped
  spare_requests_.Give(std::move(r));
}

Http1Connections::ResponseInProgress& Http1Connections::OpenResponse(Connection& c) {
  if (!c.response) c.response = spare_responses_.Take();
  return *c.response;
}

void Http1Connections::CloseResponse(Connection& c) {
  if (!c.response) return;
  c.response->Reset();  // the body wiped
  spare_responses_.Give(std::move(c.response));
}

bool Http1Connections::Gathering(const std::unique_ptr<HeadBuffer>& head) {
  return head && !head->bytes.empty();
}

Http1Connections::HeadBuffer& Http1Connections::GatherHead(std::unique_ptr<HeadBuffer>& head) {
  if (!head) head = spare_heads_.Take();
  return *head;
}

void Http1Connections::ReleaseHead(std::unique_ptr<HeadBuffer>& head) {
  if (!head) return;
  head->Reset();  // its bytes wiped
  spare_heads_.Give(std::move(head));
}

void Http1Connections::CountLost(const Connection& c) {
  stats_.requests_without_response += c.pending.size();
}

void Http1Connections::Drop(const Key& key, const Connection& c) {
  CountLost(c);
  connections_.Erase(key);  // c goes with it
}

void Http1Connections::Ignore(Connection& c, Http1IgnoreReason reason) {
  c.kind = Connection::Kind::kIgnored;
  c.ignored = reason;
  ++stats_.ignored_connections[static_cast<size_t>(reason)];
  stats_.requests_without_response += c.pending.size();
  c.pending.clear();
  ReleaseHead(c.request_head);
  ReleaseHead(c.response_head);
  CloseResponse(c);
}

void Http1Connections::OnData(const TlsDataEvent& ev) {
  Connection& c = Touch(ev.tgid, ev.conn, ev.ts_ns);
  if (c.kind == Connection::Kind::kIgnored) {
    ++stats_.ignored_events[static_cast<size_t>(c.ignored)];
    return;
  }
  if (ev.total_len == 0) return;
  bool write = ev.direction == TlsDirection::kWrite;
  if (c.kind == Connection::Kind::kUnknown && write) {
    // A server writes only after a request. A status line first means the agent joined the
    // connection in the middle of an exchange; a request line or the HTTP/2 preface means this
    // process is the client. Anything else is the rest of a response already under way when
    // the agent attached (a long watch, a large LIST): skip it and classify the connection by
    // its next request.
    if (ev.data.starts_with(kStatusLineStart)) {
      c.kind = Connection::Kind::kHttp1;
    } else if (Gathering(c.request_head) || CheckRequestLine(ev.data) == LineVerdict::kRequest ||
               CheckRequestLine(ev.data) == LineVerdict::kHttp2Preface) {
      Ignore(c, Http1IgnoreReason::kClientSide);
      return;
    } else {
      ++stats_.joined_mid_response;
      return;
    }
  }

  // The call's bytes: the captured prefix, the unseen middle, then what the tail adds.
  uint64_t missing = ev.total_len - std::min<uint64_t>(ev.total_len, ev.data.size());
  std::string_view tail = ev.tail.substr(ev.tail.size() - std::min<uint64_t>(ev.tail.size(), missing));
  uint64_t gap = missing - tail.size();
  auto http1 = [&c] { return c.kind != Connection::Kind::kIgnored; };
  if (write) {
    c.last_write_ns = ev.ts_ns;
    WriteBytes(c, ev.data, true, ev.ts_ns);
    if (gap > 0 && http1()) WriteGap(c, gap, ev.ts_ns);
    WriteBytes(c, tail, false, ev.ts_ns);
    if (http1() && c.write_state == WriteState::kChunkedLost && c.response &&
        c.response->last_bytes.ends_with(kChunkedEnd)) {
      CompleteResponse(c, ev.ts_ns);
    }
  } else {
    ReadBytes(c, ev.data, true, ev.ts_ns);
    if (gap > 0 && http1()) ReadGap(c, gap);
    ReadBytes(c, tail, false, ev.ts_ns);
  }
}

void Http1Connections::OnClose(uint32_t tgid, uint64_t conn) {
  const Key key{tgid, conn};
  auto* found = connections_.Find(key);
  if (!found) return;
  Connection& c = **found;
  if (c.kind == Connection::Kind::kHttp1 && c.write_state == WriteState::kUntilClose) {
    CompleteResponse(c, c.last_write_ns);
  }
  Drop(key, c);
}

void Http1Connections::Expire(uint64_t now_ns) {
  while (auto* oldest = connections_.Oldest()) {
    const Connection& c = *oldest->second;
    if (now_ns < c.last_ns || now_ns - c.last_ns < limits_.max_idle_ns) break;
    Drop(oldest->first, c);
  }
}

void Http1Connections::ForgetProcess(uint32_t tgid) {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (it->first.tgid == tgid) {
      CountLost(*it->second);
      it = connections_.Erase(it);
    } else {
      ++it;
    }
  }
}

// --- requests: the read stream ---

void Http1Connections::ReadBytes(Connection& c, std::string_view bytes, bool call_start,
                                 uint64_t ts_ns) {
  while (!bytes.empty() && c.kind != Connection::Kind::kIgnored) {
    switch (c.read_state) {
      case ReadState::kHead:
        bytes = ReadHead(c, bytes, ts_ns);
        break;
      case ReadState::kBody: {
        size_t n = static_cast<size_t>(std::min<uint64_t>(c.request_body_remaining, bytes.size()));
        c.request_body_remaining -= n;
        bytes.remove_prefix(n);
        if (c.request_body_remaining == 0) c.read_state = ReadState::kHead;
        break;
      }
      case ReadState::kChunkedBody:
        bytes.remove_prefix(c.request_chunks.Feed(bytes, nullptr, 0));
        if (c.request_chunks.done()) {
          c.read_state = ReadState::kHead;
        } else if (c.request_chunks.failed()) {
          RequestUnparseable(c);
        }
        break;
      case ReadState::kResync: {
        size_t at = FindRequestLineStart(bytes, call_start);
        if (at == std::string_view::npos) return;
        bytes.remove_prefix(at);
        c.read_state = ReadState::kHead;
        break;
      }
    }
    call_start = false;
  }
}

// Gathers head bytes; returns the bytes after the head (empty while it is incomplete).
std::string_view Http1Connections::ReadHead(Connection& c, std::string_view bytes,
                                            uint64_t ts_ns) {
  if (!Gathering(c.request_head)) {
    // Blank lines before a request line are tolerated (RFC 9112 2.2).
    size_t start = bytes.find_first_not_of("\r\n");
    if (start == std::string_view::npos) return {};
    bytes.remove_prefix(start);
    // The whole head in this call (the usual case): parsed where it lies, not gathered, so
    // its bytes (the token among them) are neither copied nor wiped. Anything else (a cut
    // head, a malformed one, the HTTP/2 preface) is judged below, as it was gathered.
    size_t end = 0;
    std::optional<RequestHead> parsed =
        ParseRequestHead(bytes.substr(0, limits_.max_head_bytes), &end);  // finds the end too
    if (parsed && end != 0) {
      c.kind = Connection::Kind::kHttp1;
      OnRequestHead(c, parsed, ts_ns, /*gap=*/false);
      return bytes.substr(end);
    }
    GatherHead(c.request_head).start_ns = ts_ns;
  }
  HeadBuffer& h = *c.request_head;
  size_t before = h.bytes.size();
  AppendWiping(h.bytes, bytes.substr(0, limits_.max_head_bytes - before));
  if (!h.line_checked) {
    switch (CheckRequestLine(h.bytes)) {
      case LineVerdict::kIncomplete:
        break;
      case LineVerdict::kRequest:
        h.line_checked = true;
        c.kind = Connection::Kind::kHttp1;
        break;
      case LineVerdict::kHttp2Preface:
        if (c.kind == Connection::Kind::kUnknown) {
          Ignore(c, Http1IgnoreReason::kHttp2);
        } else {
          RequestUnparseable(c);
        }
        return {};
      case LineVerdict::kInvalid:
        RequestUnparseable(c);
        return {};
    }
  }
  std::optional<size_t> end = FindHeadEnd(h.bytes, h.scanned);
  if (!end) {
    if (h.bytes.size() >= limits_.max_head_bytes) {
      RequestUnparseable(c);
    } else {
      h.scanned = ResumeFrom(h.bytes);
    }
    return {};
  }
  std::string_view rest = bytes.substr(*end - before);
  OnRequestHead(c, ParseRequestHead(std::string_view(h.bytes).substr(0, *end)), h.start_ns, h.gap);
  ReleaseHead(c.request_head);  // h's views were the parsed head's: released after it
  return rest;
}

void Http1Connections::ReadGap(Connection& c, uint64_t n) {
  switch (c.read_state) {
    case ReadState::kHead:
      if (!Gathering(c.request_head)) {
        RequestUnparseable(c);  // a request head began unseen
      } else if (c.request_head->bytes.size() < limits_.max_head_bytes) {
        AppendWiping(c.request_head->bytes, std::string_view(&kGapMarker, 1));
        c.request_head->gap = true;
      }
      return;
    case ReadState::kBody:
      if (n > c.request_body_remaining) {
        RequestUnparseable(c);  // the next request head began unseen
        return;
      }
      c.request_body_remaining -= n;
      if (c.request_body_remaining == 0) c.read_state = ReadState::kHead;
      return;
    case ReadState::kChunkedBody:
      if (!c.request_chunks.Skip(n)) RequestUnparseable(c);
      return;
    case ReadState::kResync:
      return;
  }
}

void Http1Connections::OnRequestHead(Connection& c, const std::optional<RequestHead>& parsed,
                                     uint64_t start_ns, bool gap) {
  if (!parsed) {
    RequestUnparseable(c);
    return;
  }
  if (gap) ++stats_.head_truncated;
  if (c.pending.size() >= limits_.max_pipelined) {
    ++stats_.requests_without_response;
    PopPending(c);
  }
  PendingRequest& r = PushPending(c);
  r.start_ns = start_ns;
  SetField(r.method, parsed->method);
  SetField(r.path, parsed->target);
  SetField(r.content_type, parsed->content_type);
  SetField(r.user_agent, parsed->user_agent);
  AppendWiping(r.authorization, parsed->authorization);  // empty: wiped when it was popped
  r.head_request = parsed->method == "HEAD";
  r.connect = parsed->method == "CONNECT";
  r.truncated = gap;

  if (parsed->framing.chunked) {
    c.request_chunks = ChunkedDecoder{};
    c.read_state = ReadState::kChunkedBody;
  } else if (parsed->framing.content_length.value_or(0) > 0) {
    c.request_body_remaining = *parsed->framing.content_length;
    c.read_state = ReadState::kBody;
  } else {
    c.read_state = ReadState::kHead;
  }
}

void Http1Connections::RequestUnparseable(Connection& c) {
  if (c.kind == Connection::Kind::kUnknown) {
    Ignore(c, Http1IgnoreReason::kNotHttp1);
    return;
  }
  ++stats_.unparseable;
  ReleaseHead(c.request_head);
  c.read_state = ReadState::kResync;
}

// --- responses: the write stream ---

void Http1Connections::WriteBytes(Connection& c, std::string_view bytes, bool call_start,
                                  uint64_t ts_ns) {
  auto keep_prefix = [&](ResponseInProgress& r, std::string_view body) {
    if (r.prefix_open && r.body_prefix.size() < limits_.max_body_prefix) {
      AppendWiping(r.body_prefix, body.substr(0, limits_.max_body_prefix - r.body_prefix.size()));
    }
  };
  while (!bytes.empty() && c.kind != Connection::Kind::kIgnored) {
    switch (c.write_state) {
      case WriteState::kHead:
        bytes = WriteHead(c, bytes, ts_ns);
        break;
      case WriteState::kLengthBody: {
        ResponseInProgress& r = OpenResponse(c);  // open in every body state
        size_t n = static_cast<size_t>(std::min<uint64_t>(r.remaining, bytes.size()));
        keep_prefix(r, bytes.substr(0, n));
        r.bytes += n;
        r.remaining -= n;
        bytes.remove_prefix(n);
        if (r.remaining == 0) CompleteResponse(c, ts_ns);
        break;
      }
      case WriteState::kChunkedBody: {
        ResponseInProgress& r = OpenResponse(c);
        size_t n = r.chunks.Feed(bytes, r.prefix_open ? &r.body_prefix : nullptr,
                                 limits_.max_body_prefix);
        r.bytes += n;
        bytes.remove_prefix(n);
        if (r.chunks.done()) {
          CompleteResponse(c, ts_ns);
        } else if (r.chunks.failed()) {
          c.write_state = WriteState::kChunkedLost;
        }
        break;
      }
      case WriteState::kChunkedLost: {
        ResponseInProgress& r = OpenResponse(c);
        r.bytes += bytes.size();
        std::string_view last = bytes.substr(bytes.size() - std::min(bytes.size(), kChunkedEnd.size()));
        r.last_bytes.append(last);
        if (r.last_bytes.size() > kChunkedEnd.size()) {
          r.last_bytes.erase(0, r.last_bytes.size() - kChunkedEnd.size());
        }
        bytes = {};
        break;
      }
      case WriteState::kUntilClose: {
        ResponseInProgress& r = OpenResponse(c);
        keep_prefix(r, bytes);
        r.bytes += bytes.size();
        bytes = {};
        break;
      }
      case WriteState::kResync:
        // Go flushes after every response, so the next one starts a write.
        if (!call_start || !bytes.starts_with(kStatusLineStart)) return;
        c.write_state = WriteState::kHead;
        break;
    }
    call_start = false;
  }
}

std::string_view Http1Connections::WriteHead(Connection& c, std::string_view bytes,
                                             uint64_t ts_ns) {
  if (!Gathering(c.response_head) && bytes.starts_with(kStatusLineStart)) {
    // The whole head in this call, as Go writes it (with the body's start): parsed in place;
    // a cut or malformed head is judged below, as it was gathered.
    size_t end = 0;
    std::optional<ResponseHead> parsed =
        ParseResponseHead(bytes.substr(0, limits_.max_head_bytes), &end);  // finds the end too
    if (parsed && end != 0) {
      OnResponseHead(c, parsed, /*gap=*/false, ts_ns);
      return bytes.substr(end);
    }
  }
  HeadBuffer& h = GatherHead(c.response_head);
  size_t before = h.bytes.size();
  AppendWiping(h.bytes, bytes.substr(0, limits_.max_head_bytes - before));
  if (!h.line_checked) {
    size_t n = std::min(h.bytes.size(), kStatusLineStart.size());
    if (h.bytes.compare(0, n, kStatusLineStart.substr(0, n)) != 0) {
      ResponseUnparseable(c);
      return {};
    }
    h.line_checked = n == kStatusLineStart.size();
  }
  std::optional<size_t> end = FindHeadEnd(h.bytes, h.scanned);
  if (!end) {
    if (h.bytes.size() >= limits_.max_head_bytes) {
      ResponseUnparseable(c);
    } else {
      h.scanned = ResumeFrom(h.bytes);
    }
    return {};
  }
  std::string_view rest = bytes.substr(*end - before);
  OnResponseHead(c, ParseResponseHead(std::string_view(h.bytes).substr(0, *end)), h.gap, ts_ns);
  ReleaseHead(c.response_head);  // h's views were the parsed head's: released after it
  return rest;
}

void Http1Connections::WriteGap(Connection& c, uint64_t n, uint64_t ts_ns) {
  if (c.write_state == WriteState::kHead) {
    if (!Gathering(c.response_head)) {
      ResponseUnparseable(c);  // a response head went by unseen
    } else if (c.response_head->bytes.size() < limits_.max_head_bytes) {
      AppendWiping(c.response_head->bytes, std::string_view(&kGapMarker, 1));
      c.response_head->gap = true;
    }
    return;
  }
  if (c.write_state == WriteState::kResync) return;
  ResponseInProgress& r = OpenResponse(c);  // open in every body state
  switch (c.write_state) {
    case WriteState::kHead:
    case WriteState::kResync:
      return;  // above
    case WriteState::kLengthBody:
      r.prefix_open = false;
      if (n < r.remaining) {
        r.bytes += n;
        r.remaining -= n;
        return;
      }
      r.bytes += r.remaining;
      n -= r.remaining;
      CompleteResponse(c, ts_ns);
      if (n > 0) ResponseUnparseable(c);  // the next response head went by unseen
      return;
    case WriteState::kChunkedBody:
      r.prefix_open = false;
      r.bytes += n;
      if (!r.chunks.Skip(n)) c.write_state = WriteState::kChunkedLost;
      return;
    case WriteState::kChunkedLost:
      r.bytes += n;
      r.last_bytes.clear();
      return;
    case WriteState::kUntilClose:
      r.prefix_open = false;
      r.bytes += n;
      return;
  }
}

void Http1Connections::OnResponseHead(Connection& c, const std::optional<ResponseHead>& parsed,
                                      bool gap, uint64_t ts_ns) {
  if (!parsed) {
    ResponseUnparseable(c);
    return;
  }
  if (gap) ++stats_.head_truncated;
  int status = parsed->status;
  // 100 Continue and other interim responses: the final response follows.
  if (status < 200 && status != 101) return;

  ResponseInProgress& r = OpenResponse(c);
  r.Reset();
  r.has_request = !c.pending.empty();
  if (!r.has_request) ++stats_.responses_without_request;
  const PendingRequest* request = r.has_request ? c.pending.front().get() : nullptr;
  r.status = status;
  r.truncated = gap;
  r.priority_level_uid = parsed->priority_level_uid;
  r.flow_schema_uid = parsed->flow_schema_uid;
  r.retry_after_s = parsed->retry_after_s;
  r.upgrade = status == 101 || (request && request->connect && status / 100 == 2);
  // Only a write's body is read (object facts); a read's may be a Secret's and is not kept.
  r.prefix_open = request && IsWrite(request->method);

  // RFC 9112 6.3: which responses have a body, and how long it is.
  bool no_body = r.upgrade || (request && request->head_request) || status == 204 || status == 304;
  if (no_body || (!parsed->framing.chunked && parsed->framing.content_length == 0)) {
    CompleteResponse(c, ts_ns);
  } else if (parsed->framing.chunked) {
    c.write_state = WriteState::kChunkedBody;
  } else if (parsed->framing.content_length) {
    r.remaining = *parsed->framing.content_length;
    c.write_state = WriteState::kLengthBody;
  } else {
    c.write_state = WriteState::kUntilClose;
  }
}

void Http1Connections::ResponseUnparseable(Connection& c) {
  ++stats_.unparseable;
  // The response under way is lost, and with it the request it answered.
  if (!c.pending.empty()) {
    ++stats_.requests_without_response;
    PopPending(c);
  }
  ReleaseHead(c.response_head);
  CloseResponse(c);
  c.write_state = WriteState::kResync;
}

void Http1Connections::CompleteResponse(Connection& c, uint64_t ts_ns) {
  ResponseInProgress& r = OpenResponse(c);  // open from its head on
  if (r.has_request && !c.pending.empty()) {
    PendingRequest& q = *c.pending.front();
    Http1Exchange ex;
    ex.tgid = c.tgid;
    ex.conn = c.conn;
    ex.start_ns = q.start_ns;
    ex.end_ns = ts_ns;
    ex.method = q.method;
    ex.path = q.path;
    ex.content_type = q.content_type;
    ex.user_agent = q.user_agent;
    ex.authorization = q.authorization;
    ex.status = r.status;
    ex.response_bytes = r.bytes;
    ex.priority_level_uid = r.priority_level_uid;
    ex.flow_schema_uid = r.flow_schema_uid;
    ex.retry_after_s = r.retry_after_s;
    ex.body_prefix = r.body_prefix;
    ex.truncated = q.truncated || r.truncated;
    ++stats_.exchanges;
    sink_(ex);  // views: the token and the body stay in one place each, wiped there
    PopPending(c);
  }
  bool upgrade = r.upgrade;
  CloseResponse(c);
  c.write_state = WriteState::kHead;
  if (upgrade) Ignore(c, Http1IgnoreReason::kUpgraded);
}

}  // namespace stormwatch
