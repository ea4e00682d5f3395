#include "agent/protocol/http1_stream.h"

#include <string.h>  // explicit_bzero

#include <algorithm>
#include <climits>
#include <deque>
#include <optional>
#include <utility>

namespace stormwatch {
namespace {

// Heads hold bearer tokens and bodies may hold Secrets: their bytes are zeroed before the
// memory is released or reused.
void Wipe(std::string& s) {
  if (!s.empty()) explicit_bzero(s.data(), s.size());
  s.clear();
}

// Appends without leaving a copy behind when the buffer has to grow.
void AppendWiping(std::string& buf, std::string_view more) {
  if (buf.size() + more.size() > buf.capacity()) {
    std::string grown;
    grown.reserve(std::max(buf.capacity() * 2, buf.size() + more.size()));
    grown.append(buf);
    Wipe(buf);
    buf.swap(grown);
  }
  buf.append(more);
}

// Stands for the uncaptured bytes inside a head: NUL is never valid in an HTTP/1 head, so a
// line holding it is known to be damaged and no blank line can be matched across it.
constexpr char kGapMarker = '\0';

bool IsUpper(char ch) { return ch >= 'A' && ch <= 'Z'; }
bool IsDigit(char ch) { return ch >= '0' && ch <= '9'; }

char Lower(char ch) { return IsUpper(ch) ? static_cast<char>(ch - 'A' + 'a') : ch; }

// `lower` is lower case already.
bool EqualsLower(std::string_view s, std::string_view lower) {
  return s.size() == lower.size() &&
         std::equal(s.begin(), s.end(), lower.begin(), [](char a, char b) { return Lower(a) == b; });
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::optional<uint64_t> ParseDecimal(std::string_view s) {
  if (s.empty() || s.size() > 18) return std::nullopt;  // 18 digits cannot overflow
  uint64_t v = 0;
  for (char ch : s) {
    if (!IsDigit(ch)) return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(ch - '0');
  }
  return v;
}

// The end (one past the blank line) of the head in `s`, searching from `from`.
std::optional<size_t> FindHeadEnd(std::string_view s, size_t from) {
  for (size_t i = s.find('\n', from); i != std::string_view::npos; i = s.find('\n', i + 1)) {
    if (i + 1 < s.size() && s[i + 1] == '\n') return i + 2;
    if (i + 2 < s.size() && s[i + 1] == '\r' && s[i + 2] == '\n') return i + 3;
  }
  return std::nullopt;
}

// The next place to resume FindHeadEnd: a '\n' in the last two bytes may still start the end.
size_t ResumeFrom(std::string_view s) { return s.size() < 2 ? 0 : s.size() - 2; }

enum class LineVerdict { kIncomplete, kRequest, kHttp2Preface, kInvalid };

// Judges the start of a request head as its bytes arrive: "METHOD SP target SP HTTP/1.x".
LineVerdict CheckRequestLine(std::string_view s) {
  constexpr std::string_view kPreface = "PRI * HTTP/2.0";
  if (kPreface.starts_with(s.substr(0, kPreface.size()))) {
    return s.size() >= kPreface.size() ? LineVerdict::kHttp2Preface : LineVerdict::kIncomplete;
  }
  constexpr size_t kMaxMethod = 16;
  size_t i = 0;
  while (i < s.size() && i <= kMaxMethod && IsUpper(s[i])) ++i;
  if (i == s.size()) return LineVerdict::kIncomplete;
  if (i == 0 || i > kMaxMethod || s[i] != ' ') return LineVerdict::kInvalid;
  size_t target = ++i;
  while (i < s.size() && s[i] > ' ' && s[i] != 0x7f) ++i;
  if (i == s.size()) return LineVerdict::kIncomplete;
  if (i == target || s[i] != ' ') return LineVerdict::kInvalid;
  std::string_view version = s.substr(i + 1);
  constexpr std::string_view kVersion = "HTTP/1.";
  size_t n = std::min(version.size(), kVersion.size());
  if (version.substr(0, n) != kVersion.substr(0, n)) return LineVerdict::kInvalid;
  if (version.size() <= kVersion.size()) return LineVerdict::kIncomplete;
  if (!IsDigit(version[kVersion.size()])) return LineVerdict::kInvalid;
  std::string_view end = version.substr(kVersion.size() + 1);
  if (end.empty() || end == "\r") return LineVerdict::kIncomplete;
  return end.starts_with("\r\n") || end.starts_with("\n") ? LineVerdict::kRequest
                                                           : LineVerdict::kInvalid;
}

constexpr std::string_view kStatusLineStart = "HTTP/1.";

// Splits a head into lines without their CR LF; the blank line ends it.
class HeadLines {
 public:
  explicit HeadLines(std::string_view head) : rest_(head) {}
  std::optional<std::string_view> Next() {
    size_t nl = rest_.find('\n');
    if (nl == std::string_view::npos) return std::nullopt;
    std::string_view line = rest_.substr(0, nl);
    rest_.remove_prefix(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) return std::nullopt;
    return line;
  }

 private:
  std::string_view rest_;
};

struct HeaderLine {
  std::string_view name;
  std::string_view value;
};

// Lines damaged by a gap, continuations and lines without a name are skipped.
std::optional<HeaderLine> SplitHeader(std::string_view line) {
  if (line.find(kGapMarker) != std::string_view::npos) return std::nullopt;
  if (line.front() == ' ' || line.front() == '\t') return std::nullopt;
  size_t colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  return HeaderLine{line.substr(0, colon), Trim(line.substr(colon + 1))};
}

// How a message body is framed: Transfer-Encoding chunked wins over Content-Length (RFC 9112
// 6.3). False when Content-Length values are malformed or disagree: the framing is unknown.
struct Framing {
  std::optional<uint64_t> content_length;
  bool chunked = false;
  bool Add(const HeaderLine& h) {
    if (EqualsLower(h.name, "content-length")) {
      std::optional<uint64_t> n = ParseDecimal(h.value);
      if (!n || (content_length && *content_length != *n)) return false;
      content_length = n;
    } else if (EqualsLower(h.name, "transfer-encoding")) {
      std::string_view codings = h.value;
      size_t comma = codings.rfind(',');
      std::string_view last = Trim(comma == std::string_view::npos ? codings : codings.substr(comma + 1));
      chunked = EqualsLower(last, "chunked");
    }
    return true;
  }
};

struct RequestHead {
  std::string_view method, target;
  std::string_view authorization, user_agent, content_type;
  Framing framing;
};

std::optional<RequestHead> ParseRequestHead(std::string_view head) {
  HeadLines lines(head);
  std::optional<std::string_view> first = lines.Next();
  if (!first || CheckRequestLine(std::string(*first) + "\r\n") != LineVerdict::kRequest) {
    return std::nullopt;
  }
  RequestHead r;
  size_t sp1 = first->find(' ');
  size_t sp2 = first->find(' ', sp1 + 1);
  r.method = first->substr(0, sp1);
  r.target = first->substr(sp1 + 1, sp2 - sp1 - 1);
  while (std::optional<std::string_view> line = lines.Next()) {
    std::optional<HeaderLine> h = SplitHeader(*line);
    if (!h) continue;
    if (!r.framing.Add(*h)) return std::nullopt;
    if (EqualsLower(h->name, "authorization")) {
      if (r.authorization.empty()) r.authorization = h->value;
    } else if (EqualsLower(h->name, "user-agent")) {
      if (r.user_agent.empty()) r.user_agent = h->value;
    } else if (EqualsLower(h->name, "content-type")) {
      if (r.content_type.empty()) r.content_type = h->value;
    }
  }
  return r;
}

struct ResponseHead {
  int status = 0;
  std::string_view priority_level_uid, flow_schema_uid;
  int retry_after_s = -1;
  Framing framing;
};

std::optional<ResponseHead> ParseResponseHead(std::string_view head) {
  HeadLines lines(head);
  std::optional<std::string_view> first = lines.Next();
  // "HTTP/1.x SP 3DIGIT [SP reason]"
  if (!first || first->size() < 12 || !first->starts_with(kStatusLineStart) ||
      !IsDigit((*first)[7]) || (*first)[8] != ' ' || !IsDigit((*first)[9]) ||
      !IsDigit((*first)[10]) || !IsDigit((*first)[11]) ||
      (first->size() > 12 && (*first)[12] != ' ')) {
    return std::nullopt;
  }
  ResponseHead r;
  r.status = static_cast<int>(*ParseDecimal(first->substr(9, 3)));
  if (r.status < 100) return std::nullopt;
  while (std::optional<std::string_view> line = lines.Next()) {
    std::optional<HeaderLine> h = SplitHeader(*line);
    if (!h) continue;
    if (!r.framing.Add(*h)) return std::nullopt;
    if (EqualsLower(h->name, "x-kubernetes-pf-prioritylevel-uid")) {
      r.priority_level_uid = h->value;
    } else if (EqualsLower(h->name, "x-kubernetes-pf-flowschema-uid")) {
      r.flow_schema_uid = h->value;
    } else if (EqualsLower(h->name, "retry-after")) {
      std::optional<uint64_t> s = ParseDecimal(h->value);  // an HTTP-date stays -1
      r.retry_after_s = s && *s <= INT_MAX ? static_cast<int>(*s) : -1;
    }
  }
  return r;
}

// Where a request line may start again after a loss: at the start of a read call or of a line,
// with a method the apiserver serves.
size_t FindRequestLineStart(std::string_view bytes, bool call_start) {
  static constexpr std::string_view kMethods[] = {"GET ",    "POST ",   "PUT ",     "PATCH ",
                                                  "DELETE ", "HEAD ",   "OPTIONS ", "CONNECT "};
  auto starts_request = [&](size_t at) {
    std::string_view rest = bytes.substr(at);
    return std::any_of(std::begin(kMethods), std::end(kMethods),
                       [&](std::string_view m) { return rest.starts_with(m); });
  };
  if (call_start && starts_request(0)) return 0;
  for (size_t nl = bytes.find('\n'); nl != std::string_view::npos; nl = bytes.find('\n', nl + 1)) {
    if (starts_request(nl + 1)) return nl + 1;
  }
  return std::string_view::npos;
}

// Decodes a chunked body (RFC 9112 7.1) as its bytes arrive, through uncaptured stretches too
// as long as they fall inside a chunk's data.
class ChunkedDecoder {
 public:
  // Consumes the body's bytes from `bytes` and returns how many; fewer when the body ended or
  // the framing broke. Data bytes are appended to `data` (when given) up to `data_limit`.
  size_t Feed(std::string_view bytes, std::string* data, size_t data_limit) {
    size_t i = 0;
    while (i < bytes.size() && state_ != State::kDone && state_ != State::kFailed) {
      if (state_ == State::kData) {
        size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, bytes.size() - i));
        if (data && data->size() < data_limit) {
          AppendWiping(*data, bytes.substr(i, std::min(n, data_limit - data->size())));
        }
        remaining_ -= n;
        i += n;
        if (remaining_ == 0) state_ = State::kDataCr;
        continue;
      }
      Step(bytes[i++]);
    }
    return i;
  }
  // `n` bytes of the body went by unseen. False when they did not all fall inside one chunk's
  // data: the framing is lost.
  bool Skip(uint64_t n) {
    if (state_ != State::kData || n > remaining_) {
      state_ = State::kFailed;
      return false;
    }
    remaining_ -= n;
    if (remaining_ == 0) state_ = State::kDataCr;
    return true;
  }
  bool done() const { return state_ == State::kDone; }
  bool failed() const { return state_ == State::kFailed; }

