/* etcd's gRPC server, seen at go-grpc-prometheus's interceptors (included by gohttp.bpf.c).
 *
 * Probe budget: 2 hits per unary call. (*ServerMetrics).UnaryServerInterceptor.func1 is the
 * closure that counts grpc_server_handled_total: on entry it holds the decoded request message
 * (req any) and the call's context (the client's peer.Peer), at each RET the response message
 * and the error. One closure serves every service of the server, so no per-method probe is
 * needed, and it runs for both of etcd's transports (TLS through net/http's HTTP/2 server,
 * plaintext through gRPC's own), which is why etcd targets get these probes instead of the
 * HTTP/2 ones (which would add two more hits per call). Streams (Watch, LeaseKeepAlive) are
 * seen at StreamServerInterceptor.func1: when they open and close.
 *
 * Go register ABI (amd64), unary closure: ctx in RAX/RBX, req in RCX/RDI, info in RSI; results
 * resp in RAX/RBX, err in RCX/RDI. Stream closure: srv RAX/RBX, ss RCX/RDI, info RSI; result
 * err RAX/RBX. R14 holds the goroutine: the key that pairs entry and return in user space.
 *
 * Messages on open streams, 1 hit each at the etcd function that handles them (no return):
 * mvcc.(*watchStream).Watch(id, key, end []byte, startRev, fcs...) has ws RAX, id RBX, key
 * RCX/RDI (ptr, len), end R8/R9, startRev R11; (*watchStream).Cancel(id) ws RAX, id RBX;
 * etcdserver.(*EtcdServer).LeaseRenew(ctx, id) ctx RBX/RCX (the LeaseKeepAlive stream's
 * context: the client's peer), id RDI. mvcc.(*watchableStore).NewWatchStream's RETs (1 hit per
 * Watch stream): the watch stream it made, on the goroutine that opened the gRPC stream, so that
 * user space names the client of the stream's watch messages. */

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, SW_MAX_TARGET_SLOTS);
  __type(key, __u32);
  __type(value, struct sw_grpc_offsets);
} grpc_offsets SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, SW_GRPC_MESSAGE_TYPES * 16);
  __type(key, struct sw_grpc_message_key);
  __type(value, struct sw_grpc_message);
} grpc_messages SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct sw_grpc_call);
} grpc_call_scratch SEC(".maps");

struct go_iface {
  __u64 itab;
  __u64 data;
};

struct ctx_walk {
  const struct sw_grpc_offsets *off;
  struct go_iface cur;
  __u64 peer; /* *peer.Peer, when found */
};

/* One level of the context chain: is it the valueCtx holding the peer? Else go to its parent. */
static long ctx_walk_one(__u64 i, void *vctx) {
  struct ctx_walk *w = vctx;
  const struct sw_grpc_offsets *off = w->off;
  __u64 type = 0, key_type = 0;
  if (!w->cur.itab || !w->cur.data ||
      bpf_probe_read_user(&type, sizeof(type), (void *)(w->cur.itab + 8)))
    return 1;
  if (type == off->value_ctx_type &&
      !bpf_probe_read_user(&key_type, sizeof(key_type), (void *)(w->cur.data + off->value_ctx_key)) &&
      key_type == off->peer_key_type) {
    bpf_probe_read_user(&w->peer, sizeof(w->peer), (void *)(w->cur.data + off->value_ctx_val + 8));
    return 1;
  }
  if (bpf_probe_read_user(&w->cur, sizeof(w->cur), (void *)w->cur.data)) return 1;
  return 0;
}

