// The kernels the agent runs on: the BPF object calls bpf_loop (Linux 5.17), is loaded with
// CO-RE against the kernel's BTF (/sys/kernel/btf/vmlinux), and is built for x86_64
// (-D__TARGET_ARCH_x86, pt_regs offsets, the Go register ABI on amd64). Checked at start,
// before anything is loaded, so an unsupported node gets one clear line instead of a verifier
// dump.
#pragma once

#include <string>

namespace stormwatch {

inline constexpr int kExitUnsupportedKernel = 3;

struct KernelFacts {
  std::string release;  // uname -r: "6.1.0-28-amd64"
  std::string machine;  // uname -m: "x86_64"
  bool btf = false;     // /sys/kernel/btf/vmlinux exists
};

// This machine's; `release_override` (non-empty) replaces uname's release.
KernelFacts ThisKernel(const std::string& release_override = "");
// "" when the agent can run on `k`, else the message to refuse with.
std::string KernelProblem(const KernelFacts& k);

}  // namespace stormwatch