 private:
  enum class State {
    kSize, kExtension, kSizeLf, kData, kDataCr, kDataLf,
    kTrailerLineStart, kTrailerLine, kEndLf, kDone, kFailed,
  };
  static constexpr int kMaxSizeDigits = 15;
  static constexpr int kMaxExtension = 1024;

  void EndSizeLine() {
    state_ = remaining_ == 0 ? State::kTrailerLineStart : State::kData;
  }
  void Step(char ch) {
    switch (state_) {
      case State::kSize:
        if (int v = HexValue(ch); v >= 0 && digits_ < kMaxSizeDigits) {
          remaining_ = remaining_ * 16 + static_cast<uint64_t>(v);
          ++digits_;
        } else if (digits_ > 0 && (ch == ';' || ch == ' ' || ch == '\t')) {
          state_ = State::kExtension;
          extension_ = 0;
        } else if (digits_ > 0 && ch == '\r') {
          state_ = State::kSizeLf;
        } else if (digits_ > 0 && ch == '\n') {
          EndSizeLine();
        } else {
          state_ = State::kFailed;
        }
        return;
      case State::kExtension:
        if (ch == '\r') {
          state_ = State::kSizeLf;
        } else if (ch == '\n') {
          EndSizeLine();
        } else if (++extension_ > kMaxExtension) {
          state_ = State::kFailed;
        }
        return;
      case State::kSizeLf:
        if (ch == '\n') {
          EndSizeLine();
        } else {
          state_ = State::kFailed;
        }
        return;
      case State::kDataCr:
        if (ch == '\r') {
          state_ = State::kDataLf;
        } else if (ch == '\n') {
          NextChunk();
        } else {
          state_ = State::kFailed;
        }
        return;
      case State::kDataLf:
        if (ch == '\n') {
          NextChunk();
        } else {
          state_ = State::kFailed;
        }
        return;
      case State::kTrailerLineStart:
        state_ = ch == '\r' ? State::kEndLf : ch == '\n' ? State::kDone : State::kTrailerLine;
        return;
      case State::kTrailerLine:
        if (ch == '\n') state_ = State::kTrailerLineStart;
        return;
      case State::kEndLf:
        state_ = ch == '\n' ? State::kDone : State::kFailed;
        return;
      case State::kData:
      case State::kDone:
      case State::kFailed:
        return;
    }
  }
  void NextChunk() {
    state_ = State::kSize;
    digits_ = 0;
    remaining_ = 0;
  }
  static int HexValue(char ch) {
    if (IsDigit(ch)) return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
  }

