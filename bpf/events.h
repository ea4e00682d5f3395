/* Everything that crosses the ring buffer between bpf/ and agent/capture.
 * Plain C, shared by the BPF programs and the agent: change both sides together. */
#ifndef STORMWATCH_BPF_EVENTS_H
#define STORMWATCH_BPF_EVENTS_H

#ifndef __VMLINUX_H__
#include <linux/types.h> /* user space; BPF programs get the types from vmlinux.h */
#endif

enum sw_event_type {
  SW_EV_H2_REQUEST = 1,   /* decoded request header fields of one HTTP/2 stream */
  SW_EV_H2_RESPONSE = 2,  /* the handler of one HTTP/2 stream finished */
  SW_EV_TLS_DATA = 3,     /* HTTP/1.1: bytes one server connection read returned or write was given */
  SW_EV_TLS_CLOSE = 4,    /* HTTP/1.1: net/http.(*conn).close: the connection is over */
  SW_EV_GRPC_CALL = 5,    /* etcd: a gRPC call entered the server's interceptor (the request) */
  SW_EV_GRPC_DONE = 6,    /* etcd: the interceptor returned (the response and status code) */
};

/* Why an event, or part of one, was lost. Indexes the per-CPU drop counters. */
enum sw_drop_cause {
  SW_DROP_RINGBUF_FULL = 0,     /* bpf_ringbuf_* had no room: the whole event is lost */
  SW_DROP_FIELDS_TRUNCATED = 1, /* more header fields than SW_MAX_FIELDS, or data area full */
  SW_DROP_VALUE_TRUNCATED = 2,  /* one header value longer than SW_MAX_VALUE */
  SW_DROP_READ_FAILED = 3,      /* bpf_probe_read_user failed (paged out, bad offsets) */
  SW_DROP_CAUSE_COUNT = 4,
};

#define SW_MAX_FIELDS 48
#define SW_MAX_NAME 255       /* longest header name kept */
#define SW_MAX_VALUE 4095     /* longest header value kept (a bound SA JWT is ~1 KB) */
#define SW_DATA_LIMIT 16384   /* header data area; a field is written only if it starts below */
#define SW_DATA_SIZE (SW_DATA_LIMIT + 4 + SW_MAX_NAME + SW_MAX_VALUE + 1) /* verifier headroom */

/* Where to find things inside one Go binary: struct field offsets and the header map's layout,
 * read per target from the binary's own runtime type descriptors (agent/capture/go_layout.cc);
 * one copy per HTTP/2 stack of the target, picked by the uprobe's attach cookie. */
struct sw_go_offsets {
  /* (*serverConn).processHeaders(f *MetaHeadersFrame): receiver in RAX, f in RBX. */
  __u32 mhf_headers_frame; /* MetaHeadersFrame.HeadersFrame (*HeadersFrame, embedded) */
  __u32 mhf_fields;        /* MetaHeadersFrame.Fields (slice): ptr, len */
  __u32 frame_stream_id;   /* HeadersFrame.FrameHeader.StreamID */
  __u32 field_size;        /* sizeof(hpack.HeaderField) */
  __u32 field_name;        /* HeaderField.Name (string) */
  __u32 field_value;       /* HeaderField.Value (string) */
  __u32 sc_conn;           /* serverConn.conn: the connection's net.Conn (itab, data) */
  /* (*responseWriter).handlerDone(): receiver in RAX. */
  __u32 rw_rws;            /* responseWriter.rws */
  __u32 rws_stream;        /* responseWriterState.stream */
  __u32 rws_status;        /* responseWriterState.status (int) */
  __u32 rws_wrote_bytes;   /* responseWriterState.wroteBytes (int64) */
  __u32 stream_sc;         /* stream.sc (*serverConn) */
  __u32 stream_id;         /* stream.id (uint32) */
  __u32 rws_req;           /* responseWriterState.req */
  __u32 rws_req_inline;    /* 1: req is the request itself (Go 1.27's ServerRequest), 0: a pointer */
  __u32 req_method;        /* the request's Method (string) */
  __u32 rws_bw;            /* responseWriterState.bw (*bufio.Writer) */
  __u32 bufio_buf;         /* bufio.Writer.buf ([]byte) */
  __u32 bufio_n;           /* bufio.Writer.n (int) */
  __u32 rws_handler_header; /* responseWriterState.handlerHeader (http.Header: a map) */
  __u32 capture_write_bodies; /* kube-apiserver yes (set per target), etcd no; 0 without the fields */
  __u32 tls_peer_certificates; /* tls.Conn.peerCertificates ([]*x509.Certificate); 0: not read */
  __u32 x509_raw;          /* x509.Certificate.Raw ([]byte) */
  /* Go's net package. A server connection's net.Conn is a *tls.Conn (whose conn field is the
   * net.Conn beneath it) or, without TLS, a *net.TCPConn:
   *   *net.TCPConn -> conn.fd *netFD -> laddr, raddr (net.Addr) -> *net.TCPAddr{IP []byte; Port} */
  __u32 read_addrs;        /* 1 when the fields below were all found */
  __u32 tls_conn_conn;     /* tls.Conn.conn (net.Conn) */
  __u32 tcpconn_fd;        /* net.TCPConn.conn.fd (*netFD) */
  __u32 netfd_family;      /* netFD.family (int) */
  __u32 netfd_sotype;      /* netFD.sotype (int) */
  __u32 netfd_laddr;       /* netFD.laddr (net.Addr) */
  __u32 netfd_raddr;       /* netFD.raddr (net.Addr) */
  __u32 tcpaddr_ip;        /* TCPAddr.IP ([]byte) */
  __u32 tcpaddr_port;      /* TCPAddr.Port (int) */
  /* net/http's HTTP/1.1 server. */
  __u32 conn_reader_conn;  /* connReader.conn (*conn): +0 up to Go 1.25, after rwc from 1.26 */
  __u32 http_conn_rwc;     /* conn.rwc (net.Conn) */
  /* The response header map (map[string][]string), from its map type descriptor. */
  __u32 map_swiss;         /* 1: Swiss tables (Go 1.24+), 0: buckets (Go <= 1.23) */
  __u32 map_dir_ptr;       /* Swiss: maps.Map.dirPtr (a group, or the table directory) */
  __u32 map_dir_len;       /* Swiss: maps.Map.dirLen (0: one group, no tables) */
  __u32 table_groups;      /* Swiss: maps.table.groups.data */
  __u32 table_mask;        /* Swiss: maps.table.groups.lengthMask */
  __u32 group_size;        /* bytes of one group (Swiss) or bucket; 0: the map is not read */
  __u32 keys_offset;       /* slot i's key at keys_offset + i * key_stride in a group/bucket */
  __u32 key_stride;
  __u32 elems_offset;      /* slot i's elem at elems_offset + i * elem_stride */
  __u32 elem_stride;
};

