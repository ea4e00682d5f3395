// SPDX-License-Identifier: GPL-2.0
/* Uprobes inside Go HTTP/2 servers (golang.org/x/net/http2 and net/http's bundled copy).
 *
 * Probe budget (DESIGN.md): at most 2 hits per HTTP/2 request. One at
 * (*serverConn).processHeaders for the decoded request header fields, one at
 * (*responseWriter).handlerDone for status, bytes and end time. Both are function
 * entries, so no return probes are needed here. Go >= 1.17 register ABI on amd64:
 * receiver/first argument in RAX, second in RBX. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "events.h"

char LICENSE[] SEC("license") = "GPL";

#define SW_MAX_TARGET_SLOTS 256

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 16 << 20); /* resized by the agent before load */
} events SEC(".maps");

/* Per-target struct offsets, indexed by the attach cookie. */
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, SW_MAX_TARGET_SLOTS);
  __type(key, __u32);
  __type(value, struct sw_go_offsets);
} go_offsets SEC(".maps");

/* Drop counters per cause; per CPU so counting never contends. */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, SW_DROP_CAUSE_COUNT);
  __type(key, __u32);
  __type(value, __u64);
} drops SEC(".maps");

/* Probe hits per program, for the probe-budget figures printed by benchmarks:
 * processHeaders, handlerDone, HTTP/1.1 read entry, read return, write, close, and etcd's gRPC
 * unary entry, unary return, stream entry, stream return, watch create, watch cancel, lease
 * renew, watch stream made. */
#define SW_PROBE_COUNT 14
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, SW_PROBE_COUNT);
  __type(key, __u32);
  __type(value, __u64);
} hits SEC(".maps");

/* Entry probes sit on the Go prologue's stack-check branch (agent/capture/go_binary.h: the
 * kernel emulates a branch, a trap cheaper than single-stepping the next instruction). The
 * cookie's high half holds the EFLAGS under which that branch goes to morestack: the call then
 * re-runs from its entry, and this hit is not the call's. */
static __always_inline int stack_will_grow(struct pt_regs *ctx) {
  __u32 morestack_if = bpf_get_attach_cookie(ctx) >> 32;
  return morestack_if && (ctx->flags & morestack_if);
}

/* Scratch space for one request event: too big for the 512-byte BPF stack. */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct sw_h2_request);
} request_scratch SEC(".maps");

static __always_inline void count(void *map, __u32 index) {
  __u64 *value = bpf_map_lookup_elem(map, &index);
  if (value) *value += 1;
}

/* The frame's []hpack.HeaderField, copied in one read: each bpf_probe_read_user costs ~150 ns
 * on a virtualised host, and reading every field's name and value headers one by one doubled the
 * program's reads. */
#define SW_FIELDS_BYTES 2048
struct header_fields {
  __u8 bytes[2 * SW_FIELDS_BYTES]; /* twice: the read's size is masked (0xfff), for the verifier */
};

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct header_fields);
} fields_scratch SEC(".maps");

struct copy_fields_ctx {
  const struct header_fields *fields; /* the HeaderField array, copied */
  const struct sw_go_offsets *off;
  struct sw_h2_request *event;
  __u32 data_len;
  __u16 kept;
  __u8 stop;
  __u8 has_authorization; /* an "authorization" field was copied */
};

struct go_string {
  __u64 ptr;
  __u64 len;
};

/* Copies header field i into the event's data area. Returns 1 to stop the loop. */
static long copy_one_field(__u64 i, void *vctx) {
  struct copy_fields_ctx *c = vctx;
  struct sw_h2_request *event = c->event;
  const struct sw_go_offsets *off = c->off;
  __u64 name_at = i * off->field_size + off->field_name;
  __u64 value_at = i * off->field_size + off->field_value;
  if (name_at > SW_FIELDS_BYTES - sizeof(struct go_string) ||
      value_at > SW_FIELDS_BYTES - sizeof(struct go_string))
    return 1;
  /* Within the first SW_FIELDS_BYTES of the copy, in a way the verifier sees. */
  asm volatile("%[at] &= 0x7ff" : [at] "+r"(name_at));
  asm volatile("%[at] &= 0x7ff" : [at] "+r"(value_at));
  struct go_string name, value;
  __builtin_memcpy(&name, &c->fields->bytes[name_at], sizeof(name));
  __builtin_memcpy(&value, &c->fields->bytes[value_at], sizeof(value));
  __u32 pos = c->data_len;
  if (pos >= SW_DATA_LIMIT) {
    count(&drops, SW_DROP_FIELDS_TRUNCATED);
    c->stop = 1;
    return 1;
  }
  __u32 name_len = name.len > SW_MAX_NAME ? SW_MAX_NAME : (__u32)name.len;
  __u32 value_len = value.len;
  if (value.len > SW_MAX_VALUE) {
    value_len = SW_MAX_VALUE;
    count(&drops, SW_DROP_VALUE_TRUNCATED);
  }
  __u16 *lens = (__u16 *)&event->data[pos];
  lens[0] = name_len;
  lens[1] = value_len;
  pos += 4;
  if (pos > SW_DATA_LIMIT + 4) return 1; /* for the verifier: pos stays bounded */
  if (name_len > 0 && bpf_probe_read_user(&event->data[pos], name_len & SW_MAX_NAME, (void *)name.ptr)) {
    count(&drops, SW_DROP_READ_FAILED);
    return 1;
  }
  if (name_len == 13) { /* HTTP/2 field names are lower case */
    __u64 word;
    __builtin_memcpy(&word, &event->data[pos], 8);
    if (word == 0x7a69726f68747561ULL /* "authoriz" */) c->has_authorization = 1;
  }
  pos += name_len & SW_MAX_NAME;
  if (pos > SW_DATA_LIMIT + 4 + SW_MAX_NAME) return 1;
  if (value_len > 0 &&
      bpf_probe_read_user(&event->data[pos], value_len & SW_MAX_VALUE, (void *)value.ptr)) {
    count(&drops, SW_DROP_READ_FAILED);
    return 1;
  }
  pos += value_len & SW_MAX_VALUE;
  c->data_len = pos;
  c->kept += 1;
  return 0;
}