static __always_inline void read_grpc_peer(struct go_iface ctx_iface, const struct sw_grpc_offsets *off,
                                           struct sw_grpc_call *e) {
  e->peer.ip_len = 0;
  e->client_cert_der = 0;
  e->client_cert_der_len = 0;
  if (!off->value_ctx_type) return;
  struct ctx_walk w = {.off = off, .cur = ctx_iface};
  bpf_loop(SW_MAX_CTX_DEPTH, ctx_walk_one, &w, 0);
  if (!w.peer) return;
  struct go_iface addr = {}, auth = {};
  if (!bpf_probe_read_user(&addr, sizeof(addr), (void *)(w.peer + off->peer_addr)) && addr.data) {
    struct {
      __u64 ip_ptr, ip_len;
    } ip = {};
    __s64 port = 0;
    if (!bpf_probe_read_user(&ip, sizeof(ip), (void *)(addr.data + off->tcpaddr_ip)) &&
        !bpf_probe_read_user(&port, sizeof(port), (void *)(addr.data + off->tcpaddr_port)) &&
        port > 0 && port <= 0xffff && (ip.ip_len == 4 || ip.ip_len == 16) &&
        !bpf_probe_read_user(e->peer.ip, ip.ip_len == 4 ? 4 : 16, (void *)ip.ip_ptr)) {
      e->peer.ip_len = ip.ip_len;
      e->peer.port = port;
    }
  }
  struct {
    __u64 ptr, len;
  } peers = {}, raw = {};
  __u64 cert = 0;
  if (!off->tls_info_peer_certificates ||
      bpf_probe_read_user(&auth, sizeof(auth), (void *)(w.peer + off->peer_auth_info)) || !auth.data ||
      bpf_probe_read_user(&peers, sizeof(peers), (void *)(auth.data + off->tls_info_peer_certificates)) ||
      peers.len == 0 || peers.len > 16 || bpf_probe_read_user(&cert, sizeof(cert), (void *)peers.ptr) ||
      !cert || bpf_probe_read_user(&raw, sizeof(raw), (void *)(cert + off->x509_raw)) ||
      raw.len == 0 || raw.len > 65536)
    return;
  e->client_cert_der = raw.ptr;
  e->client_cert_der_len = raw.len;
}

/* Copies the byte slice at `slice_at` (a Go []byte header) into out; returns bytes copied. */
static __always_inline __u16 copy_key(__u64 slice_at, __u8 *out, __u32 *total) {
  struct {
    __u64 ptr, len;
  } s = {};
  *total = 0;
  if (bpf_probe_read_user(&s, sizeof(s), (void *)slice_at) || s.len == 0 || s.len > (1u << 30)) return 0;
  *total = s.len;
  __u32 n = s.len > SW_ETCD_KEY_MAX ? SW_ETCD_KEY_MAX : (__u32)s.len;
  if (bpf_probe_read_user(out, n & (SW_ETCD_KEY_MAX - 1 | SW_ETCD_KEY_MAX), (void *)s.ptr)) return 0;
  return n;
}

static __always_inline void read_request_message(__u32 slot, __u64 type, __u64 data,
                                                  const struct sw_grpc_offsets *off,
                                                  struct sw_grpc_call *e) {
  e->msg_type = type;
  e->msg_len = 0;
  e->key_len = e->end_len = 0;
  e->key_total = e->end_total = 0;
  struct sw_grpc_message_key k = {.slot = slot, .type = type};
  const struct sw_grpc_message *m = bpf_map_lookup_elem(&grpc_messages, &k);
  if (!m || !data) return;
  __u32 size = m->size > SW_GRPC_MSG_MAX ? SW_GRPC_MSG_MAX : m->size;
  if (size && !bpf_probe_read_user(e->msg, size & (SW_GRPC_MSG_MAX - 1 | SW_GRPC_MSG_MAX), (void *)data))
    e->msg_len = size;
  __u64 keyed = 0; /* the struct whose Key is copied */
  __u16 key_off = m->key_off, end_off = m->end_off;
  if (m->kind == SW_MSG_KEYED) {
    keyed = data;
  } else if (m->kind == SW_MSG_TXN) {
    /* kube-apiserver's writes: Txn{Compare: [ModRevision(key) = rev], Success: [Put|Delete]}. */
    struct {
      __u64 ptr, len;
    } list = {};
    __u64 first = 0;
    key_off = off->compare_key;
    end_off = 0xffff;
    if (!bpf_probe_read_user(&list, sizeof(list), (void *)(data + off->txn_compare)) && list.len > 0 &&
        !bpf_probe_read_user(&first, sizeof(first), (void *)list.ptr)) {
      keyed = first;
    } else if (!bpf_probe_read_user(&list, sizeof(list), (void *)(data + off->txn_success)) &&
               list.len > 0 && !bpf_probe_read_user(&first, sizeof(first), (void *)list.ptr) && first) {
      struct go_iface op = {};
      __u64 inner = 0;
      if (!bpf_probe_read_user(&op, sizeof(op), (void *)(first + off->request_op_request)) && op.data &&
          !bpf_probe_read_user(&inner, sizeof(inner), (void *)op.data)) {
        keyed = inner;
        key_off = 0; /* Range, Put and DeleteRange requests all start with their Key */
      }
    }
  }
  if (!keyed) return;
  e->key_len = copy_key(keyed + key_off, e->key, &e->key_total);
  if (end_off != 0xffff) e->end_len = copy_key(keyed + end_off, e->end, &e->end_total);
}

