// HTTP/1.1 message heads and chunked bodies, parsed from bytes as a TLS read or write call
// delivers them (RFC 9112). Pure and stateless but for ChunkedDecoder, whose state is the
// parse state of one body: nothing here knows connections, requests or time. The stitcher
// (http1_stream.h) feeds them a connection's reads and writes and pairs what they find.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace stormwatch::http1 {

// Heads hold bearer tokens and bodies may hold Secrets: their bytes are zeroed before the
// memory is released or reused.
void Wipe(std::string& s);
// Appends without leaving a copy behind when the buffer has to grow.
void AppendWiping(std::string& buf, std::string_view more);

// Stands for the uncaptured bytes inside a head: NUL is never valid in an HTTP/1 head, so a
// line holding it is known to be damaged and no blank line can be matched across it.
inline constexpr char kGapMarker = '\0';

inline constexpr std::string_view kStatusLineStart = "HTTP/1.";

// The end (one past the blank line) of the head in `s`, searching from `from`.
std::optional<size_t> FindHeadEnd(std::string_view s, size_t from);
// The next place to resume FindHeadEnd: a '\n' in the last two bytes may still start the end.
inline size_t ResumeFrom(std::string_view s) { return s.size() < 2 ? 0 : s.size() - 2; }

enum class LineVerdict { kIncomplete, kRequest, kHttp2Preface, kInvalid };
// Judges the start of a request head as its bytes arrive: "METHOD SP target SP HTTP/1.x".
LineVerdict CheckRequestLine(std::string_view s);

// How a message body is framed: Transfer-Encoding chunked wins over Content-Length (RFC 9112
// 6.3).
struct Framing {
  std::optional<uint64_t> content_length;
  bool chunked = false;
};

// The views point into the head given to the parser.
struct RequestHead {
  std::string_view method, target;
  std::string_view authorization, user_agent, content_type;
  Framing framing;
};
// Empty when the request line is invalid or Content-Length values are malformed or disagree.
// With `end`, `bytes` may go on past the head (a read holds the body's start too): the head is
// parsed up to its first blank line and *end set one past it, in the same pass. *end is 0 when
// that blank line was not reached: `bytes` hold no complete head, or it was rejected before
// its end. Without `end`, `bytes` are one head.
std::optional<RequestHead> ParseRequestHead(std::string_view bytes, size_t* end = nullptr);

struct ResponseHead {
  int status = 0;
  std::string_view priority_level_uid, flow_schema_uid;
  int retry_after_s = -1;  // Retry-After in seconds; -1 when absent or an HTTP-date
  Framing framing;
};
// Empty when the status line is invalid or the framing unknown; `end` as ParseRequestHead's.
std::optional<ResponseHead> ParseResponseHead(std::string_view bytes, size_t* end = nullptr);

// Where a request line may start again after a loss: at the start of a read call (when
// `call_start`) or of a line, with a method the apiserver serves; npos when nowhere.
size_t FindRequestLineStart(std::string_view bytes, bool call_start);

// Decodes a chunked body (RFC 9112 7.1) as its bytes arrive, through uncaptured stretches too
// as long as they fall inside a chunk's data.
class ChunkedDecoder {
 public:
  // Consumes the body's bytes from `bytes` and returns how many; fewer when the body ended or
  // the framing broke. Data bytes are appended to `data` (when given) up to `data_limit`.
  size_t Feed(std::string_view bytes, std::string* data, size_t data_limit);
  // `n` bytes of the body went by unseen. False when they did not all fall inside one chunk's
  // data: the framing is lost.
  bool Skip(uint64_t n);
  bool done() const { return state_ == State::kDone; }
  bool failed() const { return state_ == State::kFailed; }

 private:
  enum class State {
    kSize, kExtension, kSizeLf, kData, kDataCr, kDataLf,
    kTrailerLineStart, kTrailerLine, kEndLf, kDone, kFailed,
  };
  static constexpr int kMaxSizeDigits = 15;
  static constexpr int kMaxExtension = 1024;

  void EndSizeLine() { state_ = remaining_ == 0 ? State::kTrailerLineStart : State::kData; }
  void Step(char ch);
  void NextChunk() {
    state_ = State::kSize;
    digits_ = 0;
    remaining_ = 0;
  }

  State state_ = State::kSize;
  uint64_t remaining_ = 0;  // data bytes left in the current chunk (its size while reading it)
  int digits_ = 0;
  int extension_ = 0;
};

}  // namespace stormwatch::http1