/* One end of the connection from a *net.TCPAddr (net.Addr's data word). */
static __always_inline void read_tcp_addr(__u64 tcp_addr, const struct sw_go_offsets *off,
                                          struct sw_sock_addr *out) {
  struct {
    __u64 ip_ptr, ip_len;
    __s64 port;
  } a;
  out->ip_len = 0;
  if (!tcp_addr || bpf_probe_read_user(&a.ip_ptr, 16, (void *)(tcp_addr + off->tcpaddr_ip)) ||
      bpf_probe_read_user(&a.port, 8, (void *)(tcp_addr + off->tcpaddr_port)))
    return;
  if (a.port < 0 || a.port > 0xffff) return;
  if (a.ip_len == 4) {
    if (bpf_probe_read_user(out->ip, 4, (void *)a.ip_ptr)) return;
  } else if (a.ip_len == 16) {
    if (bpf_probe_read_user(out->ip, 16, (void *)a.ip_ptr)) return;
  } else {
    return;
  }
  out->ip_len = a.ip_len;
  out->port = a.port;
}

/* The *netFD under a server connection's net.Conn data word, if it is a TCP socket: under TLS
 * first (tls.Conn.conn), then as a bare *net.TCPConn. 0 when neither reads as one. */
static __always_inline __u64 tcp_netfd(__u64 net_conn, const struct sw_go_offsets *off) {
  struct {
    __u64 itab, data;
  } inner = {};
  __u64 candidates[2] = {0, net_conn};
  if (!bpf_probe_read_user(&inner, sizeof(inner), (void *)(net_conn + off->tls_conn_conn))) {
    candidates[0] = inner.data;
  }
  for (int i = 0; i < 2; i++) {
    __u64 fd = 0;
    __s64 family = 0, sotype = 0;
    if (!candidates[i] ||
        bpf_probe_read_user(&fd, sizeof(fd), (void *)(candidates[i] + off->tcpconn_fd)) || !fd ||
        bpf_probe_read_user(&family, sizeof(family), (void *)(fd + off->netfd_family)) ||
        bpf_probe_read_user(&sotype, sizeof(sotype), (void *)(fd + off->netfd_sotype))) {
      continue;
    }
    if ((family == 2 /* AF_INET */ || family == 10 /* AF_INET6 */) && sotype == 1 /* SOCK_STREAM */) {
      return fd;
    }
  }
  return 0;
}

/* Local and peer address of the connection whose net.Conn data word is net_conn. The
 * addresses are read at every request rather than cached per connection: Go reuses a closed
 * connection's memory for the next one, and a cache keyed by address would credit the old
 * peer. Nine small reads, a fraction of the header copy's cost. */
static __always_inline void read_conn_addrs(__u64 net_conn, const struct sw_go_offsets *off,
                                            struct sw_sock_addr *local, struct sw_sock_addr *peer) {
  struct {
    __u64 itab, data;
  } laddr = {}, raddr = {};
  local->ip_len = 0;
  peer->ip_len = 0;
  if (!net_conn || !off->read_addrs) return;
  __u64 fd = tcp_netfd(net_conn, off);
  if (!fd || bpf_probe_read_user(&laddr, sizeof(laddr), (void *)(fd + off->netfd_laddr)) ||
      bpf_probe_read_user(&raddr, sizeof(raddr), (void *)(fd + off->netfd_raddr)))
    return;
  read_tcp_addr(laddr.data, off, local);
  read_tcp_addr(raddr.data, off, peer);
}

/* kube-apiserver authenticates a client certificate before any token, and a request without a
 * token can only be named by its certificate. Reading it later from user space could meet a
 * connection closed and its memory reused; here the connection is alive. A server connection
 * that is not TLS has no peerCertificates: user space then fails to parse and counts it. */
