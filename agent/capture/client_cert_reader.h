// Who is behind a TLS connection that carries no bearer token: the client certificate the
// Go server verified during the handshake (user = CN, groups = O, as kube-apiserver's x509
// authenticator). Read from the target's memory with process_vm_readv once per connection
// (the HTTP/2 request event gives the *serverConn), so it costs no probe hit.
//
//   serverConn.conn (net.Conn interface: itab, data) -> *tls.Conn
//   tls.Conn.peerCertificates []*x509.Certificate -> [0] -> Certificate.Raw []byte (DER)
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "agent/core/request_record.h"
#include "agent/core/result.h"

namespace stormwatch {

struct GoTlsLayout {
  uint32_t server_conn_conn = 16;     // serverConn.conn (both HTTP/2 stacks)
  uint32_t tls_peer_certificates = 0;  // tls.Conn.peerCertificates
};

// tls.Conn's layout per Go release (reflect offsets, checked by tests/unit for each toolchain).
std::optional<GoTlsLayout> LookupGoTlsLayout(std::string_view go_version);

struct CertSubject {
  std::string common_name;
  std::vector<std::string> organizations;
};

// DER -> subject CN and O values (OpenSSL). Error on anything that is not an X.509 cert.
Result<CertSubject> ParseCertificateSubject(std::string_view der);

class ClientCertReader {
 public:
  explicit ClientCertReader(size_t capacity = 4096) : capacity_(capacity) {}

  // nullopt: no client certificate on that connection (or it could not be read).
  std::optional<CertSubject> Read(pid_t pid, uint64_t server_conn, const GoTlsLayout& layout);
  void ForgetProcess(pid_t pid);

  uint64_t read_errors() const { return read_errors_; }

 private:
  struct Entry {
    uint64_t tls_conn = 0;   // *tls.Conn and its peerCertificates array: tell a new
    uint64_t peers_ptr = 0;  // connection at a reused address apart
    uint64_t peers_len = 0;
    std::optional<CertSubject> subject;
  };
  using Key = std::pair<pid_t, uint64_t>;
  struct KeyHash {
    size_t operator()(const Key& k) const { return std::hash<uint64_t>{}(k.second ^ (uint64_t(k.first) << 48)); }
  };
  size_t capacity_;
  std::list<Key> order_;
  std::unordered_map<Key, std::pair<Entry, std::list<Key>::iterator>, KeyHash> cache_;
  uint64_t read_errors_ = 0;
};

// The identity of connections without a token, for every traced process: the process's Go
// release picks the layout; CN becomes the user, O values the groups.
class ClientCertIdentities {
 public:
  void SetTarget(pid_t pid, std::string_view go_version);  // unproven release: no lookups
  void ForgetProcess(pid_t pid);
  std::optional<Identity> Lookup(pid_t pid, uint64_t server_conn);
  uint64_t read_errors() const { return reader_.read_errors(); }

 private:
  ClientCertReader reader_;
  std::unordered_map<pid_t, GoTlsLayout> layouts_;
};

}  // namespace stormwatch
