// An Identity in one shared allocation of its bytes (about 160 of the 400 bytes an Identity of
// a service account takes):
// for state that must name many clients exactly but rarely reads them back, e.g. the last
// writer of each of 100,000 objects, where most clients are long gone from the identity cache
// and an IdentityRef would keep a whole Identity alive for each. Immutable; copies share,
// counted without atomics (CountedPtr): like identities, packed ones stay on the pipeline's
// thread.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <string_view>

#include "agent/core/counted_ptr.h"
#include "agent/core/request_record.h"

namespace stormwatch {

class PackedIdentity {
  // Defined first: the constructor and Unpack deduce their return type.
  template <typename I>
  static auto Strings(I& id) {
    return std::array{&id.user,      &id.sa_namespace, &id.sa_name,           &id.pod_name,
                      &id.user_agent, &id.component,   &id.component_version, &id.reason};
  }
  static char* Put(char* out, std::string_view s) {
    const auto n = static_cast<uint32_t>(s.size());
    std::memcpy(out, &n, 4);
    std::memcpy(out + 4, s.data(), n);
    return out + 4 + n;
  }
  static const char* Get(const char* in, std::string& s) {
    uint32_t n;
    std::memcpy(&n, in, 4);
    s.assign(in + 4, n);
    return in + 4 + n;
  }

 public:
  PackedIdentity() = default;
  explicit PackedIdentity(const Identity& id) {
    size_t size = 2 + 4;  // kind, system_masters; group count
    for (const std::string* s : Strings(id)) size += 4 + s->size();
    for (const std::string& g : id.groups) size += 4 + g.size();
    CountedPtr<Bytes> bytes(Bytes::Make(size));
    char* out = bytes.get()->data();
    *out++ = static_cast<char>(id.kind);
    *out++ = id.system_masters ? 1 : 0;
    for (const std::string* s : Strings(id)) out = Put(out, *s);
    const auto groups = static_cast<uint32_t>(id.groups.size());
    std::memcpy(out, &groups, 4);
    out += 4;
    for (const std::string& g : id.groups) out = Put(out, g);
    bytes_ = std::move(bytes);
  }

  bool empty() const { return !bytes_; }

  Identity Unpack() const {
    Identity id;
    if (!bytes_) return id;
    const char* in = bytes_.get()->data();
    id.kind = static_cast<Identity::Kind>(*in++);
    id.system_masters = *in++ != 0;
    for (std::string* s : Strings(id)) in = Get(in, *s);
    uint32_t groups;
    std::memcpy(&groups, in, 4);
    in += 4;
    id.groups.resize(groups);
    for (std::string& g : id.groups) in = Get(in, g);
    return id;
  }

 private:
  // The count, then the packed bytes, in one allocation.
  struct Bytes {
    uint32_t refs;
    static Bytes* Make(size_t size) { return new (::operator new(sizeof(Bytes) + size)) Bytes{1}; }
    static void Destroy(Bytes* bytes) {
      bytes->~Bytes();
      ::operator delete(bytes);
    }
    char* data() { return reinterpret_cast<char*>(this + 1); }
  };

  CountedPtr<Bytes> bytes_;
};

}  // namespace stormwatch
