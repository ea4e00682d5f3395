/* The context of ring_flood.bpf.c's program: given to bpf_prog_test_run_opts as ctx_in, which
 * the kernel copies back after the run (BPF_PROG_TYPE_SYSCALL). Shared with ring_flood.cc. */
#ifndef STORMWATCH_RING_FLOOD_H
#define STORMWATCH_RING_FLOOD_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

struct sw_flood_args {
  __u64 first_seq;      /* in: sequence number of the first request (names stream and object) */
  __u32 count;          /* in: requests to write */
  __u32 submitted;      /* out: requests whose two events were submitted */
  __u32 dropped;        /* out: requests given up for want of room (2 drops counted each) */
  __u32 request_bytes;  /* out: size of one sw_h2_request event */
  __u32 response_bytes; /* out: size of one sw_h2_response event */
  __u32 pad;
};

#endif
