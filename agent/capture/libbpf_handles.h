// Owning handles for libbpf's C objects: each is freed by its own libbpf destructor when the
// handle goes, so a failed attach or a thrown exception cannot leak a link or leave a probe in
// a target.
#pragma once

#include <memory>

struct bpf_link;
struct ring_buffer;

namespace stormwatch {

struct BpfLinkDeleter {
  void operator()(bpf_link* link) const;  // bpf_link__destroy: detaches the probe
};
using BpfLink = std::unique_ptr<bpf_link, BpfLinkDeleter>;

struct RingBufferDeleter {
  void operator()(ring_buffer* ring) const;  // ring_buffer__free
};
using RingBuffer = std::unique_ptr<ring_buffer, RingBufferDeleter>;
}  // namespace stormwatch
