#include "agent/protocol/http1_parser.h"

#include <string.h>  // explicit_bzero

#include <cstdint>
#include <cstring>

#include <algorithm>
#include <climits>
#include <iterator>

namespace stormwatch::http1 {
namespace {

bool IsUpper(char ch) { return ch >= 'A' && ch <= 'Z'; }
bool IsDigit(char ch) { return ch >= '0' && ch <= '9'; }

char Lower(char ch) { return IsUpper(ch) ? static_cast<char>(ch - 'A' + 'a') : ch; }

// `lower` is lower case already.
bool EqualsLower(std::string_view s, std::string_view lower) {
  return s.size() == lower.size() &&
         std::equal(s.begin(), s.end(), lower.begin(), [](char a, char b) { return Lower(a) == b; });
}

// EqualsLower for a header name the parsers read (`lower` of a-z, 0-9 and '-' only), 8 bytes at
// a time: a head has ~10 names, and those of the fields read are compared whole (30 and 33
// bytes for the APF UIDs). Setting bit 5 of every byte lower-cases letters and leaves '-' and
// digits as they are; it would also turn control bytes into them ("\r" into '-'), so a word
// holding a byte below 0x20 never matches.
// A name of 8 bytes or more ends with the word of its last 8 bytes, overlapping the one before
// (every name the parsers read has 10 or more): no byte loop for the rest.
bool EqualsLowerName(std::string_view s, std::string_view lower) {
  if (s.size() != lower.size()) return false;
  if (s.size() < 8) return EqualsLower(s, lower);
  constexpr uint64_t kBit5 = 0x2020202020202020ull, kHigh = 0x8080808080808080ull;
  auto word_equals = [&](size_t at) {
    uint64_t a, b;
    std::memcpy(&a, s.data() + at, 8);
    std::memcpy(&b, lower.data() + at, 8);
    const bool control = ((a - kBit5) & ~a & kHigh) != 0;  // some byte < 0x20 (exact)
    return !control && (a | kBit5) == b;
  };
  for (size_t i = 0; i + 8 < s.size(); i += 8) {
    if (!word_equals(i)) return false;
  }
  return word_equals(s.size() - 8);
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

// Splits a head into lines without their CR LF; the blank line ends it.
class HeadLines {
 public:
  explicit HeadLines(std::string_view head) : size_(head.size()), rest_(head) {}
  std::optional<std::string_view> Next() {
    size_t nl = rest_.find('\n');
    if (nl == std::string_view::npos) return std::nullopt;
    std::string_view line = rest_.substr(0, nl);
    rest_.remove_prefix(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) {
      ended_ = true;
      return std::nullopt;
    }
    return line;
  }
  // One past the blank line once Next() reached it; 0 before.
  size_t end() const { return ended_ ? size_ - rest_.size() : 0; }

 private:
  size_t size_;
  std::string_view rest_;
  bool ended_ = false;
};

// The header fields the parsers read; every other is skipped.
enum class Field {
  kOther, kContentLength, kTransferEncoding,        // both
  kAuthorization, kUserAgent, kContentType,         // requests
  kPriorityLevelUid, kFlowSchemaUid, kRetryAfter,   // responses
};

Field FieldOf(std::string_view name) {
  switch (name.size()) {  // one comparison per name, not one per field read
    case 10: return EqualsLowerName(name, "user-agent") ? Field::kUserAgent : Field::kOther;
    case 11: return EqualsLowerName(name, "retry-after") ? Field::kRetryAfter : Field::kOther;
    case 12: return EqualsLowerName(name, "content-type") ? Field::kContentType : Field::kOther;
    case 13: return EqualsLowerName(name, "authorization") ? Field::kAuthorization : Field::kOther;
    case 14: return EqualsLowerName(name, "content-length") ? Field::kContentLength : Field::kOther;
    case 17:
      return EqualsLowerName(name, "transfer-encoding") ? Field::kTransferEncoding : Field::kOther;
    case 30:
      return EqualsLowerName(name, "x-kubernetes-pf-flowschema-uid") ? Field::kFlowSchemaUid
                                                                 : Field::kOther;
    case 33:
      return EqualsLowerName(name, "x-kubernetes-pf-prioritylevel-uid") ? Field::kPriorityLevelUid
                                                                    : Field::kOther;
    default: return Field::kOther;
  }
}

// A header line the parsers read: its field and value; nullopt for continuations, lines
// without a name, fields not read, and lines damaged by a gap. Only the lines of fields read
// are searched for the gap's marker (a field's name never holds one): other lines are
// skipped either way.
struct ReadField {
  Field field;
  std::string_view value;
};
std::optional<ReadField> ReadHeader(std::string_view line) {
  if (line.front() == ' ' || line.front() == '\t') return std::nullopt;
  size_t colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  const Field field = FieldOf(line.substr(0, colon));
  if (field == Field::kOther) return std::nullopt;
  const std::string_view value = line.substr(colon + 1);
  if (value.find(kGapMarker) != std::string_view::npos) return std::nullopt;
  return ReadField{field, Trim(value)};
}

// False when Content-Length values are malformed or disagree: the framing is unknown.
bool AddFraming(Framing& f, const ReadField& h) {
  if (h.field == Field::kContentLength) {
    std::optional<uint64_t> n = ParseDecimal(h.value);
    if (!n || (f.content_length && *f.content_length != *n)) return false;
    f.content_length = n;
  } else if (h.field == Field::kTransferEncoding) {
    std::string_view codings = h.value;
    size_t comma = codings.rfind(',');
    std::string_view last = Trim(comma == std::string_view::npos ? codings : codings.substr(comma + 1));
    f.chunked = EqualsLower(last, "chunked");
  }
  return true;
}

int HexValue(char ch) {
  if (IsDigit(ch)) return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

}  // namespace

void Wipe(std::string& s) {
  if (!s.empty()) explicit_bzero(s.data(), s.size());
  s.clear();
}

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

std::optional<size_t> FindHeadEnd(std::string_view s, size_t from) {
  for (size_t i = s.find('\n', from); i != std::string_view::npos; i = s.find('\n', i + 1)) {
    if (i + 1 < s.size() && s[i + 1] == '\n') return i + 2;
    if (i + 2 < s.size() && s[i + 1] == '\r' && s[i + 2] == '\n') return i + 3;
  }
  return std::nullopt;
}

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

std::optional<RequestHead> ParseRequestHead(std::string_view head, size_t* end) {
  if (end) *end = 0;
  HeadLines lines(head);
  std::optional<std::string_view> first = lines.Next();
  // The head starts with its first line and that line's end: judged in place, not copied.
  if (!first || CheckRequestLine(head) != LineVerdict::kRequest) {
    return std::nullopt;
  }
  RequestHead r;
  size_t sp1 = first->find(' ');
  size_t sp2 = first->find(' ', sp1 + 1);
  r.method = first->substr(0, sp1);
  r.target = first->substr(sp1 + 1, sp2 - sp1 - 1);
  while (std::optional<std::string_view> line = lines.Next()) {
    std::optional<ReadField> h = ReadHeader(*line);
    if (!h) continue;
    if (!AddFraming(r.framing, *h)) return std::nullopt;
    if (h->field == Field::kAuthorization) {
      if (r.authorization.empty()) r.authorization = h->value;
    } else if (h->field == Field::kUserAgent) {
      if (r.user_agent.empty()) r.user_agent = h->value;
    } else if (h->field == Field::kContentType) {
      if (r.content_type.empty()) r.content_type = h->value;
    }
  }
  if (end) *end = lines.end();
  return r;
}

std::optional<ResponseHead> ParseResponseHead(std::string_view head, size_t* end) {
  if (end) *end = 0;
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
    std::optional<ReadField> h = ReadHeader(*line);
    if (!h) continue;
    if (!AddFraming(r.framing, *h)) return std::nullopt;
    if (h->field == Field::kPriorityLevelUid) {
      r.priority_level_uid = h->value;
    } else if (h->field == Field::kFlowSchemaUid) {
      r.flow_schema_uid = h->value;
    } else if (h->field == Field::kRetryAfter) {
      std::optional<uint64_t> s = ParseDecimal(h->value);  // an HTTP-date stays -1
      r.retry_after_s = s && *s <= INT_MAX ? static_cast<int>(*s) : -1;
    }
  }
  if (end) *end = lines.end();
  return r;
}

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

size_t ChunkedDecoder::Feed(std::string_view bytes, std::string* data, size_t data_limit) {
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

bool ChunkedDecoder::Skip(uint64_t n) {
  if (state_ != State::kData || n > remaining_) {
    state_ = State::kFailed;
    return false;
  }
  remaining_ -= n;
  if (remaining_ == 0) state_ = State::kDataCr;
  return true;
}

void ChunkedDecoder::Step(char ch) {
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

}  // namespace stormwatch::http1