static __always_inline void read_client_cert(__u64 tls_conn, const struct sw_go_offsets *off,
                                             struct sw_h2_request *event) {
  struct {
    __u64 ptr, len;
  } peers = {}, raw = {};
  __u64 cert = 0;
  if (!tls_conn || !off->tls_peer_certificates ||
      bpf_probe_read_user(&peers, sizeof(peers), (void *)(tls_conn + off->tls_peer_certificates)) ||
      peers.len == 0 || peers.len > 16 || bpf_probe_read_user(&cert, sizeof(cert), (void *)peers.ptr) ||
      !cert || bpf_probe_read_user(&raw, sizeof(raw), (void *)(cert + off->x509_raw)) ||
      raw.len == 0 || raw.len > 65536)
    return;
  event->client_cert_der = raw.ptr;
  event->client_cert_der_len = raw.len;
}

SEC("uprobe")
int BPF_UPROBE(h2_process_headers) {
  if (stack_will_grow(ctx)) return 0;
  count(&hits, 0);
  __u32 slot = (__u32)bpf_get_attach_cookie(ctx);
  const struct sw_go_offsets *off = bpf_map_lookup_elem(&go_offsets, &slot);
  __u32 zero = 0;
  struct sw_h2_request *event = bpf_map_lookup_elem(&request_scratch, &zero);
  if (!off || !event) return 0;

  __u64 sc = ctx->ax;
  __u64 frame = ctx->bx; /* *MetaHeadersFrame */
  __u64 headers_frame = 0;
  struct go_string fields = {}; /* slice: ptr, len (cap ignored) */
  if (bpf_probe_read_user(&headers_frame, sizeof(headers_frame), (void *)(frame + off->mhf_headers_frame)) ||
      bpf_probe_read_user(&fields, sizeof(fields), (void *)(frame + off->mhf_fields)) ||
      bpf_probe_read_user(&event->hdr.stream_id, sizeof(event->hdr.stream_id),
                          (void *)(headers_frame + off->frame_stream_id))) {
    count(&drops, SW_DROP_READ_FAILED);
    return 0;
  }
  event->hdr.type = SW_EV_H2_REQUEST;
  event->hdr.tgid = bpf_get_current_pid_tgid() >> 32;
  event->hdr.ts_ns = bpf_ktime_get_ns();
  event->hdr.conn = sc;
  event->hdr.target = slot;
  event->field_count = fields.len > 0xffff ? 0xffff : fields.len;
  struct {
    __u64 itab, data;
  } conn = {};
  bpf_probe_read_user(&conn, sizeof(conn), (void *)(sc + off->sc_conn));
  read_conn_addrs(conn.data, off, &event->local, &event->peer);

  struct header_fields *copied = bpf_map_lookup_elem(&fields_scratch, &zero);
  if (!copied || off->field_size == 0) return 0;
  __u32 n = fields.len > SW_MAX_FIELDS ? SW_MAX_FIELDS : (__u32)fields.len;
  if (n > SW_FIELDS_BYTES / off->field_size) n = SW_FIELDS_BYTES / off->field_size;
  if (fields.len > n) count(&drops, SW_DROP_FIELDS_TRUNCATED);
  __u32 fields_size = n * off->field_size;
  if (fields_size > SW_FIELDS_BYTES) return 0;
  /* Masked in the register the helper gets (the compiler would drop a C mask it can prove). */
  __u64 read_size = fields_size;
  asm volatile("%[size] &= 0xfff" : [size] "+r"(read_size));
  if (read_size > 0 && bpf_probe_read_user(copied->bytes, read_size, (void *)fields.ptr)) {
    count(&drops, SW_DROP_READ_FAILED);
    return 0;
  }
  struct copy_fields_ctx c = {.fields = copied, .off = off, .event = event};
  bpf_loop(n, copy_one_field, &c, 0);
  event->fields_kept = c.kept;
  event->data_len = c.data_len;
  event->client_cert_der = 0;
  event->client_cert_der_len = 0;
  if (!c.has_authorization) read_client_cert(conn.data, off, event);

  __u64 size = offsetof(struct sw_h2_request, data) + c.data_len;
  if (size > sizeof(*event)) return 0;
  if (bpf_ringbuf_output(&events, event, size, BPF_RB_NO_WAKEUP)) count(&drops, SW_DROP_RINGBUF_FULL);
  return 0;
}

/* Scratch space for one response event (4 KB of body prefix). */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct sw_h2_response);
} response_scratch SEC(".maps");

/* The handler's response header map, http.Header = map[string][]string, in either of the Go
 * runtime's map layouts, both described per target by sw_go_offsets (from the binary's map type
 * descriptor):
 *   buckets (Go <= 1.23): runtime.hmap{count; flags; B; ...; buckets; oldbuckets} -> 2^B
 *     buckets {tophash [8]uint8; keys [8]string; elems [8][]string; overflow *bmap};
 *   Swiss tables (Go 1.24+): maps.Map{used; seed; dirPtr; dirLen} -> one group when dirLen is 0,
 *     else a directory of *table, each with groups{data; lengthMask}; a group is
 *     {ctrl uint64 (one byte per slot, high bit clear = full); slots [8]{key; elem}}.
 * At most SW_MAX_GROUP_VISITS buckets or groups are read (a map with more than ~50 headers is
 * not walked to its end: the event says so). */
