// Who is behind a TLS connection that carries no bearer token: the client certificate the
// Go server verified during the handshake (user = CN, groups = O, as kube-apiserver's x509
// authenticator), read from the target's memory with process_vm_readv.
//
//   HTTP/2: the BPF program finds tls.Conn.peerCertificates[0].Raw at the request, while the
//   connection surely lives, and the event says where the DER is.
//   HTTP/1.1: *net/http.conn .rwc (net.Conn) -> *tls.Conn .peerCertificates -> [0] -> .Raw.
//
// Parsed subjects are cached by where the DER sits and validated at every use by its last 32
// bytes (part of the signature, unique per certificate): Go reuses a closed connection's
// memory, and a new certificate at the same address must not inherit the old one's name.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "agent/core/bounded_lru.h"
#include "agent/core/request_record.h"
#include "agent/core/result.h"
#include "bpf/events.h"

namespace stormwatch {

struct CertSubject {
  std::string common_name;
  std::vector<std::string> organizations;
};

// DER -> subject CN and O values (OpenSSL). Error on anything that is not an X.509 cert.
Result<CertSubject> ParseCertificateSubject(std::string_view der);

// Where a certificate's DER sits in the target.
struct CertLocation {
  uint64_t der = 0;
  uint32_t len = 0;
};

class ClientCertReader {
 public:
  explicit ClientCertReader(size_t capacity = 4096) : cache_(capacity) {}

  // The subject of the certificate at `where`; nullopt when it cannot be read or parsed.
  std::optional<CertSubject> ReadDer(pid_t pid, CertLocation where);
  // HTTP/1.1: the client certificate of the connection whose net.Conn interface value sits at
  // `net_conn`; nullopt when there is none (a token client) or it cannot be read.
  // `layout`: the target's (tls.Conn.peerCertificates, x509.Certificate.Raw).
  std::optional<CertSubject> ReadConnection(pid_t pid, uint64_t net_conn, const sw_go_offsets& layout);
  void ForgetProcess(pid_t pid);

  uint64_t read_errors() const { return read_errors_; }

 private:
  static constexpr size_t kTail = 32;
  struct Entry {
    std::string tail;  // the DER's last kTail bytes when it was parsed
    CertSubject subject;
  };
  struct Key {
    pid_t pid;
    uint64_t der;
    uint32_t len;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<uint64_t>{}(k.der ^ (uint64_t(k.pid) << 48) ^ (uint64_t(k.len) << 32));
    }
  };
  BoundedLru<Key, Entry, KeyHash> cache_;  // least recently read first out
  uint64_t read_errors_ = 0;
};

// The identity of connections without a token, for every traced process: the process's Go
// layout (from its type data) says where; CN becomes the user, O values the groups.
class ClientCertIdentities {
 public:
  // No lookups for a target whose tls.Conn fields were not found (tls_peer_certificates 0).
  void SetTarget(pid_t pid, const sw_go_offsets& layout);
  void ForgetProcess(pid_t pid);
  std::optional<Identity> Lookup(const RequestConnection& connection);
  uint64_t read_errors() const { return reader_.read_errors(); }

 private:
  ClientCertReader reader_;
  std::unordered_map<pid_t, sw_go_offsets> layouts_;
};

}  // namespace stormwatch
