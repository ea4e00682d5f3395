// SPDX-License-Identifier: GPL-2.0
/* A load generator for the agent's ring buffer (tests/e2e/test_ring_buffer.py), never loaded by
 * the agent. A BPF_PROG_TYPE_SYSCALL program, run from user space with bpf_prog_test_run_opts,
 * that writes `count` captured HTTP/2 requests into the agent's own `events` ring buffer and
 * counts what finds no room in the agent's own `drops` map: both maps are the running agent's,
 * reused by fd (tests/ring_flood/ring_flood.cc), so the agent drains, decodes and counts these
 * events exactly as it does the uprobes' (bpf/gohttp.bpf.c).
 *
 * Each request is what h2_process_headers and h2_handler_done send for kubectl's
 * `kubectl get configmap cm-NNNNN` over HTTP/2 without a token: a sw_h2_request (the decoded
 * header fields, both connection ends) and a sw_h2_response (200, bytes written, the APF UIDs
 * kube-apiserver puts in every response), the same sizes as the probes' (fixed part + data_len,
 * fixed part + body_len 0).
 *
 * A request's two events are reserved together: when either finds no room, both are given up
 * and each counts one SW_DROP_RINGBUF_FULL, so ring_buffer_full = 2 x requests lost and the
 * agent never sees half a request. (The uprobes, two separate hits, can lose one half; the
 * agent counts that half as request_without_response/response_without_request.) */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "events.h"
#include "ring_flood.h"

char LICENSE[] SEC("license") = "GPL";

/* Definitions identical to bpf/gohttp.bpf.c's: user space replaces both with the agent's maps
 * (bpf_map__reuse_fd) before loading, so nothing is created here. */
struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 16 << 20);
} events SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, SW_DROP_CAUSE_COUNT);
  __type(key, __u32);
  __type(value, __u64);
} drops SEC(".maps");


/* HTTP/2 header fields in the order Go's client sends them (pseudo-headers first), as
 * kubectl 1.30 sends them for `kubectl get configmap NAME`. */
#define PATH_PREFIX "/api/v1/namespaces/default/configmaps/cm-"
#define PATH_DIGITS "00000"
#define FIELDS_BEFORE_PATH(F)                                                                    \
  F(":authority", "10.0.0.1:6443")                                                              \
  F(":method", "GET")
#define PATH_NAME ":path"
#define PATH_VALUE PATH_PREFIX PATH_DIGITS
#define FIELDS_AFTER_PATH(F)                                                                     \
  F(":scheme", "https")                                                                         \
  F("accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;" \
              "g=meta.k8s.io,application/json")                                                 \
  F("kubectl-command", "kubectl get")                                                           \
  F("kubectl-session", "6f1a2b3c-4d5e-4f60-8a7b-9c0d1e2f3a4b")                                  \
  F("user-agent", "kubectl/v1.30.2 (linux/amd64) kubernetes/3968350")                           \
  F("accept-encoding", "gzip")
#define FLOOD_FIELDS(F) FIELDS_BEFORE_PATH(F) F(PATH_NAME, PATH_VALUE) FIELDS_AFTER_PATH(F)

#define FIELD_BYTES(name, value) (4 + sizeof(name) - 1 + sizeof(value) - 1) +
#define FIELD_COUNT(name, value) 1 +
#define REQUEST_DATA_LEN (FLOOD_FIELDS(FIELD_BYTES) 0)
#define REQUEST_FIELDS (FLOOD_FIELDS(FIELD_COUNT) 0)
/* Where the object name's digits sit in the data area. */
#define DIGITS_AT (FIELDS_BEFORE_PATH(FIELD_BYTES) 4 + sizeof(PATH_NAME) - 1 + sizeof(PATH_PREFIX) - 1)
#define REQUEST_SIZE (__builtin_offsetof(struct sw_h2_request, data) + REQUEST_DATA_LEN)
#define RESPONSE_SIZE (__builtin_offsetof(struct sw_h2_response, body))

/* The APF UIDs of kube-apiserver's default `global-default` level and `global-default` schema
 * (any 36-character UUIDs: the agent names them from its APF table, or leaves them unnamed). */
#define PRIORITY_LEVEL_UID "3f1c9a2e-7b4d-4e8a-9c6f-1a2b3c4d5e6f"
#define FLOW_SCHEMA_UID "8d7e6f5a-4b3c-4d2e-9f1a-0b9c8d7e6f5a"

#define CONNECTIONS 64
#define CONN_BASE 0xc000a40000ULL /* Go heap addresses of *serverConn values */

static __always_inline void count_drop(void) {
  __u32 cause = SW_DROP_RINGBUF_FULL;
  __u64 *value = bpf_map_lookup_elem(&drops, &cause);
  if (value) *value += 1;
}

/* 10.0.<c>.<d>:port, as Go's TCPAddr holds an IPv4 address read from a socket (4 bytes). */
static __always_inline void put_addr(struct sw_sock_addr *a, __u8 c, __u8 d, __u16 port) {
  a->ip_len = 4;
  a->pad = 0;
  a->port = port;
  __builtin_memset(a->ip, 0, sizeof(a->ip));
  a->ip[0] = 10;
  a->ip[1] = 0;
  a->ip[2] = c;
  a->ip[3] = d;
}

