// Result<T>: a value or an error message. Recoverable errors are values (see DESIGN.md
// conventions); exceptions are kept for fatal start-up errors only.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace stormwatch {

struct Error {
  std::string message;
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
  const std::string& error() const { return std::get<Error>(v_).message; }

 private:
  std::variant<T, Error> v_;
};

}  // namespace stormwatch
