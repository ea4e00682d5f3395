// The two ends (server ip:port, client ip:port) of an HTTP/1.1 connection, read from the
// target's memory with process_vm_readv once per connection and kept until its close event.
// HTTP/2 requests get theirs from the BPF program at every request instead (HTTP/2 has no
// close probe, and Go reuses a closed connection's memory for the next one). The chain is
// the one bpf/gohttp.bpf.c walks, at the target's offsets (sw_go_offsets, from its type data):
//
//   *net/http.conn .rwc (net.Conn) -> *tls.Conn .conn (net.Conn) or a bare *net.TCPConn
//     -> .fd *netFD -> laddr / raddr (net.Addr) -> *net.TCPAddr{IP, Port}
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include <unordered_map>

#include "agent/core/bounded_lru.h"
#include "agent/core/tcp_endpoint.h"
#include "bpf/events.h"

namespace stormwatch {

struct ConnectionEnds {
  std::optional<TcpEndpoint> local;  // nullopt when unknown
  std::optional<TcpEndpoint> peer;
};

// Reads the ends from `pid`'s memory, `net_conn` being the address of a net.Conn interface
// value (itab, data). Both nullopt when the connection is not TCP or cannot be read.
ConnectionEnds ReadConnectionEnds(pid_t pid, uint64_t net_conn, const sw_go_offsets& layout);

class Http1ConnectionEnds {
 public:
  explicit Http1ConnectionEnds(size_t capacity = 16384) : cache_(capacity) {}

  // A target's layout; its connections are not read without one (read_addrs 0).
  void SetTarget(pid_t pid, const sw_go_offsets& layout);
  // The ends of the *net/http.conn at `http_conn`.
  const ConnectionEnds& Lookup(pid_t pid, uint64_t http_conn);
  void OnClose(pid_t pid, uint64_t http_conn) { cache_.Erase({pid, http_conn}); }
  void ForgetProcess(pid_t pid);

  uint64_t read_errors() const { return read_errors_; }

 private:
  using Key = std::pair<pid_t, uint64_t>;
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return std::hash<uint64_t>{}(k.second ^ (uint64_t(k.first) << 48));
    }
  };
  BoundedLru<Key, ConnectionEnds, KeyHash> cache_;
  std::unordered_map<pid_t, sw_go_offsets> layouts_;
  uint64_t read_errors_ = 0;
};

}  // namespace stormwatch
