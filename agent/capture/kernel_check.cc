#include "agent/capture/kernel_check.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <charconv>

namespace stormwatch {
namespace {

// "major.minor" at the start of a release ("5.17.0-rc1", "6.1.0-28-amd64"); false if absent.
bool ParseVersion(const std::string& release, int& major, int& minor) {
  const char* p = release.data();
  const char* end = p + release.size();
  auto a = std::from_chars(p, end, major);
  if (a.ec != std::errc() || a.ptr == end || *a.ptr != '.') return false;
  auto b = std::from_chars(a.ptr + 1, end, minor);
  return b.ec == std::errc();
}

}  // namespace

KernelFacts ThisKernel(const std::string& release_override) {
  KernelFacts k;
  utsname u{};
  if (uname(&u) == 0) {
    k.release = u.release;
    k.machine = u.machine;
  }
  if (!release_override.empty()) k.release = release_override;
  k.btf = access("/sys/kernel/btf/vmlinux", R_OK) == 0;
  return k;
}

std::string KernelProblem(const KernelFacts& k) {
  int major = 0, minor = 0;
  bool parsed = ParseVersion(k.release, major, minor);
  bool new_enough = parsed && (major > 5 || (major == 5 && minor >= 17));
  if (new_enough && k.btf && k.machine == "x86_64") return "";
  std::string missing;
  auto add = [&](const std::string& what) { missing += (missing.empty() ? "" : ", ") + what; };
  if (!new_enough) add("kernel " + (k.release.empty() ? std::string("unknown") : k.release));
  if (!k.btf) add("no /sys/kernel/btf/vmlinux (CONFIG_DEBUG_INFO_BTF)");
  if (k.machine != "x86_64") add("machine " + (k.machine.empty() ? std::string("unknown") : k.machine));
  return "stormwatch needs Linux >= 5.17 (bpf_loop) with BTF on x86_64; this node has " + missing +
         ": see README Requirements";
}

}  // namespace stormwatch
