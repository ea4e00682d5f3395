// Finding struct fields by name in a target's type data, checked by kind and size: the shared
// tool of the layout derivations (go_layout.cc for the HTTP/2 servers, etcd_layout.cc for etcd).
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "agent/capture/go_layout.h"
#include "agent/capture/go_types.h"

namespace stormwatch {

// Finds fields by name and checks their shape; the first failure is kept.
class Deriver {
 public:
  explicit Deriver(const GoTypes& types) : types_(types) {}

  // Offset of `path` in `type`; its kind must be one of `kinds` (and its size `size`, if not 0).
  uint32_t Offset(const std::string& type, std::string_view path,
                  std::initializer_list<GoKind> kinds, uint64_t size = 0) {
    auto f = Field(type, path, kinds, size);
    return f ? static_cast<uint32_t>(f->offset) : 0;
  }

  std::optional<GoStructField> Field(const std::string& type, std::string_view path,
                                     std::initializer_list<GoKind> kinds, uint64_t size = 0) {
    if (!gap_.message.empty()) return std::nullopt;
    auto f = types_.Field(type, path);
    if (!f) return Fail(type, path, f.error().message);
    bool kind_ok = kinds.size() == 0;
    for (GoKind k : kinds) kind_ok |= f->type.kind == k;
    if (!kind_ok || (size && f->type.size != size)) {
      return Fail(type, path,
                  type + "." + std::string(path) + " is a " + std::string(GoKindName(f->type.kind)) +
                      " (" + f->type.name + ", " + std::to_string(f->type.size) +
                      " bytes), not the shape the probes read");
    }
    if (f->offset > 0xffff) return Fail(type, path, type + "." + std::string(path) + " is too far in");
    return *f;
  }

  std::nullopt_t Fail(const std::string& type, std::string_view field, std::string message) {
    if (gap_.message.empty()) gap_ = {type, std::string(field), std::move(message)};
    return std::nullopt;
  }

  bool ok() const { return gap_.message.empty(); }
  const LayoutGap& gap() const { return gap_; }
  void Reset() { gap_ = {}; }
  const GoTypes& types() const { return types_; }

 private:
  const GoTypes& types_;
  LayoutGap gap_;
};

}  // namespace stormwatch