/* runtime.hmap (Go 1.12-1.23; Go 1.24 replaced it), checked against the binary's type data. */
#define SW_HMAP_COUNT 0
#define SW_HMAP_FLAGS 8
#define SW_HMAP_B 9
#define SW_HMAP_BUCKETS 16
#define SW_HMAP_OLDBUCKETS 24
#define SW_MAP_GROUP_MAX 512 /* largest bucket/group the BPF program copies */

/* One end of a TCP connection, as Go's net.TCPAddr holds it. ip_len 0: unknown (not TCP, or
 * unreadable); 4 or 16 (an IPv4 peer of a dual-stack listener is 16 bytes, ::ffff:a.b.c.d). */
struct sw_sock_addr {
  __u8 ip_len;
  __u8 pad;
  __u16 port;
  __u8 ip[16];
};

struct sw_event_header {
  __u32 type;        /* enum sw_event_type */
  __u32 tgid;
  __u64 ts_ns;       /* bpf_ktime_get_ns */
  __u64 conn;        /* *serverConn in the target: one HTTP/2 connection */
  __u32 stream_id;
  __u32 target;      /* attach cookie: the agent's target slot */
};

/* Followed by data_len bytes of fields, each: __u16 name_len, __u16 value_len, name, value. */
struct sw_h2_request {
  struct sw_event_header hdr;
  __u16 field_count;     /* fields in the frame */
  __u16 fields_kept;     /* fields copied into data */
  __u32 data_len;
  struct sw_sock_addr local; /* the server's end of the connection */
  struct sw_sock_addr peer;  /* the client's end, as the server sees it */
  /* A request without an Authorization header: where its connection's client certificate
   * (tls.Conn.peerCertificates[0].Raw, DER) sits in the target, found while the connection
   * surely lives. 0: none, or the request carries a token. */
  __u64 client_cert_der;
  __u32 client_cert_der_len;
  __u32 pad;
  __u8 data[SW_DATA_SIZE];
};

/* Response headers kept from the handler's header map (kube-apiserver's APF headers and a
 * 429's Retry-After), and the start of a write's response body while it still sits unflushed in
 * the stream's 4 KB bufio.Writer (bodies that fit: most single objects), for object facts
 * (generation, deletionTimestamp, finalizers). */