  State state_ = State::kSize;
  uint64_t remaining_ = 0;  // data bytes left in the current chunk (its size while reading it)
  int digits_ = 0;
  int extension_ = 0;
};

// The bytes of one head being gathered across calls.
struct HeadBuffer {
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
  }
};

struct PendingRequest {
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
};

struct ResponseInProgress {
  bool has_request = false;
  bool upgrade = false;  // the connection stops being HTTP once this response is out
  bool truncated = false;
  int status = 0;
  uint64_t bytes = 0;      // body bytes on the wire so far
  uint64_t remaining = 0;  // Content-Length bytes still to come
  std::string priority_level_uid, flow_schema_uid;
  int retry_after_s = -1;
  std::string body_prefix;
  bool prefix_open = true;  // no byte of the body went by unseen yet
  ChunkedDecoder chunks;
  std::string last_bytes;  // the last contiguous bytes written, while chunked framing is lost

  void Reset() {
    Wipe(body_prefix);
    *this = ResponseInProgress{};
  }
};

enum class ReadState { kHead, kBody, kChunkedBody, kResync };
enum class WriteState { kHead, kLengthBody, kChunkedBody, kChunkedLost, kUntilClose, kResync };

// The end of a chunked body when its framing was lost: the last data chunk's CR LF, the
// zero-size chunk and the blank line. Go flushes after each response, so it ends a write.
constexpr std::string_view kChunkedEnd = "\r\n0\r\n\r\n";

}  // namespace

