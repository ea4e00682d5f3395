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

/* Probe hits per program, for the probe-budget figures printed by benchmarks. */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 2);
  __type(key, __u32);
  __type(value, __u64);
} hits SEC(".maps");

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

struct copy_fields_ctx {
  __u64 fields;        /* address of the first hpack.HeaderField */
  const struct sw_go_offsets *off;
  struct sw_h2_request *event;
  __u32 data_len;
  __u16 kept;
  __u8 stop;
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
  __u64 field = c->fields + i * off->field_size;
  struct go_string name, value;

  if (bpf_probe_read_user(&name, sizeof(name), (void *)(field + off->field_name)) ||
      bpf_probe_read_user(&value, sizeof(value), (void *)(field + off->field_value))) {
    count(&drops, SW_DROP_READ_FAILED);
    return 1;
  }
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

SEC("uprobe")
int BPF_UPROBE(h2_process_headers) {
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
  if (bpf_probe_read_user(&headers_frame, sizeof(headers_frame), (void *)frame) ||
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

  struct copy_fields_ctx c = {.fields = fields.ptr, .off = off, .event = event};
  __u32 n = fields.len > SW_MAX_FIELDS ? SW_MAX_FIELDS : (__u32)fields.len;
  if (fields.len > SW_MAX_FIELDS) count(&drops, SW_DROP_FIELDS_TRUNCATED);
  bpf_loop(n, copy_one_field, &c, 0);
  event->fields_kept = c.kept;
  event->data_len = c.data_len;

  __u64 size = offsetof(struct sw_h2_request, data) + c.data_len;
  if (size > sizeof(*event)) return 0;
  if (bpf_ringbuf_output(&events, event, size, BPF_RB_NO_WAKEUP)) count(&drops, SW_DROP_RINGBUF_FULL);
  return 0;
}

SEC("uprobe")
int BPF_UPROBE(h2_handler_done) {
  count(&hits, 1);
  __u32 slot = (__u32)bpf_get_attach_cookie(ctx);
  const struct sw_go_offsets *off = bpf_map_lookup_elem(&go_offsets, &slot);
  if (!off) return 0;

  __u64 w = ctx->ax;
  __u64 rws = 0, stream = 0;
  struct sw_h2_response r = {};
  if (bpf_probe_read_user(&rws, sizeof(rws), (void *)(w + off->rw_rws)) ||
      bpf_probe_read_user(&stream, sizeof(stream), (void *)(rws + off->rws_stream)) ||
      bpf_probe_read_user(&r.hdr.conn, sizeof(r.hdr.conn), (void *)(stream + off->stream_sc)) ||
      bpf_probe_read_user(&r.hdr.stream_id, sizeof(r.hdr.stream_id),
                          (void *)(stream + off->stream_id)) ||
      bpf_probe_read_user(&r.status, sizeof(r.status), (void *)(rws + off->rws_status)) ||
      bpf_probe_read_user(&r.wrote_bytes, sizeof(r.wrote_bytes),
                          (void *)(rws + off->rws_wrote_bytes))) {
    count(&drops, SW_DROP_READ_FAILED);
    return 0;
  }
  r.hdr.type = SW_EV_H2_RESPONSE;
  r.hdr.tgid = bpf_get_current_pid_tgid() >> 32;
  r.hdr.ts_ns = bpf_ktime_get_ns();
  r.hdr.target = slot;
  if (bpf_ringbuf_output(&events, &r, sizeof(r), BPF_RB_NO_WAKEUP)) count(&drops, SW_DROP_RINGBUF_FULL);
  return 0;
}