#define SW_UID_MAX 48
#define SW_RETRY_AFTER_MAX 16
#define SW_BODY_PREFIX 4096
struct sw_h2_response {
  struct sw_event_header hdr;
  __s64 status;          /* 0: the handler wrote no header; net/http then sends 200 */
  __s64 wrote_bytes;     /* response body bytes written by the handler */
  __u8 priority_level_uid_len;
  __u8 flow_schema_uid_len;
  __u8 retry_after_len;
  __u8 header_walk_incomplete; /* the header map was too big or changing: values may be missing */
  __u32 body_len;        /* bytes in body (0: not a write, or the body was flushed already) */
  char priority_level_uid[SW_UID_MAX];
  char flow_schema_uid[SW_UID_MAX];
  char retry_after[SW_RETRY_AFTER_MAX];
  __u8 body[SW_BODY_PREFIX];
};

/* HTTP/1.1: the plaintext of one read or write of net/http's server connection, above TLS
 * (hdr.conn = the *net/http.conn, stream_id 0). A bounded prefix of the call's bytes is kept
 * (none for a write that continues a response already started: its head went out), plus its
 * last bytes so the user-space parser sees a chunked body's terminating "0\r\n\r\n" without the
 * middle of a large response. */
#define SW_TLS_CAPTURE 4096
#define SW_TLS_TAIL 16
enum sw_tls_direction {
  SW_TLS_READ = 0,   /* from the peer: requests, on the server side */
  SW_TLS_WRITE = 1,  /* to the peer: responses, on the server side */
};
struct sw_tls_data {
  struct sw_event_header hdr;
  __u32 direction;   /* enum sw_tls_direction */
  __u32 total_len;   /* bytes the call moved (Read: returned n; Write: len(b)) */
  __u32 captured;    /* bytes in data: min(total_len, SW_TLS_CAPTURE) */
  __u32 tail_len;    /* bytes in tail: the call's last bytes, when total_len > captured */
  __u8 tail[SW_TLS_TAIL];
  __u8 data[SW_TLS_CAPTURE];
};
struct sw_tls_close {
  struct sw_event_header hdr;
};

/* ---- etcd: gRPC calls at go-grpc-prometheus's server interceptor (bpf/grpc_server.bpf.h) ----
 * The interceptor that counts etcd's grpc_server_handled_total sees every call of every
 * service: the decoded request message on entry, the response message and error at its RETs,
 * and the request's context holds the client's peer (address, TLS certificates). Go structs
 * are read through offsets derived from the binary's type data (agent/capture/etcd_layout.cc). */
#define SW_GRPC_METHOD_MAX 80    /* "/etcdserverpb.KV/Range": info.FullMethod */
#define SW_GRPC_MSG_MAX 128      /* bytes of the request struct copied (RangeRequest: 112) */
#define SW_GRPC_RESP_MAX 64      /* bytes of the response struct copied (RangeResponse: 48) */
#define SW_ETCD_KEY_MAX 256      /* bytes kept of a key and of a range end */
#define SW_GRPC_MESSAGE_TYPES 64 /* entries of the message-type map (all targets) */
#define SW_MAX_KVS_READ 4096     /* RangeResponse kvs whose sizes are summed */
#define SW_MAX_CTX_DEPTH 32      /* context parents followed to find the peer */

enum sw_grpc_kind {
  SW_GRPC_UNARY = 0,
  SW_GRPC_STREAM = 1,
  /* One message on an open stream, seen where etcd handles it (no return: 1 hit each). */
  SW_GRPC_WATCH_CREATE = 2,    /* mvcc.(*watchStream).Watch: key, range end, start revision */
  SW_GRPC_WATCH_CANCEL = 3,    /* mvcc.(*watchStream).Cancel: the watch ID */
  SW_GRPC_LEASE_KEEPALIVE = 4, /* etcdserver.(*EtcdServer).LeaseRenew: lease ID, the client */
  /* mvcc.(*watchableStore).NewWatchStream returned, on the goroutine of a Watch stream's handler:
   * its mvcc watch stream, which names the stream (and so its client) in WATCH_* events. */
  SW_GRPC_WATCH_STREAM = 5,
};

/* What the BPF program does with a message of one Go type (the eface's type word). */
enum sw_grpc_message_kind {
  SW_MSG_PLAIN = 0,      /* copy the struct */
  SW_MSG_KEYED = 1,      /* copy the struct, its Key and (if end_off != 0xffff) RangeEnd */
  SW_MSG_TXN = 2,        /* TxnRequest: the key of its first Compare, else of its first op */
  SW_MSG_RANGE_RESP = 3, /* RangeResponse: also sum the key and value bytes of its Kvs */
};

struct sw_grpc_message_key {
  __u32 slot;
  __u32 pad;
  __u64 type; /* runtime address of the *T type descriptor (the eface's first word) */
};
struct sw_grpc_message {
  __u16 kind;    /* enum sw_grpc_message_kind */
  __u16 size;    /* sizeof(T) */
  __u16 key_off; /* KEYED: the Key slice */
  __u16 end_off; /* KEYED: the RangeEnd slice; 0xffff: none */
};