#define GO_MIN_TOP_HASH 5      /* buckets: below are empty or evacuated slots */
#define GO_SAME_SIZE_GROW 8    /* hmap.flags */
#define GO_CTRL_EMPTY_BIT 0x80 /* Swiss: set in empty and deleted slots' control bytes */
#define SW_MAX_GROUP_VISITS 24
#define SW_MAX_TABLES 8        /* Swiss directory entries read */
#define SW_PAGE_SIZE 4096      /* x86_64 */

struct go_hmap {
  __u64 count;
  __u8 flags;
  __u8 B;
  __u16 noverflow;
  __u32 hash0;
  __u64 buckets;
  __u64 oldbuckets;
};

struct go_group {
  __u8 bytes[2 * SW_MAP_GROUP_MAX]; /* twice: the read's size is masked (0x3ff), for the verifier */
};

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct go_group);
} group_scratch SEC(".maps");

struct header_walk {
  __u64 group_size;
  /* buckets */
  __u64 base;      /* bucket array being walked */
  __u64 nbuckets;
  __u64 index;     /* bucket index in that array */
  __u64 next;      /* the overflow bucket after the current one */
  __u64 old_base;  /* oldbuckets, walked after buckets while the map grows */
  __u64 old_n;
  /* Swiss tables */
  __u64 tables[SW_MAX_TABLES];
  __u32 ntables;
  __u32 table_index;
  __u64 groups;    /* the current table's groups (or the single group) */
  __u64 ngroups;
  __u64 group_index;
  __u32 visits;
  __u32 readable;  /* bytes of the current group read: the group size, or less (see walk_one_slot) */
  __u8 swiss;
  __u8 skip;       /* the current unit is a repeated directory entry */
  __u8 found;      /* bits: priority level, flow schema, Retry-After */
  __u8 done;
};

/* Canonical header keys (http.Header.Set canonicalises them), recognised by length and three
 * 8-byte words (start, at 13, end), little-endian: no byte loops for the verifier. */
#define KEY_PRIORITY_LEVEL_LEN 33 /* X-Kubernetes-Pf-Prioritylevel-Uid */
#define KEY_FLOW_SCHEMA_LEN 30    /* X-Kubernetes-Pf-Flowschema-Uid */
#define KEY_RETRY_AFTER_LEN 11    /* Retry-After */
#define W_X_KUBERN 0x6e726562754b2d58ULL /* "X-Kubern" */
#define W_PF_PRIOR 0x726f6972502d6650ULL /* "Pf-Prior" */
#define W_PF_FLOWS 0x73776f6c462d6650ULL /* "Pf-Flows" */
#define W_EVEL_UID 0x6469552d6c657665ULL /* "evel-Uid" */
#define W_HEMA_UID 0x6469552d616d6568ULL /* "hema-Uid" */
#define W_RETRY_AF 0x66412d7972746552ULL /* "Retry-Af" */
#define W_RY_AFTER 0x72657466412d7972ULL /* "ry-After" */

/* The next bucket or group to read, 0 when the map is walked. */
static __always_inline __u64 next_bucket(struct header_walk *w) {
  if (w->next) {
    __u64 b = w->next;
    w->next = 0;
    return b;
  }
  if (w->visits > 0) w->index++;
  if (w->index >= w->nbuckets) {
    if (w->old_base == 0) return 0;
    w->base = w->old_base;
    w->nbuckets = w->old_n;
    w->old_base = 0;
    w->index = 0;
  }
  return w->base + w->index * w->group_size;
}

/* The next group of the current table, or the first of the next table: one step per call (a
 * loop here would multiply the verifier's states). SW_SKIP_UNIT: a directory entry repeating the
 * previous one (a table of local depth d fills 2^(global-d) consecutive entries), not read. */
#define SW_SKIP_UNIT 1
static __always_inline __u64 next_swiss_group(struct header_walk *w, const struct sw_go_offsets *off) {
  if (w->group_index < w->ngroups) return w->groups + w->group_index++ * w->group_size;
  __u32 t = w->table_index;
  if (t >= w->ntables || t >= SW_MAX_TABLES) return 0;
  w->table_index = t + 1;
  __u64 table = w->tables[t & (SW_MAX_TABLES - 1)];
  if (t > 0 && table == w->tables[(t - 1) & (SW_MAX_TABLES - 1)]) return SW_SKIP_UNIT;
  __u64 mask = 0;
  if (!table || bpf_probe_read_user(&w->groups, 8, (void *)(table + off->table_groups)) ||
      bpf_probe_read_user(&mask, 8, (void *)(table + off->table_mask)) || !w->groups) {
    count(&drops, SW_DROP_READ_FAILED);
    return 0;
  }
  w->ngroups = mask + 1;
  w->group_index = 1;
  return w->groups;
}

/* The walk's state lives in a map value, not on the stack: the verifier tracks stack values
 * exactly, and counters it can follow make every bpf_loop iteration a new state to verify. */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct header_walk);
} walk_scratch SEC(".maps");

struct walk_ctx { /* bpf_loop's context must be on the stack: the pointers, and the state's */
  struct header_walk *w;
  struct sw_h2_response *r;
  struct go_group *group;
  const struct sw_go_offsets *off;
};