struct Http1Connections::Connection {
  enum class Kind { kUnknown, kHttp1, kIgnored };

  uint32_t tgid = 0;
  uint64_t conn = 0;
  std::list<Key>::iterator lru;
  uint64_t last_ns = 0;
  uint64_t last_write_ns = 0;
  Kind kind = Kind::kUnknown;
  Http1IgnoreReason ignored = Http1IgnoreReason::kNotHttp1;

  ReadState read_state = ReadState::kHead;
  HeadBuffer request_head;
  uint64_t request_body_remaining = 0;
  ChunkedDecoder request_chunks;
  std::deque<PendingRequest> pending;  // read, not yet answered; oldest first

  WriteState write_state = WriteState::kHead;
  HeadBuffer response_head;
  ResponseInProgress response;

  ~Connection() { Wipe(response.body_prefix); }
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
    : sink_(std::move(sink)), limits_(limits) {}

Http1Connections::~Http1Connections() = default;

Http1Connections::Connection& Http1Connections::Touch(uint32_t tgid, uint64_t conn,
                                                      uint64_t ts_ns) {
  Key key{tgid, conn};
  auto it = connections_.find(key);
  if (it == connections_.end()) {
    if (connections_.size() >= limits_.max_connections && !lru_.empty()) {
      ++stats_.connections_evicted;
      Drop(connections_.find(lru_.front()));
    }
    auto c = std::make_unique<Connection>();
    c->tgid = tgid;
    c->conn = conn;
    c->lru = lru_.insert(lru_.end(), key);
    it = connections_.emplace(key, std::move(c)).first;
  } else {
    lru_.splice(lru_.end(), lru_, it->second->lru);
  }
  it->second->last_ns = ts_ns;
  return *it->second;
}

void Http1Connections::Drop(Map::iterator it) {
  stats_.requests_without_response += it->second->pending.size();
  lru_.erase(it->second->lru);
  connections_.erase(it);
}

void Http1Connections::Ignore(Connection& c, Http1IgnoreReason reason) {
  c.kind = Connection::Kind::kIgnored;
  c.ignored = reason;
  ++stats_.ignored_connections[static_cast<size_t>(reason)];
  stats_.requests_without_response += c.pending.size();
  c.pending.clear();
  c.request_head.Reset();
  c.response_head.Reset();
  c.response.Reset();
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
    } else if (!c.request_head.bytes.empty() || CheckRequestLine(ev.data) == LineVerdict::kRequest ||
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
    if (http1() && c.write_state == WriteState::kChunkedLost &&
        c.response.last_bytes.ends_with(kChunkedEnd)) {
      CompleteResponse(c, ev.ts_ns);
    }
  } else {
    ReadBytes(c, ev.data, true, ev.ts_ns);
    if (gap > 0 && http1()) ReadGap(c, gap);
    ReadBytes(c, tail, false, ev.ts_ns);
  }
}