struct sw_grpc_offsets {
  __u32 unary_info_method;  /* grpc.UnaryServerInfo.FullMethod (string) */
  __u32 stream_info_method; /* grpc.StreamServerInfo.FullMethod (string) */
  /* The context chain: context.valueCtx{Context; key, val any}; the parent context sits at +0
   * of every std context type. The peer is the value whose key's type is grpc/peer.peerKey. */
  __u64 value_ctx_type;     /* runtime address of *context.valueCtx's descriptor; 0: no peer */
  __u64 peer_key_type;      /* of peer.peerKey */
  __u32 value_ctx_key;
  __u32 value_ctx_val;
  __u32 peer_addr;          /* peer.Peer.Addr (net.Addr: a *net.TCPAddr) */
  __u32 peer_auth_info;     /* peer.Peer.AuthInfo (credentials.AuthInfo: a TLSInfo) */
  __u32 tls_info_peer_certificates; /* TLSInfo.State.PeerCertificates; 0: certificates not read */
  __u32 pad;
  /* The error: *grpc/internal/status.Error -> *Status -> *genproto status.Status.Code (grpc
   * before 1.30: Error{e *spb.Status}, one pointer less: status_direct). */
  __u64 status_error_type;  /* runtime address of *status.Error's descriptor; 0: codes not read */
  __u32 status_error_status;
  __u32 status_proto;
  __u32 status_code;
  __u32 status_direct;
  /* RangeResponse.Kvs -> *mvccpb.KeyValue{Key, Value}. */
  __u32 range_resp_kvs;
  __u32 kv_key;
  __u32 kv_value;
  /* TxnRequest.Compare -> *Compare.Key; TxnRequest.Success -> *RequestOp.Request (a oneof
   * interface whose data is a wrapper holding the op's *Request first) -> its Key at +0. */
  __u32 txn_compare;
  __u32 compare_key;
  __u32 txn_success;
  __u32 request_op_request;
  /* From Go's net and crypto/x509, as in sw_go_offsets. */
  __u32 tcpaddr_ip;
  __u32 tcpaddr_port;
  __u32 x509_raw;
  __u32 pad2;
  /* A stream's context, behind the grpc.ServerStream the stream interceptor gets: a
   * *grpc.serverStream, or etcd's v3rpc.serverStreamWithCtx value wrapping one (etcd wraps the
   * stream when the client requires a leader, as kube-apiserver's watches do). 0: not read. */
  __u64 server_stream_type;      /* runtime address of *grpc.serverStream's descriptor */
  __u64 stream_with_ctx_type;    /* of v3rpc.serverStreamWithCtx */
  __u32 server_stream_ctx;       /* serverStream.ctx (context.Context) */
  __u32 stream_with_ctx_inner;   /* serverStreamWithCtx.ServerStream (the wrapped stream) */
};

struct sw_grpc_call {
  struct sw_event_header hdr; /* conn: the goroutine (g) running the call; stream_id 0 */
  __u8 kind;                  /* enum sw_grpc_kind */
  __u8 method_len;
  __u16 msg_len;              /* bytes in msg */
  __u16 key_len;              /* bytes in key */
  __u16 end_len;              /* bytes in end */
  __u32 key_total;            /* the key's real length (key holds at most SW_ETCD_KEY_MAX) */
  __u32 end_total;
  __u64 msg_type;             /* the request's Go type (runtime address); 0: none (a stream) */
  struct sw_sock_addr peer;   /* the client's end, from the context's peer.Peer */
  __u64 client_cert_der;      /* where the peer's first certificate (DER) sits in the target */
  __u32 client_cert_der_len;
  __u32 pad;
  __u64 stream;               /* WATCH_*: the mvcc watch stream (one per gRPC Watch stream) */
  __s64 id;                   /* WATCH_CREATE: requested watch ID; CANCEL: its ID; LEASE: lease ID */
  __s64 rev;                  /* WATCH_CREATE: start revision (0: from now) */
  char method[SW_GRPC_METHOD_MAX];
  __u8 msg[SW_GRPC_MSG_MAX];
  __u8 key[SW_ETCD_KEY_MAX];
  __u8 end[SW_ETCD_KEY_MAX];
};

struct sw_grpc_done {
  struct sw_event_header hdr; /* conn: the goroutine, as in its sw_grpc_call */
  __u8 kind;
  __u8 pad;
  __u16 msg_len;
  __s32 code;                 /* gRPC status code: 0 OK; -1: an error whose code was not read */
  __u64 msg_type;             /* the response's Go type; 0: none (an error, or a stream) */
  __u32 kvs_read;             /* RangeResponse: kvs whose sizes were summed */
  __u32 pad2;
  __u64 kv_bytes;             /* their key + value bytes */
  __u8 msg[SW_GRPC_RESP_MAX];
};

#endif
