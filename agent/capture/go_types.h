// Go runtime type descriptors read from a Go executable's own file: the struct layouts (field
// names, offsets, types) the BPF programs and the agent read inside a target, derived from the
// target itself instead of a table typed by hand. Release kube-apiserver and etcd are stripped
// (-s -w: no DWARF, no symbols), but the runtime needs a descriptor for every type that is heap
// allocated, converted to an interface or reached by reflection, so those stay.
//
// The way in is runtime.firstmoduledata (runtime/symtab.go `moduledata`): since Go 1.26 the
// `.go.module` section; before, a word in .noptrdata that points at .gopclntab (moduledata's
// first field is its *pcHeader). Its `types` bounds the descriptors and anchors every name and
// type offset; its `typelinks` (up to Go 1.26) lists the unnamed composite types (*T, []T, ...),
// and from Go 1.27 those descriptors lie contiguous from `types` on. Named structs are found by
// walking from there (pointer elements, fields, map keys and elements, function parameters,
// interface methods), as GoReSym does. Every address and count is checked against the file:
// a hostile or corrupt binary gives an error, never a read outside it or an unbounded walk.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "agent/capture/elf_file.h"
#include "agent/core/result.h"

namespace stormwatch {

// The parts of runtime.moduledata the agent uses, read and checked against the ELF sections.
struct GoModuleData {
  uint64_t vaddr = 0;     // of the moduledata itself
  uint64_t pcheader = 0;  // .gopclntab's address
  uint64_t text = 0;      // runtime.text: base of the pclntab's function offsets (Go 1.18+)
  uint64_t etext = 0;
  uint64_t types = 0;     // runtime.types: base of every nameOff and typeOff
  uint64_t etypes = 0;
  uint64_t typedesclen = 0;       // Go 1.27+: bytes of contiguous typelink descriptors
  uint64_t typelinks = 0;         // up to Go 1.26: vaddr of the []int32 typelinks
  uint64_t typelinks_count = 0;
};

// Finds and checks moduledata for a binary built by Go 1.`go_minor` (18..27) whose .gopclntab
// is at `pclntab_vaddr`.
Result<GoModuleData> FindGoModuleData(const ElfFile& elf, int go_minor, uint64_t pclntab_vaddr);

// Kinds (internal/abi.Kind), the values that matter here.
enum class GoKind : uint8_t {
  kBool = 1, kInt = 2, kInt8 = 3, kInt16 = 4, kInt32 = 5, kInt64 = 6, kUint = 7, kUint8 = 8,
  kUint16 = 9, kUint32 = 10, kUint64 = 11, kUintptr = 12, kFloat32 = 13, kFloat64 = 14,
  kComplex64 = 15, kComplex128 = 16, kArray = 17, kChan = 18, kFunc = 19, kInterface = 20,
  kMap = 21, kPointer = 22, kSlice = 23, kString = 24, kStruct = 25, kUnsafePointer = 26,
};
std::string_view GoKindName(GoKind kind);

struct GoType {
  uint64_t vaddr = 0;
  GoKind kind{};
  uint64_t size = 0;
  std::string name;  // as Go prints it, package-qualified by path: "golang.org/x/net/http2.stream",
                     // "*net/http.conn", "[]string", "map[string][]string"; named types by path
};

struct GoStructField {
  std::string name;
  uint64_t offset = 0;
  bool embedded = false;
  GoType type;
};

// The layout of a map type, read from its descriptor (Go 1.24+ Swiss tables: a group of 8 slots
// after a control word; before: buckets of 8 keys then 8 elems then an overflow pointer).
struct GoMapLayout {
  bool swiss = false;
  uint64_t key_size = 0, elem_size = 0;
  // Swiss tables (Go 1.24+): group size, and where slot i's key and elem sit in a group.
  uint64_t group_size = 0;
  uint64_t keys_offset = 0, key_stride = 0, elems_offset = 0, elem_stride = 0;
  // Buckets (up to Go 1.23): bucket size; keys at 8, elems after 8 keys, overflow last.
  uint64_t bucket_size = 0;
};

class GoTypes {
 public:
  // Reads every type descriptor reachable from moduledata. `go_minor` as for FindGoModuleData.
  static Result<GoTypes> Read(const ElfFile& elf, const GoModuleData& md, int go_minor);

  // A named type by its package path and name: "golang.org/x/net/http2.serverConn".
  std::optional<GoType> FindNamed(std::string_view qualified_name) const;
  // The one named type whose qualified name ends in `suffix` after a '/' or at the start:
  // "etcdserverpb.RangeRequest" finds go.etcd.io/etcd/api/v3/etcdserverpb.RangeRequest (module
  // builds) and go.etcd.io/etcd/api/etcdserverpb.RangeRequest (GOPATH builds). nullopt when
  // none, or when more than one match.
  std::optional<GoType> FindNamedSuffix(std::string_view suffix) const;
  // The pointer type *T of a type T, when the binary has one (an interface holding a *T has).
  std::optional<GoType> PointerTo(const GoType& type) const;
  // The fields of a struct type.
  Result<std::vector<GoStructField>> StructFields(const GoType& type) const;
  // The element type of a pointer, slice, array or chan.
  Result<GoType> Elem(const GoType& type) const;
  Result<GoMapLayout> MapLayout(const GoType& map_type) const;

  // Offset of a dotted field path inside a named struct, through embedded or nested struct
  // values (never through a pointer): ("golang.org/x/net/http2.HeadersFrame",
  // "FrameHeader.StreamID"). The error names the type and the field that is missing.
  Result<GoStructField> Field(std::string_view qualified_struct, std::string_view path) const;

  // Every named type found, by qualified name (for tests and diagnostics).
  std::vector<std::string> NamedTypes() const;

  size_t type_count() const { return visited_; }
  size_t named_count() const { return named_.size(); }

 private:
  GoTypes(const ElfFile& elf, const GoModuleData& md, int go_minor)
      : elf_(elf), md_(md), go_minor_(go_minor) {}
  Result<bool> Walk();
  Result<GoType> Describe(uint64_t vaddr) const;
  std::optional<std::string> NameAt(uint64_t vaddr, bool* embedded = nullptr) const;
  std::optional<std::string> PkgPathOf(uint64_t vaddr, uint8_t tflag, GoKind kind) const;
  // Bytes of names one walk, or one StructFields, may copy: a small multiple of runtime.types.
  // Names live once each in it, so real binaries stay far below; a crafted one pointing every
  // descriptor or field at one long name would otherwise be copied per reference.
  uint64_t NameBudget() const;

  ElfFile elf_;  // a copy shares the mapping
  GoModuleData md_;
  int go_minor_;
  size_t visited_ = 0;
  std::unordered_map<std::string, uint64_t> named_;  // qualified name -> descriptor vaddr
  std::unordered_map<uint64_t, uint64_t> pointer_to_;  // T's descriptor -> *T's
};

}  // namespace stormwatch
