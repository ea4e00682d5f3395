// Reading a traced process's memory from user space (process_vm_readv): the few Go value
// shapes the capture readers follow, and a read that fails (gone, unmapped, address 0) rather
// than faults.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

namespace stormwatch {

struct GoSlice {
  uint64_t ptr, len, cap;
};

struct GoInterface {
  uint64_t itab, data;
};

inline bool ReadRemote(pid_t pid, uint64_t address, void* out, size_t size) {
  if (address == 0) return false;
  iovec local{out, size};
  iovec remote{reinterpret_cast<void*>(address), size};
  return process_vm_readv(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(size);
}

template <typename T>
bool ReadRemote(pid_t pid, uint64_t address, T* out) {
  return ReadRemote(pid, address, out, sizeof(T));
}

}  // namespace stormwatch