/* One slot of the current bucket or group per call (i % 8); the next one is read at slot 0. */
static long walk_one_slot(__u64 i, void *vctx) {
  struct walk_ctx *c = vctx;
  struct header_walk *w = c->w;
  struct go_group *g = c->group;
  const struct sw_go_offsets *off = c->off;
  __u32 slot = i & 7;
  if (slot == 0) {
    if (w->done || w->visits >= SW_MAX_GROUP_VISITS) return 1;
    __u64 at = w->swiss ? next_swiss_group(w, off) : next_bucket(w);
    if (!at) return 1;
    w->skip = at == SW_SKIP_UNIT;
    if (w->skip) return 0;
    w->visits++;
    w->readable = w->group_size;
    if (bpf_probe_read_user(g->bytes, w->group_size & (SW_MAP_GROUP_MAX - 1 | SW_MAP_GROUP_MAX), (void *)at)) {
      /* Go does not write the fresh memory it maps for its heap (the kernel gives it zeroed), so
       * a group can end in a page the process has not touched yet, which this read cannot fault
       * in. Then read up to the page boundary: the slots past it were never written (empty, as
       * the control bytes at the group's start say), a bucket's overflow pointer there is nil. */
      __u64 head = SW_PAGE_SIZE - (at & (SW_PAGE_SIZE - 1));
      if (head >= w->group_size ||
          bpf_probe_read_user(g->bytes, head & (SW_MAP_GROUP_MAX - 1), (void *)at)) {
        count(&drops, SW_DROP_READ_FAILED);
        return 1;
      }
      w->readable = head;
    }
    if (!w->swiss) {
      __u64 overflow_at = (w->group_size - 8) & (SW_MAP_GROUP_MAX - 8);
      w->next = overflow_at + 8 <= w->readable ? *(__u64 *)&g->bytes[overflow_at] : 0;
    }
  }
  if (w->skip || (w->swiss ? (g->bytes[slot] & GO_CTRL_EMPTY_BIT) : (g->bytes[slot] < GO_MIN_TOP_HASH))) return 0;
  __u64 key_at = off->keys_offset + slot * off->key_stride;
  __u64 elem_at = off->elems_offset + slot * off->elem_stride;
  if (key_at > SW_MAP_GROUP_MAX - 16 || elem_at > SW_MAP_GROUP_MAX - 16) return 1;
  if (key_at + 16 > w->readable || elem_at + 16 > w->readable) { /* a full slot not read */
    count(&drops, SW_DROP_READ_FAILED);
    return 0;
  }
  asm volatile("%[at] &= 0x1ff" : [at] "+r"(key_at));
  asm volatile("%[at] &= 0x1ff" : [at] "+r"(elem_at));
  struct go_string k, e;
  __builtin_memcpy(&k, &g->bytes[key_at], sizeof(k));
  __builtin_memcpy(&e, &g->bytes[elem_at], sizeof(e)); /* []string: ptr, len (cap not needed) */
  __u64 key_ptr = k.ptr, key_len = k.len, elem_ptr = e.ptr, elem_len = e.len;
  if (key_len != KEY_PRIORITY_LEVEL_LEN && key_len != KEY_FLOW_SCHEMA_LEN &&
      key_len != KEY_RETRY_AFTER_LEN)
    return 0;
  /* The key in one read (each read is costly), its words taken at constant offsets. */
  __u8 key[KEY_PRIORITY_LEVEL_LEN];
  __u64 first = 0, middle = 0, last = 0;
  if (key_len == KEY_PRIORITY_LEVEL_LEN) {
    if (bpf_probe_read_user(key, KEY_PRIORITY_LEVEL_LEN, (void *)key_ptr)) return 0;
    __builtin_memcpy(&middle, &key[13], 8);
    __builtin_memcpy(&last, &key[KEY_PRIORITY_LEVEL_LEN - 8], 8);
  } else if (key_len == KEY_FLOW_SCHEMA_LEN) {
    if (bpf_probe_read_user(key, KEY_FLOW_SCHEMA_LEN, (void *)key_ptr)) return 0;
    __builtin_memcpy(&middle, &key[13], 8);
    __builtin_memcpy(&last, &key[KEY_FLOW_SCHEMA_LEN - 8], 8);
  } else {
    if (bpf_probe_read_user(key, KEY_RETRY_AFTER_LEN, (void *)key_ptr)) return 0;
    __builtin_memcpy(&last, &key[KEY_RETRY_AFTER_LEN - 8], 8);
  }
  __builtin_memcpy(&first, key, 8);

  struct sw_h2_response *r = c->r;
  struct go_string v;
  if (elem_len == 0 || bpf_probe_read_user(&v, sizeof(v), (void *)elem_ptr) || v.len == 0) return 0;
  if (key_len == KEY_PRIORITY_LEVEL_LEN && first == W_X_KUBERN && middle == W_PF_PRIOR &&
      last == W_EVEL_UID) {
    __u32 n = v.len > SW_UID_MAX - 1 ? SW_UID_MAX - 1 : (__u32)v.len;
    if (bpf_probe_read_user(r->priority_level_uid, n & 63, (void *)v.ptr)) return 0;
    r->priority_level_uid_len = n;
    w->found |= 1;
  } else if (key_len == KEY_FLOW_SCHEMA_LEN && first == W_X_KUBERN && middle == W_PF_FLOWS &&
             last == W_HEMA_UID) {
    __u32 n = v.len > SW_UID_MAX - 1 ? SW_UID_MAX - 1 : (__u32)v.len;
    if (bpf_probe_read_user(r->flow_schema_uid, n & 63, (void *)v.ptr)) return 0;
    r->flow_schema_uid_len = n;
    w->found |= 2;
  } else if (key_len == KEY_RETRY_AFTER_LEN && first == W_RETRY_AF && last == W_RY_AFTER) {
    __u32 n = v.len > SW_RETRY_AFTER_MAX - 1 ? SW_RETRY_AFTER_MAX - 1 : (__u32)v.len;
    if (bpf_probe_read_user(r->retry_after, n & 15, (void *)v.ptr)) return 0;
    r->retry_after_len = n;
    w->found |= 4;
  } else {
    return 0;
  }
  if (w->found == 7) w->done = 1;
  return 0;
}


