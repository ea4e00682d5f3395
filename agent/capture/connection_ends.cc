#include "agent/capture/connection_ends.h"

#include <sys/socket.h>

#include "agent/capture/remote_memory.h"
#include "agent/core/tcp_endpoint.h"
#include "bpf/events.h"

namespace stormwatch {
namespace {

// The *netFD under a net.Conn's data word when it is a TCP socket (see the header).
uint64_t TcpNetFd(pid_t pid, uint64_t conn_data, const sw_go_offsets& o) {
  GoInterface inner{};
  uint64_t candidates[2] = {0, conn_data};
  if (ReadRemote(pid, conn_data + o.tls_conn_conn, &inner)) candidates[0] = inner.data;
  for (uint64_t candidate : candidates) {
    uint64_t fd = 0;
    int64_t family = 0, sotype = 0;
    if (!ReadRemote(pid, candidate + o.tcpconn_fd, &fd) || !ReadRemote(pid, fd + o.netfd_family, &family) ||
        !ReadRemote(pid, fd + o.netfd_sotype, &sotype)) {
      continue;
    }
    if ((family == AF_INET || family == AF_INET6) && sotype == SOCK_STREAM) {
      return fd;
    }
  }
  return 0;
}

std::optional<TcpEndpoint> ReadTcpAddr(pid_t pid, uint64_t tcp_addr, const sw_go_offsets& o) {
  GoSlice ip_slice{};
  int64_t port = 0;
  if (!ReadRemote(pid, tcp_addr + o.tcpaddr_ip, &ip_slice) ||
      !ReadRemote(pid, tcp_addr + o.tcpaddr_port, &port) || port < 0 || port > 0xffff) {
    return std::nullopt;
  }
  uint8_t ip[16];
  if (ip_slice.len != 4 && ip_slice.len != 16) return std::nullopt;
  if (!ReadRemote(pid, ip_slice.ptr, ip, ip_slice.len)) return std::nullopt;
  return TcpEndpointOf(std::span<const uint8_t>(ip, ip_slice.len), static_cast<uint16_t>(port));
}

}  // namespace

ConnectionEnds ReadConnectionEnds(pid_t pid, uint64_t net_conn, const sw_go_offsets& o) {
  GoInterface conn{}, local{}, peer{};
  if (!o.read_addrs || !ReadRemote(pid, net_conn, &conn)) return {};
  uint64_t fd = TcpNetFd(pid, conn.data, o);
  if (!fd || !ReadRemote(pid, fd + o.netfd_laddr, &local) || !ReadRemote(pid, fd + o.netfd_raddr, &peer)) {
    return {};
  }
  return {ReadTcpAddr(pid, local.data, o), ReadTcpAddr(pid, peer.data, o)};
}

void Http1ConnectionEnds::SetTarget(pid_t pid, const sw_go_offsets& layout) {
  if (layout.read_addrs) {
    layouts_[pid] = layout;
  } else {
    layouts_.erase(pid);
  }
}

const ConnectionEnds& Http1ConnectionEnds::Lookup(pid_t pid, uint64_t http_conn) {
  static const ConnectionEnds kUnknown;
  auto layout = layouts_.find(pid);
  if (layout == layouts_.end()) return kUnknown;
  return cache_.FindOrInsert(
      {pid, http_conn},
      [&] {
        ConnectionEnds ends = ReadConnectionEnds(pid, http_conn + layout->second.http_conn_rwc, layout->second);
        if (!ends.peer) ++read_errors_;
        return ends;
      },
      [](const Key&, const ConnectionEnds&) {});
}

void Http1ConnectionEnds::ForgetProcess(pid_t pid) {
  layouts_.erase(pid);
  for (auto it = cache_.begin(); it != cache_.end();) {
    it = it->first.first == pid ? cache_.Erase(it) : std::next(it);
  }
}

}  // namespace stormwatch
