// GoBinary: what the agent needs from a Go executable (amd64) to attach uprobes, read from the
// file alone: function addresses from .gopclntab, the Go and module versions from
// .go.buildinfo, and RET sites from a disassembly. Needs no .symtab and no DWARF: release
// kube-apiserver and etcd are built with -s -w (DESIGN.md, "Capturing from stripped Go binaries").
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "agent/capture/elf_file.h"
#include "agent/capture/go_types.h"
#include "agent/core/result.h"

namespace stormwatch {

// "go1.21.13" -> {1, 21, 13, ""}; "go1.22rc1" -> {1, 22, 0, "rc1"};
// "go1.21.13 X:boringcrypto" -> {1, 21, 13, " X:boringcrypto"}. "devel ..." is an error.
struct GoVersion {
  int major = 0, minor = 0, patch = 0;
  std::string suffix;  // anything after the numbers: a pre-release, an experiment, a vendor tag
  static Result<GoVersion> Parse(std::string_view text);
  bool is_release() const { return suffix.empty(); }
  auto operator<=>(const GoVersion&) const = default;
};

struct GoFunction {
  std::string name;          // e.g. "golang.org/x/net/http2.(*serverConn).processHeaders"
  uint64_t entry = 0;        // vaddr of the first instruction
  uint64_t end = 0;          // vaddr just past the function: the next function's entry
  uint64_t file_offset = 0;  // file offset of `entry`, where a uprobe attaches
  // _func.args: bytes of arguments and results (receiver included), the spill area of the
  // register ABI; a function's shape, checked before it is probed.
  int32_t args = 0;
};

struct GoModuleVersion {
  std::string path;
  std::string version;  // empty for a local directory replacement
  std::string sum;
};

struct GoModule : GoModuleVersion {
  std::optional<GoModuleVersion> replace;  // set by a go.mod `replace` directive
  // The version compiled in: the replacement's when replaced ("" if replaced by a directory).
  const std::string& effective_version() const { return replace ? replace->version : version; }
};

struct GoBuildInfo {
  std::string go_version;                                     // "go1.19.8"
  std::string path;                                           // main package path
  std::optional<GoModule> main;                               // absent for GOPATH-mode builds
  std::vector<GoModule> deps;                                 // empty for GOPATH-mode builds
  std::vector<std::pair<std::string, std::string>> settings;  // "build" lines, values verbatim
  // The main module or a dependency with this module path.
  const GoModule* FindModule(std::string_view module_path) const;
};

// Parses runtime/debug's module info text (as in runtime/debug.ParseBuildInfo).
Result<GoBuildInfo> ParseGoModInfo(std::string_view go_version, std::string_view modinfo);

// File offsets (base_offset + index into `code`) of every RET instruction (C3, C2 iw, REP RET),
// by a linear sweep with capstone; undecodable bytes are an error rather than a guess.
Result<std::vector<uint64_t>> FindReturnInstructions(std::span<const uint8_t> code,
                                                     uint64_t base_offset);

// Where an entry uprobe goes in a Go function: on the conditional branch of its stack-growth
// check (CMPQ 16(R14), SP|R12; JBE|JB morestack), with the EFLAGS that mean the branch is taken.
// The kernel emulates a conditional branch under a uprobe (one trap); most other first
// instructions (Go <= 1.20 starts the frame with SUBQ) are single-stepped out of line, a second
// trap that costs ~14 us more per hit on a virtualised host. When the branch will be taken, the
// call grows its stack and re-runs from its entry: the BPF program skips that hit (the flags say
// so), and the re-run is seen once. Argument registers are untouched up to the branch.
// A function without the check (NOSPLIT) gets its entry and no flags.
struct EntryProbeSite {
  uint64_t offset = 0;               // file offset
  uint32_t morestack_if_flags = 0;   // EFLAGS mask: CF|ZF for JBE, CF for JB; 0 for none
};
Result<EntryProbeSite> FindEntryProbeSite(std::span<const uint8_t> code, uint64_t base_offset);

class GoBinary {
 public:
  static Result<GoBinary> Open(const std::string& path);

  const ElfFile& elf() const { return elf_; }
  const GoBuildInfo& build_info() const { return build_info_; }
  const std::string& go_version() const { return build_info_.go_version; }
  uint32_t pclntab_magic() const { return pclntab_magic_; }
  // runtime.firstmoduledata, or why it could not be read (Go before 1.18, corrupt data).
  const Result<GoModuleData>& module_data() const { return module_data_; }
  // The runtime type descriptors (struct layouts), read on first use: ~0.1-0.5 s for a
  // 100 MB binary. The pointer lives as long as this GoBinary (and its copies).
  Result<const GoTypes*> types() const;

  // Every function of the pclntab, sorted by entry.
  const std::vector<GoFunction>& functions() const { return functions_; }
  // By exact pclntab name. A few names repeat (an assembly function's ABI0 wrapper; generic
  // instantiations, whose type arguments the pclntab shortens to "[...]"): the lowest entry wins.
  std::optional<GoFunction> FindFunction(std::string_view name) const;
  Result<std::vector<uint64_t>> ReturnInstructionOffsets(const GoFunction& fn) const;
  // Where an entry probe belongs: see FindEntryProbeSite.
  Result<EntryProbeSite> EntryProbeSiteOf(const GoFunction& fn) const;

 private:
  explicit GoBinary(ElfFile elf) : elf_(std::move(elf)) {}
  Result<bool> ReadPclntab();
  Result<bool> ReadBuildInfo();
  void ReadModuleData();

  ElfFile elf_;
  GoBuildInfo build_info_;
  uint32_t pclntab_magic_ = 0;
  Result<GoModuleData> module_data_ = Error{"not read"};
  struct TypesCache {
    std::optional<Result<GoTypes>> types;
  };
  std::shared_ptr<TypesCache> types_ = std::make_shared<TypesCache>();
  std::vector<GoFunction> functions_;
  // Keys view the names inside the mapped file, which every copy of elf_ keeps alive.
  std::unordered_map<std::string_view, uint32_t> by_name_;
};

}  // namespace stormwatch