/* Finds the APF and Retry-After headers in the handler's header map. */
static __always_inline void read_response_headers(__u64 map_ptr, const struct sw_go_offsets *off,
                                                  struct sw_h2_response *r) {
  __u32 zero = 0;
  struct go_group *group = bpf_map_lookup_elem(&group_scratch, &zero);
  struct header_walk *w = bpf_map_lookup_elem(&walk_scratch, &zero);
  if (!group || !w || map_ptr == 0 || off->group_size == 0 || off->group_size > SW_MAP_GROUP_MAX) return;
  __builtin_memset(w, 0, sizeof(*w));
  w->group_size = off->group_size;
  if (off->map_swiss) {
    __u64 used = 0, dir_ptr = 0;
    __s64 dir_len = 0;
    if (bpf_probe_read_user(&used, sizeof(used), (void *)map_ptr) ||
        bpf_probe_read_user(&dir_ptr, sizeof(dir_ptr), (void *)(map_ptr + off->map_dir_ptr)) ||
        bpf_probe_read_user(&dir_len, sizeof(dir_len), (void *)(map_ptr + off->map_dir_len)))
      return;
    if (used == 0 || dir_ptr == 0) return;
    w->swiss = 1;
    if (dir_len == 0) { /* a small map: one group, no tables */
      w->groups = dir_ptr;
      w->ngroups = 1;
    } else {
      if (dir_len < 0 || dir_len > SW_MAX_TABLES) {
        r->header_walk_incomplete = 1;
        return;
      }
      __u32 bytes = (__u32)dir_len * 8;
      if (bpf_probe_read_user(w->tables, bytes & (8 * SW_MAX_TABLES - 1 | 8 * SW_MAX_TABLES), (void *)dir_ptr)) return;
      w->ntables = dir_len;
    }
  } else {
    struct go_hmap h;
    if (bpf_probe_read_user(&h, sizeof(h), (void *)map_ptr)) return;
    if (h.count == 0 || h.buckets == 0) return;
    if (h.B > 3) { /* more than ~52 headers: not walked */
      r->header_walk_incomplete = 1;
      return;
    }
    w->base = h.buckets;
    w->nbuckets = 1ULL << h.B;
    if (h.oldbuckets) {
      w->old_base = h.oldbuckets;
      w->old_n = (h.flags & GO_SAME_SIZE_GROW) || h.B == 0 ? 1ULL << h.B : 1ULL << (h.B - 1);
    }
  }
  struct walk_ctx c = {.w = w, .r = r, .group = group, .off = off};
  bpf_loop(SW_MAX_GROUP_VISITS * 8, walk_one_slot, &c, 0);
  if (w->visits >= SW_MAX_GROUP_VISITS && !w->done) r->header_walk_incomplete = 1;
}

/* The response body is still in the stream's bufio.Writer when the handler wrote less than its
 * 4 KB and did not flush: then wroteBytes == bw.n and bw.buf[0:n] is the whole body. */
static __always_inline void read_body_prefix(__u64 bw, __s64 wrote_bytes, const struct sw_go_offsets *off,
                                             struct sw_h2_response *r) {
  struct {
    __u64 buf_ptr;
    __s64 n;
  } w;
  if (wrote_bytes <= 0 || bw == 0 ||
      bpf_probe_read_user(&w.buf_ptr, 8, (void *)(bw + off->bufio_buf)) ||
      bpf_probe_read_user(&w.n, 8, (void *)(bw + off->bufio_n)))
    return;
  if (w.n != wrote_bytes || w.n <= 0) return;
  __u32 n = w.n > SW_BODY_PREFIX ? SW_BODY_PREFIX : (__u32)w.n;
  if (bpf_probe_read_user(r->body, n & (SW_BODY_PREFIX - 1 | SW_BODY_PREFIX), (void *)w.buf_ptr)) return;
  r->body_len = n;
}

