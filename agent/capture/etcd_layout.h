// What the gRPC probes read inside etcd (bpf/grpc_server.bpf.h), derived from its own type data
// like the HTTP/2 layout (go_layout.h): go-grpc-prometheus's interceptor arguments, the context
// chain to the client's peer.Peer, the status behind a returned error, and etcd's request and
// response messages (etcdserverpb, found by package name so that module builds
// "go.etcd.io/etcd/api/v3/etcdserverpb" and GOPATH builds "go.etcd.io/etcd/api/etcdserverpb"
// both match). The message descriptors are those the interceptor's `req any` / `resp any` hold:
// *etcdserverpb.RangeRequest and so on, by their descriptor's address.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "agent/capture/go_layout.h"
#include "agent/capture/go_types.h"
#include "agent/core/etcd_request.h"
#include "agent/core/result.h"
#include "bpf/events.h"

namespace stormwatch {

struct EtcdMessageShape {
  uint64_t type_vaddr = 0;  // *T's descriptor, as in the file (the agent adds the load bias)
  EtcdMessage message = EtcdMessage::kOther;
  sw_grpc_message shape{};
};

struct EtcdLayout {
  sw_grpc_offsets offsets{};  // type addresses as in the file
  std::vector<EtcdMessageShape> messages;
  EtcdMessageFields fields;
  std::vector<std::string> caveats;  // parts turned off (client peer, status codes)
};

// Error: the interceptor's or the KV messages' fields are not there (`gap` names which).
Result<EtcdLayout> DeriveEtcdLayout(const GoTypes& types, LayoutGap* gap);

// go-grpc-prometheus's server interceptor closures, probed in etcd: the closure returned by
// (*ServerMetrics).UnaryServerInterceptor ("...UnaryServerInterceptor.func1") and, where the
// compiler inlined that method into the package's init (the package variable
// grpc_prometheus.UnaryServerInterceptor, Go 1.22+), its copy there ("...init.(*ServerMetrics)
// .UnaryServerInterceptor.func3"). `kind` is "Unary" or "Stream".
bool IsGrpcServerInterceptorClosure(std::string_view function_name, std::string_view kind);

}  // namespace stormwatch
