#include "agent/capture/connection_ends.h"

#include <sys/socket.h>

#include "agent/capture/remote_memory.h"
#include "agent/protocol/tcp_endpoint.h"
#include "bpf/events.h"

namespace stormwatch {
namespace {

// The *netFD under a net.Conn's data word when it is a TCP socket (see the header).
uint64_t TcpNetFd(pid_t pid, uint64_t conn_data) {
  GoInterface inner{};
  uint64_t candidates[2] = {0, conn_data};
  if (ReadRemote(pid, conn_data + SW_TLS_CONN_CONN, &inner)) candidates[0] = inner.data;
  for (uint64_t candidate : candidates) {
    uint64_t fd = 0;
    int64_t family_sotype[2];
    if (!ReadRemote(pid, candidate + SW_TCPCONN_FD, &fd) ||
        !ReadRemote(pid, fd + SW_NETFD_FAMILY, &family_sotype)) {
      continue;
    }
    if ((family_sotype[0] == AF_INET || family_sotype[0] == AF_INET6) &&
        family_sotype[1] == SOCK_STREAM) {
      return fd;
    }
  }
  return 0;
}

std::string ReadTcpAddr(pid_t pid, uint64_t tcp_addr) {
  struct {
    uint64_t ip_ptr, ip_len, ip_cap;
    int64_t port;
  } a{};
  if (!ReadRemote(pid, tcp_addr, &a) || a.port < 0 || a.port > 0xffff) return "";
  uint8_t ip[16];
  if (a.ip_len != 4 && a.ip_len != 16) return "";
  if (!ReadRemote(pid, a.ip_ptr, ip, a.ip_len)) return "";
  return FormatTcpEndpoint(std::span<const uint8_t>(ip, a.ip_len), static_cast<uint16_t>(a.port));
}

}  // namespace

ConnectionEnds ReadConnectionEnds(pid_t pid, uint64_t net_conn) {
  GoInterface conn{};
  struct {
    GoInterface local, peer;
  } addrs{};
  if (!ReadRemote(pid, net_conn, &conn)) return {};
  uint64_t fd = TcpNetFd(pid, conn.data);
  if (!fd || !ReadRemote(pid, fd + SW_NETFD_LADDR, &addrs)) return {};
  return {ReadTcpAddr(pid, addrs.local.data), ReadTcpAddr(pid, addrs.peer.data)};
}

const ConnectionEnds& Http1ConnectionEnds::Lookup(pid_t pid, uint64_t http_conn) {
  return cache_.FindOrInsert(
      {pid, http_conn},
      [&] {
        ConnectionEnds ends = ReadConnectionEnds(pid, http_conn + SW_HTTP_CONN_RWC);
        if (ends.peer.empty()) ++read_errors_;
        return ends;
      },
      [](const Key&, const ConnectionEnds&) {});
}

void Http1ConnectionEnds::ForgetProcess(pid_t pid) {
  for (auto it = cache_.begin(); it != cache_.end();) {
    it = it->first.first == pid ? cache_.Erase(it) : std::next(it);
  }
}

}  // namespace stormwatch