struct loop_ctx {
  struct sw_flood_args *args;
  __u32 tgid;
};

static long emit_one(__u64 i, void *vctx) {
  struct loop_ctx *c = vctx;
  struct sw_flood_args *args = c->args;
  __u64 seq = args->first_seq + i;

  struct sw_h2_request *req = bpf_ringbuf_reserve(&events, REQUEST_SIZE, 0);
  if (!req) {
    count_drop(); /* the request */
    count_drop(); /* its response, never written */
    args->dropped += 1;
    return 0;
  }
  struct sw_h2_response *resp = bpf_ringbuf_reserve(&events, RESPONSE_SIZE, 0);
  if (!resp) {
    bpf_ringbuf_discard(req, BPF_RB_NO_WAKEUP);
    count_drop();
    count_drop();
    args->dropped += 1;
    return 0;
  }

  /* HTTP/2 stream IDs are odd and grow per connection; 64 connections, one request each in
   * turn, so (connection, stream) is unique for the generator's whole run. */
  __u32 conn_index = seq % CONNECTIONS;
  __u64 conn = CONN_BASE + conn_index * 0x1000;
  __u32 stream_id = (__u32)(((seq / CONNECTIONS) * 2 + 1) & 0x7fffffff);
  __u64 now = bpf_ktime_get_ns();
  __u64 duration = 350000 + (seq % 7) * 100000; /* 0.35-0.95 ms, a GET from the watch cache */

  req->hdr.type = SW_EV_H2_REQUEST;
  req->hdr.tgid = c->tgid;
  req->hdr.ts_ns = now - duration;
  req->hdr.conn = conn;
  req->hdr.stream_id = stream_id;
  req->hdr.target = 0;
  req->field_count = REQUEST_FIELDS;
  req->fields_kept = REQUEST_FIELDS;
  req->data_len = REQUEST_DATA_LEN;
  put_addr(&req->local, 0, 1, 6443);
  put_addr(&req->peer, 1, 10 + conn_index, 40000 + conn_index);
  req->client_cert_der = 0; /* no certificate on these connections, and no token: "unknown" */
  req->client_cert_der_len = 0;
  req->pad = 0;

  __u8 *d = req->data;
  __u32 pos = 0;
#define PUT_FIELD(name, value)                                   \
  {                                                              \
    __u16 lens[2] = {sizeof(name) - 1, sizeof(value) - 1};       \
    __builtin_memcpy(d + pos, lens, 4);                          \
    __builtin_memcpy(d + pos + 4, name, sizeof(name) - 1);       \
    __builtin_memcpy(d + pos + 4 + sizeof(name) - 1, value, sizeof(value) - 1); \
    pos += 4 + sizeof(name) - 1 + sizeof(value) - 1;             \
  }
  FLOOD_FIELDS(PUT_FIELD)
#undef PUT_FIELD
  /* cm-00000 .. cm-00999: the object named by the request. */
  __u32 object = seq % 1000;
  d[DIGITS_AT + 2] = '0' + object / 100;
  d[DIGITS_AT + 3] = '0' + object / 10 % 10;
  d[DIGITS_AT + 4] = '0' + object % 10;

  resp->hdr.type = SW_EV_H2_RESPONSE;
  resp->hdr.tgid = c->tgid;
  resp->hdr.ts_ns = now;
  resp->hdr.conn = conn;
  resp->hdr.stream_id = stream_id;
  resp->hdr.target = 0;
  resp->status = 200;
  resp->wrote_bytes = 1200 + seq % 400;
  resp->priority_level_uid_len = sizeof(PRIORITY_LEVEL_UID) - 1;
  resp->flow_schema_uid_len = sizeof(FLOW_SCHEMA_UID) - 1;
  resp->retry_after_len = 0;
  resp->header_walk_incomplete = 0;
  resp->body_len = 0;
  __builtin_memset(resp->priority_level_uid, 0, SW_UID_MAX);
  __builtin_memset(resp->flow_schema_uid, 0, SW_UID_MAX);
  __builtin_memset(resp->retry_after, 0, SW_RETRY_AFTER_MAX);
  __builtin_memcpy(resp->priority_level_uid, PRIORITY_LEVEL_UID, sizeof(PRIORITY_LEVEL_UID) - 1);
  __builtin_memcpy(resp->flow_schema_uid, FLOW_SCHEMA_UID, sizeof(FLOW_SCHEMA_UID) - 1);

  /* No wakeup, as the probes: the agent drains on its own schedule. */
  bpf_ringbuf_submit(req, BPF_RB_NO_WAKEUP);
  bpf_ringbuf_submit(resp, BPF_RB_NO_WAKEUP);
  args->submitted += 1;
  return 0;
}

SEC("syscall")
int flood(struct sw_flood_args *args) {
  struct loop_ctx c = {.args = args, .tgid = bpf_get_current_pid_tgid() >> 32};
  args->submitted = 0;
  args->dropped = 0;
  args->request_bytes = REQUEST_SIZE;
  args->response_bytes = RESPONSE_SIZE;
  bpf_loop(args->count, emit_one, &c, 0);
  return 0;
}