SEC("uprobe")
int BPF_UPROBE(h2_handler_done) {
  if (stack_will_grow(ctx)) return 0;
  count(&hits, 1);
  __u32 slot = (__u32)bpf_get_attach_cookie(ctx);
  const struct sw_go_offsets *off = bpf_map_lookup_elem(&go_offsets, &slot);
  __u32 zero = 0;
  struct sw_h2_response *r = bpf_map_lookup_elem(&response_scratch, &zero);
  if (!off || !r) return 0;

  __u64 w = ctx->ax;
  __u64 rws = 0, stream = 0;
  if (bpf_probe_read_user(&rws, sizeof(rws), (void *)(w + off->rw_rws)) ||
      bpf_probe_read_user(&stream, sizeof(stream), (void *)(rws + off->rws_stream)) ||
      bpf_probe_read_user(&r->hdr.conn, sizeof(r->hdr.conn), (void *)(stream + off->stream_sc)) ||
      bpf_probe_read_user(&r->hdr.stream_id, sizeof(r->hdr.stream_id),
                          (void *)(stream + off->stream_id)) ||
      bpf_probe_read_user(&r->status, sizeof(r->status), (void *)(rws + off->rws_status)) ||
      bpf_probe_read_user(&r->wrote_bytes, sizeof(r->wrote_bytes),
                          (void *)(rws + off->rws_wrote_bytes))) {
    count(&drops, SW_DROP_READ_FAILED);
    return 0;
  }
  r->hdr.type = SW_EV_H2_RESPONSE;
  r->hdr.tgid = bpf_get_current_pid_tgid() >> 32;
  r->hdr.ts_ns = bpf_ktime_get_ns();
  r->hdr.target = slot;
  r->priority_level_uid_len = 0;
  r->flow_schema_uid_len = 0;
  r->retry_after_len = 0;
  r->header_walk_incomplete = 0;
  r->body_len = 0;

  __u64 header_map = 0, req = 0, bw = 0;
  if (!bpf_probe_read_user(&header_map, sizeof(header_map), (void *)(rws + off->rws_handler_header)))
    read_response_headers(header_map, off, r);
  /* Object facts only for writes: PUT, PATCH, POST, DELETE (method's first byte P or D). */
  struct go_string method = {};
  char m0 = 0;
  /* rws.req: a *http.Request, or (Go 1.27's net/http/internal/http2) the request itself. */
  if (off->capture_write_bodies) {
    if (off->rws_req_inline)
      req = rws + off->rws_req;
    else if (bpf_probe_read_user(&req, sizeof(req), (void *)(rws + off->rws_req)))
      req = 0;
  }
  if (req && !bpf_probe_read_user(&method, sizeof(method), (void *)(req + off->req_method)) &&
      method.len > 0 && !bpf_probe_read_user(&m0, 1, (void *)method.ptr) && (m0 == 'P' || m0 == 'D') &&
      !bpf_probe_read_user(&bw, sizeof(bw), (void *)(rws + off->rws_bw)))
    read_body_prefix(bw, r->wrote_bytes, off, r);

  __u64 size = offsetof(struct sw_h2_response, body) + (r->body_len & (SW_BODY_PREFIX - 1 | SW_BODY_PREFIX));
  if (size > sizeof(*r)) return 0;
  if (bpf_ringbuf_output(&events, r, size, BPF_RB_NO_WAKEUP)) count(&drops, SW_DROP_RINGBUF_FULL);
  return 0;
}

/* ---- HTTP/1.1 (net/http's own server, over TLS or not) ----
 * Hooked above TLS but below the HTTP parser, where only HTTP/1.1 server connections pass:
 * net/http.(*connReader).Read (entry + every RET: the plaintext a request read returned) and
 * net/http.checkConnErrorWriter.Write (entry: the plaintext of a response write), plus
 * (*conn).close. HTTP/2 connections are handed to the HTTP/2 server before these exist, so they
 * cost HTTP/2 traffic nothing (a crypto/tls.(*Conn) hook would fire for every frame read).
 * Key: the *net/http.conn, the same for reads (connReader.conn: +0 up to Go 1.25, after its rwc
 * from 1.26; nil once the connection is hijacked, whose bytes are not HTTP/1.1) and writes (the
 * writer's only field). Bytes are parsed in user space (agent/protocol/http1_stream). */

struct read_call_key {
  __u32 tgid;
  __u32 pad;
  __u64 goroutine; /* R14 holds the g in Go's register ABI, at entry and at every RET */
};

struct read_call {
  __u64 conn;
  __u64 buf;
  __u64 entry_ns;
};

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 16384);
  __type(key, struct read_call_key);
  __type(value, struct read_call);
} http1_reads SEC(".maps");

struct conn_key {
  __u32 tgid;
  __u32 pad;
  __u64 conn;
};

/* Direction of the connection's previous call: a write that follows a write continues the same
 * response, whose head went out already, so only its length and last bytes are sent. */
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 65536);
  __type(key, struct conn_key);
  __type(value, __u32);
} http1_last_direction SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct sw_tls_data);
} tls_scratch SEC(".maps");