/* Starts the scratch event of a call or stream message: header set, everything else empty. */
static __always_inline struct sw_grpc_call *begin_call_event(struct pt_regs *ctx, __u8 kind,
                                                                 const struct sw_grpc_offsets **off) {
  __u32 slot = (__u32)bpf_get_attach_cookie(ctx);
  *off = bpf_map_lookup_elem(&grpc_offsets, &slot);
  __u32 zero = 0;
  struct sw_grpc_call *e = bpf_map_lookup_elem(&grpc_call_scratch, &zero);
  if (!*off || !e) return 0;
  e->hdr.type = SW_EV_GRPC_CALL;
  e->hdr.tgid = bpf_get_current_pid_tgid() >> 32;
  e->hdr.ts_ns = bpf_ktime_get_ns();
  e->hdr.conn = ctx->r14;
  e->hdr.stream_id = 0;
  e->hdr.target = slot;
  e->kind = kind;
  e->method_len = 0;
  e->msg_type = 0;
  e->msg_len = e->key_len = e->end_len = 0;
  e->key_total = e->end_total = 0;
  e->peer.ip_len = 0;
  e->client_cert_der = 0;
  e->client_cert_der_len = 0;
  e->stream = 0;
  e->id = 0;
  e->rev = 0;
  return e;
}

static __always_inline void end_call_event(struct sw_grpc_call *e) {
  if (bpf_ringbuf_output(&events, e, sizeof(*e), BPF_RB_NO_WAKEUP)) count(&drops, SW_DROP_RINGBUF_FULL);
}

static __always_inline int emit_grpc_call(struct pt_regs *ctx, __u8 kind) {
  const struct sw_grpc_offsets *off;
  struct sw_grpc_call *e = begin_call_event(ctx, kind, &off);
  if (!e) return 0;
  struct go_string method = {};
  __u32 method_at = kind == SW_GRPC_UNARY ? off->unary_info_method : off->stream_info_method;
  if (!bpf_probe_read_user(&method, sizeof(method), (void *)(ctx->si + method_at)) && method.len > 0) {
    __u32 n = method.len > SW_GRPC_METHOD_MAX ? SW_GRPC_METHOD_MAX : (__u32)method.len;
    if (!bpf_probe_read_user(e->method, n & 0x7f, (void *)method.ptr)) e->method_len = n;
  }
  if (kind == SW_GRPC_UNARY) {
    struct go_iface call_ctx = {.itab = ctx->ax, .data = ctx->bx};
    read_grpc_peer(call_ctx, off, e);
    read_request_message(e->hdr.target, ctx->cx, ctx->di, off, e);
  } else {
    /* A stream's context is behind its ServerStream (ss, RCX/RDI): grpc's own or etcd's wrapper. */
    struct go_iface ss = {.itab = ctx->cx, .data = ctx->di}, stream_ctx = {};
    __u64 ss_type = 0;
    if (ss.itab && ss.data && !bpf_probe_read_user(&ss_type, sizeof(ss_type), (void *)(ss.itab + 8)) &&
        off->stream_with_ctx_type && ss_type == off->stream_with_ctx_type &&
        !bpf_probe_read_user(&ss, sizeof(ss), (void *)(ss.data + off->stream_with_ctx_inner)) && ss.itab)
      bpf_probe_read_user(&ss_type, sizeof(ss_type), (void *)(ss.itab + 8)); /* the wrapped stream */
    if (off->server_stream_type && ss_type == off->server_stream_type && ss.data &&
        !bpf_probe_read_user(&stream_ctx, sizeof(stream_ctx), (void *)(ss.data + off->server_stream_ctx)))
      read_grpc_peer(stream_ctx, off, e);
  }
  end_call_event(e);
  return 0;
}

