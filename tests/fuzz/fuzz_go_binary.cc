// Go binaries (agent/capture/elf_file, go_binary, go_types): the ELF headers, .go.buildinfo
// and its module lines, the pclntab's function table, runtime.moduledata and the type
// descriptors the layouts are read from, and the entry/return instruction scans, all from
// bytes of a file the agent did not build. The input is written to a memory file and opened by
// path, as the agent opens /proc/<pid>/exe.
#include <sys/mman.h>
#include <unistd.h>

#include "agent/capture/go_binary.h"
#include "agent/capture/go_types.h"

using namespace stormwatch;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static int fd = memfd_create("fuzz_go_binary", 0);
  if (fd < 0) abort();
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) abort();
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  auto elf = ElfFile::Open(path);
  if (!elf) return 0;
  (void)elf->FindSection(".text");
  auto binary = GoBinary::Open(path);
  if (!binary) return 0;
  (void)binary->build_info().FindModule("golang.org/x/net");
  size_t n = 0;
  for (const GoFunction& fn : binary->functions()) {
    if (++n > 64) break;
    (void)binary->FindFunction(fn.name);
    (void)binary->ReturnInstructionOffsets(fn);
    (void)binary->EntryProbeSiteOf(fn);
  }
  auto types = binary->types();
  if (!types) return 0;
  n = 0;
  for (const std::string& name : (*types)->NamedTypes()) {
    if (++n > 64) break;
    auto type = (*types)->FindNamed(name);
    if (!type) continue;
    (void)(*types)->PointerTo(*type);
    (void)(*types)->Elem(*type);
    (void)(*types)->MapLayout(*type);
    if (auto fields = (*types)->StructFields(*type); fields && !fields->empty()) {
      (void)(*types)->Field(name, (*fields)[0].name);
    }
  }
  (void)(*types)->FindNamedSuffix("http2.serverConn");
  return 0;
}