static __always_inline int emit_http1_data(void *ctx, __u32 slot, __u64 conn, __u32 direction,
                                           __u64 buf, __u64 len) {
  __u32 zero = 0;
  struct sw_tls_data *e = bpf_map_lookup_elem(&tls_scratch, &zero);
  if (!e || len == 0) return 0;
  __u32 tgid = bpf_get_current_pid_tgid() >> 32;
  struct conn_key ck = {.tgid = tgid, .conn = conn};
  __u32 *last = bpf_map_lookup_elem(&http1_last_direction, &ck);
  int continuation = direction == SW_TLS_WRITE && last && *last == SW_TLS_WRITE;
  bpf_map_update_elem(&http1_last_direction, &ck, &direction, BPF_ANY);

  e->hdr.type = SW_EV_TLS_DATA;
  e->hdr.tgid = tgid;
  e->hdr.ts_ns = bpf_ktime_get_ns();
  e->hdr.conn = conn;
  e->hdr.stream_id = 0;
  e->hdr.target = slot;
  e->direction = direction;
  e->total_len = len > 0xffffffffULL ? 0xffffffff : (__u32)len;
  __u32 captured = continuation ? 0 : (len > SW_TLS_CAPTURE ? SW_TLS_CAPTURE : (__u32)len);
  e->captured = 0;
  e->tail_len = 0;
  if (captured > 0) {
    if (bpf_probe_read_user(e->data, captured & (SW_TLS_CAPTURE - 1 | SW_TLS_CAPTURE), (void *)buf)) {
      count(&drops, SW_DROP_READ_FAILED);
      return 0;
    }
    e->captured = captured;
  }
  if (len > captured) {
    __u32 tail = len - captured > SW_TLS_TAIL ? SW_TLS_TAIL : (__u32)(len - captured);
    if (bpf_probe_read_user(e->tail, tail & (SW_TLS_TAIL - 1 | SW_TLS_TAIL), (void *)(buf + len - tail)) == 0)
      e->tail_len = tail;
  }
  __u64 size = offsetof(struct sw_tls_data, data) + (e->captured & (SW_TLS_CAPTURE - 1 | SW_TLS_CAPTURE));
  if (size > sizeof(*e)) return 0;
  if (bpf_ringbuf_output(&events, e, size, BPF_RB_NO_WAKEUP)) count(&drops, SW_DROP_RINGBUF_FULL);
  return 0;
}

SEC("uprobe")
int BPF_UPROBE(http1_read_enter) {
  if (stack_will_grow(ctx)) return 0;
  count(&hits, 2);
  struct read_call_key k = {.tgid = bpf_get_current_pid_tgid() >> 32, .goroutine = ctx->r14};
  struct read_call c = {.buf = ctx->bx, .entry_ns = 0};
  __u32 slot = (__u32)bpf_get_attach_cookie(ctx);
  const struct sw_go_offsets *off = bpf_map_lookup_elem(&go_offsets, &slot);
  if (!off) return 0;
  if (bpf_probe_read_user(&c.conn, sizeof(c.conn), (void *)(ctx->ax + off->conn_reader_conn))) {
    count(&drops, SW_DROP_READ_FAILED);
    return 0;
  }
  if (!c.conn) return 0; /* hijacked */
  bpf_map_update_elem(&http1_reads, &k, &c, BPF_ANY);
  return 0;
}

SEC("uprobe")
int BPF_UPROBE(http1_read_return) {
  count(&hits, 3);
  struct read_call_key k = {.tgid = bpf_get_current_pid_tgid() >> 32, .goroutine = ctx->r14};
  struct read_call *c = bpf_map_lookup_elem(&http1_reads, &k);
  if (!c) return 0;
  struct read_call call = *c;
  bpf_map_delete_elem(&http1_reads, &k);
  __s64 n = (__s64)ctx->ax;
  if (n <= 0) return 0;
  return emit_http1_data(ctx, (__u32)bpf_get_attach_cookie(ctx), call.conn, SW_TLS_READ, call.buf, n);
}

SEC("uprobe")
int BPF_UPROBE(http1_write) {
  if (stack_will_grow(ctx)) return 0;
  count(&hits, 4);
  return emit_http1_data(ctx, (__u32)bpf_get_attach_cookie(ctx), ctx->ax, SW_TLS_WRITE, ctx->bx,
                         ctx->cx);
}

SEC("uprobe")
int BPF_UPROBE(http1_close) {
  if (stack_will_grow(ctx)) return 0;
  count(&hits, 5);
  struct conn_key ck = {.tgid = bpf_get_current_pid_tgid() >> 32, .conn = ctx->ax};
  if (bpf_map_delete_elem(&http1_last_direction, &ck)) return 0;  /* never carried data */
  struct sw_tls_close e = {};
  e.hdr.type = SW_EV_TLS_CLOSE;
  e.hdr.tgid = ck.tgid;
  e.hdr.ts_ns = bpf_ktime_get_ns();
  e.hdr.conn = ck.conn;
  e.hdr.target = (__u32)bpf_get_attach_cookie(ctx);
  if (bpf_ringbuf_output(&events, &e, sizeof(e), BPF_RB_NO_WAKEUP)) count(&drops, SW_DROP_RINGBUF_FULL);
  return 0;
}

#include "grpc_server.bpf.h"