struct kvs_sum {
  __u64 kvs;
  __u64 bytes;
  __u32 read;
  __u32 key_len_at;
  __u32 value_len_at;
};

static long sum_one_kv(__u64 i, void *vctx) {
  struct kvs_sum *s = vctx;
  __u64 kv = 0, key_len = 0, value_len = 0;
  if (bpf_probe_read_user(&kv, sizeof(kv), (void *)(s->kvs + i * 8)) || !kv ||
      bpf_probe_read_user(&key_len, sizeof(key_len), (void *)(kv + s->key_len_at)) ||
      bpf_probe_read_user(&value_len, sizeof(value_len), (void *)(kv + s->value_len_at)))
    return 1;
  s->bytes += key_len + value_len;
  s->read += 1;
  return 0;
}

/* The gRPC status code of a returned error (status.FromError: a non-status error is Unknown). */
static __always_inline __s32 grpc_code(__u64 err_itab, __u64 err_data, const struct sw_grpc_offsets *off) {
  if (!err_itab) return 0;
  __u64 type = 0, status = 0, proto = 0;
  __s32 code = -1;
  if (!off->status_error_type || bpf_probe_read_user(&type, sizeof(type), (void *)(err_itab + 8)))
    return -1;
  if (type != off->status_error_type) return 2; /* codes.Unknown */
  if (bpf_probe_read_user(&status, sizeof(status), (void *)(err_data + off->status_error_status)) || !status)
    return -1;
  if (off->status_direct)
    proto = status;
  else if (bpf_probe_read_user(&proto, sizeof(proto), (void *)(status + off->status_proto)))
    return -1;
  if (!proto || bpf_probe_read_user(&code, sizeof(code), (void *)(proto + off->status_code))) return -1;
  return code;
}

static __always_inline int emit_grpc_done(struct pt_regs *ctx, __u8 kind) {
  __u32 slot = (__u32)bpf_get_attach_cookie(ctx);
  const struct sw_grpc_offsets *off = bpf_map_lookup_elem(&grpc_offsets, &slot);
  if (!off) return 0;
  struct sw_grpc_done e = {};
  e.hdr.type = SW_EV_GRPC_DONE;
  e.hdr.tgid = bpf_get_current_pid_tgid() >> 32;
  e.hdr.ts_ns = bpf_ktime_get_ns();
  e.hdr.conn = ctx->r14;
  e.hdr.target = slot;
  e.kind = kind;
  if (kind == SW_GRPC_STREAM) {
    e.code = grpc_code(ctx->ax, ctx->bx, off);
  } else {
    e.code = grpc_code(ctx->cx, ctx->di, off);
    __u64 type = ctx->ax, data = ctx->bx;
    struct sw_grpc_message_key k = {.slot = slot, .type = type};
    const struct sw_grpc_message *m = type && data ? bpf_map_lookup_elem(&grpc_messages, &k) : 0;
    if (m) {
      e.msg_type = type;
      __u32 size = m->size > SW_GRPC_RESP_MAX ? SW_GRPC_RESP_MAX : m->size;
      if (size && !bpf_probe_read_user(e.msg, size & (SW_GRPC_RESP_MAX - 1 | SW_GRPC_RESP_MAX), (void *)data))
        e.msg_len = size;
      struct {
        __u64 ptr, len;
      } kvs = {};
      if (m->kind == SW_MSG_RANGE_RESP &&
          !bpf_probe_read_user(&kvs, sizeof(kvs), (void *)(data + off->range_resp_kvs)) && kvs.len > 0) {
        struct kvs_sum s = {.kvs = kvs.ptr, .key_len_at = off->kv_key + 8, .value_len_at = off->kv_value + 8};
        __u32 n = kvs.len > SW_MAX_KVS_READ ? SW_MAX_KVS_READ : (__u32)kvs.len;
        bpf_loop(n, sum_one_kv, &s, 0);
        e.kvs_read = s.read;
        e.kv_bytes = s.bytes;
      }
    }
  }
  if (bpf_ringbuf_output(&events, &e, sizeof(e), BPF_RB_NO_WAKEUP)) count(&drops, SW_DROP_RINGBUF_FULL);
  return 0;
}