void Http1Connections::OnClose(uint32_t tgid, uint64_t conn) {
  auto it = connections_.find(Key{tgid, conn});
  if (it == connections_.end()) return;
  Connection& c = *it->second;
  if (c.kind == Connection::Kind::kHttp1 && c.write_state == WriteState::kUntilClose) {
    CompleteResponse(c, c.last_write_ns);
  }
  Drop(it);
}

void Http1Connections::Expire(uint64_t now_ns) {
  while (!lru_.empty()) {
    auto it = connections_.find(lru_.front());
    uint64_t last = it->second->last_ns;
    if (now_ns < last || now_ns - last < limits_.max_idle_ns) break;
    Drop(it);
  }
}

void Http1Connections::ForgetProcess(uint32_t tgid) {
  for (auto it = connections_.begin(); it != connections_.end();) {
    auto next = std::next(it);
    if (it->first.tgid == tgid) Drop(it);
    it = next;
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
  HeadBuffer& h = c.request_head;
  if (h.bytes.empty()) {
    // Blank lines before a request line are tolerated (RFC 9112 2.2).
    size_t start = bytes.find_first_not_of("\r\n");
    if (start == std::string_view::npos) return {};
    bytes.remove_prefix(start);
    h.start_ns = ts_ns;
  }
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
  OnRequestHead(c, std::string_view(h.bytes).substr(0, *end));
  h.Reset();
  return rest;
}

void Http1Connections::ReadGap(Connection& c, uint64_t n) {
  switch (c.read_state) {
    case ReadState::kHead:
      if (c.request_head.bytes.empty()) {
        RequestUnparseable(c);  // a request head began unseen
      } else if (c.request_head.bytes.size() < limits_.max_head_bytes) {
        AppendWiping(c.request_head.bytes, std::string_view(&kGapMarker, 1));
        c.request_head.gap = true;
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

void Http1Connections::OnRequestHead(Connection& c, std::string_view head) {
  std::optional<RequestHead> parsed = ParseRequestHead(head);
  if (!parsed) {
    RequestUnparseable(c);
    return;
  }
  if (c.request_head.gap) ++stats_.head_truncated;
  if (c.pending.size() >= limits_.max_pipelined) {
    ++stats_.requests_without_response;
    c.pending.pop_front();
  }
  PendingRequest& r = c.pending.emplace_back();
  r.start_ns = c.request_head.start_ns;
  r.method = parsed->method;
  r.path = parsed->target;
  r.content_type = parsed->content_type;
  r.user_agent = parsed->user_agent;
  r.authorization = parsed->authorization;
  r.head_request = parsed->method == "HEAD";
  r.connect = parsed->method == "CONNECT";
  r.truncated = c.request_head.gap;

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
  c.request_head.Reset();
  c.read_state = ReadState::kResync;
}

// --- responses: the write stream ---

void Http1Connections::WriteBytes(Connection& c, std::string_view bytes, bool call_start,
                                  uint64_t ts_ns) {
  ResponseInProgress& r = c.response;
  auto keep_prefix = [&](std::string_view body) {
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
        size_t n = static_cast<size_t>(std::min<uint64_t>(r.remaining, bytes.size()));
        keep_prefix(bytes.substr(0, n));
        r.bytes += n;
        r.remaining -= n;
        bytes.remove_prefix(n);
        if (r.remaining == 0) CompleteResponse(c, ts_ns);
        break;
      }
      case WriteState::kChunkedBody: {
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
        r.bytes += bytes.size();
        std::string_view last = bytes.substr(bytes.size() - std::min(bytes.size(), kChunkedEnd.size()));
        r.last_bytes.append(last);
        if (r.last_bytes.size() > kChunkedEnd.size()) {
          r.last_bytes.erase(0, r.last_bytes.size() - kChunkedEnd.size());
        }
        bytes = {};
        break;
      }
      case WriteState::kUntilClose:
        keep_prefix(bytes);
        r.bytes += bytes.size();
        bytes = {};
        break;
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
  HeadBuffer& h = c.response_head;
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
  OnResponseHead(c, std::string_view(h.bytes).substr(0, *end), ts_ns);
  h.Reset();
  return rest;
}

void Http1Connections::WriteGap(Connection& c, uint64_t n, uint64_t ts_ns) {
  ResponseInProgress& r = c.response;
  switch (c.write_state) {
    case WriteState::kHead:
      if (c.response_head.bytes.empty()) {
        ResponseUnparseable(c);  // a response head went by unseen
      } else if (c.response_head.bytes.size() < limits_.max_head_bytes) {
        AppendWiping(c.response_head.bytes, std::string_view(&kGapMarker, 1));
        c.response_head.gap = true;
      }
      return;
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
    case WriteState::kResync:
      return;
  }
}

void Http1Connections::OnResponseHead(Connection& c, std::string_view head, uint64_t ts_ns) {
  std::optional<ResponseHead> parsed = ParseResponseHead(head);
  if (!parsed) {
    ResponseUnparseable(c);
    return;
  }
  if (c.response_head.gap) ++stats_.head_truncated;
  int status = parsed->status;
  // 100 Continue and other interim responses: the final response follows.
  if (status < 200 && status != 101) return;

  ResponseInProgress& r = c.response;
  r.Reset();
  r.has_request = !c.pending.empty();
  if (!r.has_request) ++stats_.responses_without_request;
  const PendingRequest* request = r.has_request ? &c.pending.front() : nullptr;
  r.status = status;
  r.truncated = c.response_head.gap;
  r.priority_level_uid = parsed->priority_level_uid;
  r.flow_schema_uid = parsed->flow_schema_uid;
  r.retry_after_s = parsed->retry_after_s;
  r.upgrade = status == 101 || (request && request->connect && status / 100 == 2);

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
    c.pending.pop_front();
  }
  c.response_head.Reset();
  c.response.Reset();
  c.write_state = WriteState::kResync;
}

void Http1Connections::CompleteResponse(Connection& c, uint64_t ts_ns) {
  ResponseInProgress& r = c.response;
  if (r.has_request && !c.pending.empty()) {
    PendingRequest& q = c.pending.front();
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
    sink_(ex);
    Wipe(ex.authorization);
    Wipe(ex.body_prefix);
    c.pending.pop_front();
  }
  bool upgrade = r.upgrade;
  r.Reset();
  c.write_state = WriteState::kHead;
  if (upgrade) Ignore(c, Http1IgnoreReason::kUpgraded);
}

}  // namespace stormwatch
