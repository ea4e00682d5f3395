// Result<T>: a value or an Error. The one error convention of the agent (see DESIGN.md
// conventions): recoverable errors are values with a code, for callers that branch or count,
// and a message, for people. Exceptions are kept for fatal start-up errors only.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace stormwatch {

enum class ErrorCode {
  kInvalid,      // malformed or hostile input: a request, a file, a target's memory, a setting
  kUnsupported,  // well formed but not what the agent knows (a Go version, a binary layout)
  kNotFound,     // a file, symbol, field or process that is not there
  kLimit,        // refused by a bound (sizes, counts, slots) instead of growing without one
  kSystem,       // the kernel or libc said no (errno in the message)
  kUnavailable,  // a peer (API server, Alertmanager, agent) did not answer usefully
};

std::string_view ErrorCodeName(ErrorCode code);

struct Error {
  std::string message;
  ErrorCode code = ErrorCode::kInvalid;
};

template <typename T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Error error) : v_(std::move(error)) {}    // NOLINT
  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  T& value() { return std::get<T>(v_); }
  const T& value() const { return std::get<T>(v_); }
  T& operator*() { return value(); }
  const T& operator*() const { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const { return std::get<Error>(v_); }

 private:
  std::variant<T, Error> v_;
};

// The same error with context in front ("reading /proc/1/exe: " + message), code kept.
inline Error Context(std::string_view context, const Error& e) {
  return Error{std::string(context) + e.message, e.code};
}

inline std::string_view ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalid: return "invalid";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kNotFound: return "not_found";
    case ErrorCode::kLimit: return "limit";
    case ErrorCode::kSystem: return "system";
    case ErrorCode::kUnavailable: return "unavailable";
  }
  return "invalid";
}

}  // namespace stormwatch