SEC("uprobe")
int BPF_UPROBE(grpc_unary_enter) {
  if (stack_will_grow(ctx)) return 0;
  count(&hits, 6);
  return emit_grpc_call(ctx, SW_GRPC_UNARY);
}

SEC("uprobe")
int BPF_UPROBE(grpc_unary_return) {
  count(&hits, 7);
  return emit_grpc_done(ctx, SW_GRPC_UNARY);
}

SEC("uprobe")
int BPF_UPROBE(grpc_stream_enter) {
  if (stack_will_grow(ctx)) return 0;
  count(&hits, 8);
  return emit_grpc_call(ctx, SW_GRPC_STREAM);
}

SEC("uprobe")
int BPF_UPROBE(grpc_stream_return) {
  count(&hits, 9);
  return emit_grpc_done(ctx, SW_GRPC_STREAM);
}

/* Copies `len` bytes at `ptr` (a Go []byte's data) into out; returns bytes copied. */
static __always_inline __u16 copy_bytes(__u64 ptr, __u64 len, __u8 *out, __u32 *total) {
  *total = 0;
  if (!ptr || len == 0 || len > (1u << 30)) return 0;
  *total = len;
  __u32 n = len > SW_ETCD_KEY_MAX ? SW_ETCD_KEY_MAX : (__u32)len;
  if (bpf_probe_read_user(out, n & (SW_ETCD_KEY_MAX - 1 | SW_ETCD_KEY_MAX), (void *)ptr)) return 0;
  return n;
}

SEC("uprobe")
int BPF_UPROBE(etcd_watch_create) {
  if (stack_will_grow(ctx)) return 0;
  count(&hits, 10);
  const struct sw_grpc_offsets *off;
  struct sw_grpc_call *e = begin_call_event(ctx, SW_GRPC_WATCH_CREATE, &off);
  if (!e) return 0;
  e->stream = ctx->ax;
  e->id = (__s64)ctx->bx;
  e->rev = (__s64)ctx->r11;
  e->key_len = copy_bytes(ctx->cx, ctx->di, e->key, &e->key_total);
  e->end_len = copy_bytes(ctx->r8, ctx->r9, e->end, &e->end_total);
  end_call_event(e);
  return 0;
}

SEC("uprobe")
int BPF_UPROBE(etcd_watch_cancel) {
  if (stack_will_grow(ctx)) return 0;
  count(&hits, 11);
  const struct sw_grpc_offsets *off;
  struct sw_grpc_call *e = begin_call_event(ctx, SW_GRPC_WATCH_CANCEL, &off);
  if (!e) return 0;
  e->stream = ctx->ax;
  e->id = (__s64)ctx->bx;
  end_call_event(e);
  return 0;
}

SEC("uprobe")
int BPF_UPROBE(etcd_lease_renew) {
  if (stack_will_grow(ctx)) return 0;
  count(&hits, 12);
  const struct sw_grpc_offsets *off;
  struct sw_grpc_call *e = begin_call_event(ctx, SW_GRPC_LEASE_KEEPALIVE, &off);
  if (!e) return 0;
  e->id = (__s64)ctx->di;
  struct go_iface call_ctx = {.itab = ctx->bx, .data = ctx->cx};
  read_grpc_peer(call_ctx, off, e);
  end_call_event(e);
  return 0;
}

/* NewWatchStream() WatchStream returned: the interface's data (RBX) is the *watchStream. */
SEC("uprobe")
int BPF_UPROBE(etcd_watch_stream_return) {
  count(&hits, 13);
  const struct sw_grpc_offsets *off;
  struct sw_grpc_call *e = begin_call_event(ctx, SW_GRPC_WATCH_STREAM, &off);
  if (!e) return 0;
  e->stream = ctx->bx;
  end_call_event(e);
  return 0;
}
