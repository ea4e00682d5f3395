#include "agent/capture/go_binary.h"

#include <capstone/capstone.h>
#include <elf.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <memory>

namespace stormwatch {
namespace {

// .gopclntab header magics (Go's src/debug/gosym/pclntab.go).
constexpr uint32_t kGo12Magic = 0xfffffffb;   // Go 1.2 - 1.15
constexpr uint32_t kGo116Magic = 0xfffffffa;  // Go 1.16 - 1.17
constexpr uint32_t kGo118Magic = 0xfffffff0;  // Go 1.18 - 1.19
constexpr uint32_t kGo120Magic = 0xfffffff1;  // Go 1.20+
constexpr size_t kPclnHeaderSize = 8;         // magic, two zero bytes, pc quantum, pointer size
constexpr size_t kPtrSize = 8;                // amd64

// .go.buildinfo (Go's src/debug/buildinfo/buildinfo.go).
constexpr std::string_view kBuildInfoMagic = "\xff Go buildinf:";
constexpr size_t kBuildInfoHeaderSize = 32;
constexpr size_t kBuildInfoAlign = 16;
constexpr uint64_t kBuildInfoSearchSize = 64 * 1024;
constexpr uint8_t kBuildInfoFlagBigEndian = 0x1;
constexpr uint8_t kBuildInfoFlagInline = 0x2;  // Go 1.18+: varint-prefixed strings follow
constexpr size_t kModInfoSentinelSize = 16;    // cmd/go's infoStart/infoEnd framing

std::string Hex(uint64_t v) {
  char buf[24];
  snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// Little-endian unsigned integer of `size` bytes at `offset`, or nullopt past the end.
std::optional<uint64_t> ReadUint(std::span<const uint8_t> data, uint64_t offset, size_t size) {
  if (offset > data.size() || size > data.size() - offset) return std::nullopt;
  uint64_t value = 0;
  for (size_t i = 0; i < size; ++i) value |= uint64_t{data[offset + i]} << (8 * i);
  return value;
}

// NUL-terminated string at `offset`; nullopt if it runs off the end.
std::optional<std::string_view> ReadCString(std::span<const uint8_t> data, uint64_t offset) {
  if (offset >= data.size()) return std::nullopt;
  const char* start = reinterpret_cast<const char*>(data.data() + offset);
  const void* nul = std::memchr(start, 0, data.size() - offset);
  if (nul == nullptr) return std::nullopt;
  return std::string_view(start, static_cast<const char*>(nul) - start);
}

struct RawFunction {
  std::string_view name;  // views the mapped file
  uint64_t entry;
  uint64_t end;
  int32_t args;
};

// Decodes the function table of one pclntab candidate. `tab` runs from the header to the end of
// the section (or of the segment, when found by scanning).
// `module_text` is moduledata.text, the base of function offsets when the header has none
// (Go 1.26 dropped pcHeader.textStart); 0 if moduledata was not found.
Result<std::vector<RawFunction>> ParsePclntab(std::span<const uint8_t> tab, uint64_t module_text) {
  auto magic = ReadUint(tab, 0, 4);
  if (!magic || tab.size() < kPclnHeaderSize + 8 * kPtrSize) return Error{"pclntab truncated"};
  if (tab[4] != 0 || tab[5] != 0 || (tab[6] != 1 && tab[6] != 2 && tab[6] != 4) ||
      tab[7] != kPtrSize) {
    return Error{"pclntab header is not a 64-bit Go pclntab"};
  }
  auto word = [&](size_t n) { return *ReadUint(tab, kPclnHeaderSize + n * kPtrSize, kPtrSize); };
  auto sub = [&](uint64_t offset) -> std::optional<std::span<const uint8_t>> {
    if (offset > tab.size()) return std::nullopt;
    return tab.subspan(offset);
  };

  uint64_t nfunc = word(0);
  uint64_t text_start = 0;       // added to functab pcs; they are absolute before Go 1.18
  size_t field_size = kPtrSize;  // functab entries and _func's first field (entry)
  std::optional<std::span<const uint8_t>> names, funcdata, functab;
  switch (*magic) {
    case kGo118Magic:
    case kGo120Magic:
      // The header's textStart (runtime.text) rather than .text's address, as Go's debug/gosym
      // does: with external linking (etcd) C code precedes runtime.text in .text.
      text_start = word(2);
      field_size = 4;
      names = sub(word(3));
      funcdata = functab = sub(word(7));
      break;
    case kGo116Magic:
      names = sub(word(2));
      funcdata = functab = sub(word(6));
      break;
    case kGo12Magic:
      names = funcdata = tab;
      functab = sub(kPclnHeaderSize + kPtrSize);
      break;
    default:
      return Error{"unknown pclntab magic " + Hex(*magic), ErrorCode::kUnsupported};
  }
  if (!names || !funcdata || !functab) return Error{"pclntab table offsets lie outside it"};
  if (nfunc == 0 || nfunc > functab->size() / (2 * field_size)) {
    return Error{"pclntab function count " + std::to_string(nfunc) + " does not fit the table"};
  }
  if ((*magic == kGo118Magic || *magic == kGo120Magic) && text_start == 0) {
    text_start = module_text;
    if (text_start == 0) {
      return Error{"pclntab has no text start and runtime.moduledata was not found", ErrorCode::kNotFound};
    }
  }

  auto field = [&](uint64_t i) { return ReadUint(*functab, i * field_size, field_size); };
  std::vector<RawFunction> functions;
  functions.reserve(nfunc);
  for (uint64_t i = 0; i < nfunc; ++i) {
    auto entry = field(2 * i);
    auto func_offset = field(2 * i + 1);
    auto end = field(2 * i + 2);  // the next entry, or the table's end pc after the last pair
    if (!entry || !func_offset || !end) return Error{"pclntab function table truncated"};
    if (*end < *entry)
      return Error{"pclntab function table not sorted at index " + std::to_string(i)};
    // _func starts with the entry (uintptr, uint32 since 1.18), then nameOff int32.
    auto name_offset = ReadUint(*funcdata, *func_offset + field_size, 4);
    auto args = ReadUint(*funcdata, *func_offset + field_size + 4, 4);  // _func.args follows
    if (!name_offset || !args) return Error{"pclntab _func record outside the table"};
    auto name = ReadCString(*names, *name_offset);
    if (!name) return Error{"pclntab function name outside the name table"};
    functions.push_back({*name, text_start + *entry, text_start + *end, static_cast<int32_t>(*args)});
  }
  return functions;
}

// Candidate pclntab headers tried when there are no section headers: each failed candidate is
// parsed up to its (file-sized) function table, so a file full of header look-alikes would
// otherwise take time quadratic in its size. A real binary has one.
constexpr size_t kMaxPclntabCandidates = 16;

// Offsets at which the bytes look like a little-endian 64-bit pclntab header (at most `max`).
std::vector<uint64_t> ScanForPclntab(std::span<const uint8_t> data, size_t max) {
  std::vector<uint64_t> hits;
  static constexpr uint8_t kTail[] = {0xff, 0xff, 0xff, 0x00, 0x00};
  const uint8_t* base = data.data();
  const uint8_t* p = base;
  const uint8_t* end = base + data.size();
  while (end - p >= 8 && hits.size() < max) {
    auto* hit = static_cast<const uint8_t*>(memmem(p, end - p, kTail, sizeof(kTail)));
    if (hit == nullptr) break;
    p = hit + 1;
    if (hit == base || end - hit < 7) continue;
    uint8_t low = hit[-1];
    uint8_t quantum = hit[5];
    if ((low == 0xf0 || low == 0xf1 || low == 0xfa || low == 0xfb) &&
        (quantum == 1 || quantum == 2 || quantum == 4) && hit[6] == kPtrSize) {
      hits.push_back(hit - 1 - base);
    }
  }
  return hits;
}

std::optional<std::pair<uint64_t, size_t>> Uvarint(std::span<const uint8_t> data) {
  uint64_t value = 0;
  for (size_t i = 0; i < data.size() && i < 10; ++i) {
    if (i == 9 && data[i] > 1) return std::nullopt;  // overflows 64 bits
    value |= uint64_t{data[i] & 0x7fu} << (7 * i);
    if (data[i] < 0x80) return std::make_pair(value, i + 1);
  }
  return std::nullopt;
}

// A varint-length-prefixed string; advances `data` past it.
std::optional<std::string_view> ReadVarintString(std::span<const uint8_t>& data) {
  auto len = Uvarint(data);
  if (!len || len->first > data.size() - len->second) return std::nullopt;
  std::string_view s(reinterpret_cast<const char*>(data.data() + len->second), len->first);
  data = data.subspan(len->second + len->first);
  return s;
}

// A Go string header {ptr, len} at `vaddr`, and the bytes it points to.
std::optional<std::string_view> ReadGoString(const ElfFile& elf, uint64_t vaddr) {
  auto header = elf.BytesAtVaddr(vaddr, 2 * kPtrSize);
  if (!header) return std::nullopt;
  uint64_t data_vaddr = *ReadUint(*header, 0, kPtrSize);
  uint64_t len = *ReadUint(*header, kPtrSize, kPtrSize);
  if (len == 0) return std::string_view();
  auto bytes = elf.BytesAtVaddr(data_vaddr, len);
  if (!bytes) return std::nullopt;
  return std::string_view(reinterpret_cast<const char*>(bytes->data()), bytes->size());
}

std::vector<std::string_view> SplitTabs(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t tab = s.find('\t', start);
    out.push_back(s.substr(start, tab == std::string_view::npos ? tab : tab - start));
    if (tab == std::string_view::npos) return out;
    start = tab + 1;
  }
}

struct CapstoneCloser {
  void operator()(csh* handle) const {
    cs_close(handle);
    delete handle;
  }
};
struct InsnFree {
  void operator()(cs_insn* insn) const { cs_free(insn, 1); }
};

}  // namespace

Result<GoVersion> GoVersion::Parse(std::string_view text) {
  if (!text.starts_with("go")) return Error{"not a Go release version: '" + std::string(text) + "'", ErrorCode::kUnsupported};
  GoVersion v;
  const char* p = text.data() + 2;
  const char* end = text.data() + text.size();
  int* parts[] = {&v.major, &v.minor, &v.patch};
  for (int i = 0; i < 3; ++i) {
    auto [next, ec] = std::from_chars(p, end, *parts[i]);
    if (ec != std::errc() || *parts[i] < 0) {
      if (i < 2) return Error{"malformed Go version '" + std::string(text) + "'"};
      break;  // "go1.21rc2" was stopped at the suffix below; "go1.21." is a suffix "."
    }
    p = next;
    if (i < 2 && p + 1 < end && *p == '.' && p[1] >= '0' && p[1] <= '9') {
      ++p;
    } else {
      break;
    }
  }
  v.suffix.assign(p, end);
  if (v.major != 1) return Error{"unsupported Go major version in '" + std::string(text) + "'", ErrorCode::kUnsupported};
  return v;
}

const GoModule* GoBuildInfo::FindModule(std::string_view module_path) const {
  if (main && main->path == module_path) return &*main;
  for (const GoModule& dep : deps) {
    if (dep.path == module_path) return &dep;
  }
  return nullptr;
}

Result<GoBuildInfo> ParseGoModInfo(std::string_view go_version, std::string_view modinfo) {
  GoBuildInfo info;
  info.go_version = go_version;
  // Which module a "=>" line replaces: none, the main module, or deps[last].
  constexpr int kNone = -2, kMain = -1;
  int last = kNone;
  int line_number = 0;
  auto fail = [&](const std::string& what) {
    return Error{"Go build info line " + std::to_string(line_number) + ": " + what};
  };
  auto module = [](const std::vector<std::string_view>& cols) {
    GoModule m;
    m.path = cols[0];
    m.version = cols[1];
    if (cols.size() == 3) m.sum = cols[2];
    return m;
  };
  // Like runtime/debug.ParseBuildInfo, only newline-terminated lines count.
  for (size_t nl; (nl = modinfo.find('\n')) != std::string_view::npos;
       modinfo.remove_prefix(nl + 1)) {
    std::string_view line = modinfo.substr(0, nl);
    ++line_number;
    auto take = [&](std::string_view prefix) {
      if (!line.starts_with(prefix)) return false;
      line.remove_prefix(prefix.size());
      return true;
    };
    if (take("path\t")) {
      info.path = line;
    } else if (line.starts_with("mod\t") || line.starts_with("dep\t")) {
      bool is_main = line.starts_with("mod\t");
      auto cols = SplitTabs(line.substr(4));
      if (cols.size() != 2 && cols.size() != 3) return fail("expected 2 or 3 columns");
      if (is_main) {
        info.main = module(cols);
        last = kMain;
      } else {
        info.deps.push_back(module(cols));
        last = static_cast<int>(info.deps.size()) - 1;
      }
    } else if (take("=>\t")) {
      auto cols = SplitTabs(line);
      if (cols.size() != 3) return fail("expected 3 columns for a replacement");
      if (last == kNone) return fail("replacement with no module on the previous line");
      GoModule& replaced = last == kMain ? *info.main : info.deps[last];
      replaced.replace =
          GoModuleVersion{std::string(cols[0]), std::string(cols[1]), std::string(cols[2])};
      last = kNone;
    } else if (take("build\t")) {
      size_t eq = line.find('=');
      if (eq == std::string_view::npos || eq == 0) return fail("build line without key=value");
      info.settings.emplace_back(line.substr(0, eq), line.substr(eq + 1));
    }
  }
  return info;
}

Result<std::vector<uint64_t>> FindReturnInstructions(std::span<const uint8_t> code,
                                                     uint64_t base_offset) {
  std::unique_ptr<csh, CapstoneCloser> handle(new csh{});
  if (cs_open(CS_ARCH_X86, CS_MODE_64, handle.get()) != CS_ERR_OK) {
    delete handle.release();
    return Error{"capstone: cannot open an x86-64 disassembler", ErrorCode::kSystem};
  }
  std::unique_ptr<cs_insn, InsnFree> insn(cs_malloc(*handle));
  if (!insn) return Error{"capstone: out of memory", ErrorCode::kSystem};
  std::vector<uint64_t> rets;
  const uint8_t* p = code.data();
  size_t left = code.size();
  uint64_t address = base_offset;
  while (left > 0) {
    if (!cs_disasm_iter(*handle, &p, &left, &address, insn.get())) {
      return Error{"undecodable instruction at file offset " + Hex(address)};
    }
    // One id covers C3, C2 iw and prefixed forms (F3 C3, "rep ret").
    if (insn->id == X86_INS_RET) rets.push_back(insn->address);
  }
  return rets;
}

Result<EntryProbeSite> FindEntryProbeSite(std::span<const uint8_t> code, uint64_t base_offset) {
  constexpr uint32_t kCarry = 1u << 0, kZero = 1u << 6;  // x86 EFLAGS CF, ZF
  std::unique_ptr<csh, CapstoneCloser> handle(new csh{});
  if (cs_open(CS_ARCH_X86, CS_MODE_64, handle.get()) != CS_ERR_OK) {
    delete handle.release();
    return Error{"capstone: cannot open an x86-64 disassembler", ErrorCode::kSystem};
  }
  if (cs_option(*handle, CS_OPT_DETAIL, CS_OPT_ON) != CS_ERR_OK) {
    return Error{"capstone: cannot enable instruction details", ErrorCode::kSystem};
  }
  std::unique_ptr<cs_insn, InsnFree> insn(cs_malloc(*handle));
  if (!insn) return Error{"capstone: out of memory", ErrorCode::kSystem};
  const uint8_t* p = code.data();
  size_t left = code.size();
  uint64_t address = base_offset;
  // The prologue is at most: LEAQ -n(SP), R12; CMPQ 16(R14), R12|SP; JBE morestack.
  bool compared_stack_guard = false;
  for (int i = 0; i < 3 && left > 0; ++i) {
    if (!cs_disasm_iter(*handle, &p, &left, &address, insn.get())) {
      return Error{"undecodable instruction at file offset " + Hex(address)};
    }
    const cs_x86& x86 = insn->detail->x86;
    if (insn->id == X86_INS_CMP) {
      // g.stackguard0 is at offset 16 of the g that R14 holds (Go register ABI).
      for (int op = 0; op < x86.op_count; ++op) {
        const cs_x86_op& o = x86.operands[op];
        if (o.type == X86_OP_MEM && o.mem.base == X86_REG_R14 && o.mem.disp == 16) {
          compared_stack_guard = true;
        }
      }
    } else if (compared_stack_guard && (insn->id == X86_INS_JBE || insn->id == X86_INS_JB)) {
      // `address` has moved past the branch; insn->address is the branch itself.
      return EntryProbeSite{insn->address, insn->id == X86_INS_JBE ? kCarry | kZero : kCarry};
    }
  }
  return EntryProbeSite{base_offset, 0};  // no stack check (NOSPLIT): the entry runs once per call
}

Result<GoBinary> GoBinary::Open(const std::string& path) {
  auto elf = ElfFile::Open(path);
  if (!elf) return elf.error();
  GoBinary binary(std::move(*elf));
  // Build info first: the Go release says where moduledata's fields are, and moduledata.text is
  // where Go 1.26+ function addresses start.
  if (auto ok = binary.ReadBuildInfo(); !ok) return Context(path + ": ", ok.error());
  binary.ReadModuleData();
  if (auto ok = binary.ReadPclntab(); !ok) return Context(path + ": ", ok.error());
  return binary;
}

void GoBinary::ReadModuleData() {
  auto version = GoVersion::Parse(build_info_.go_version);
  const ElfSection* pclntab = elf_.FindSection(".gopclntab");
  if (!pclntab) pclntab = elf_.FindSection(".data.rel.ro.gopclntab");
  if (!version) {
    module_data_ = version.error();
  } else if (!pclntab) {
    module_data_ = Error{"no .gopclntab section to find runtime.moduledata by", ErrorCode::kNotFound};
  } else {
    module_data_ = FindGoModuleData(elf_, version->minor, pclntab->addr);
  }
}

Result<const GoTypes*> GoBinary::types() const {
  if (!types_->types) {
    if (!module_data_) {
      types_->types = Result<GoTypes>(Context("no type data: ", module_data_.error()));
    } else {
      types_->types = GoTypes::Read(elf_, *module_data_, GoVersion::Parse(go_version())->minor);
    }
  }
  if (!*types_->types) return (*types_->types).error();
  return &types_->types->value();
}

Result<bool> GoBinary::ReadPclntab() {
  std::vector<std::span<const uint8_t>> candidates;
  // PIE binaries keep it in a relro section.
  const ElfSection* section = elf_.FindSection(".gopclntab");
  if (!section) section = elf_.FindSection(".data.rel.ro.gopclntab");
  if (section) {
    auto bytes = elf_.BytesAt(section->offset, section->size);
    if (section->type == SHT_NOBITS || !bytes) return Error{".gopclntab lies outside the file"};
    candidates.push_back(*bytes);
  } else {
    // No section headers (or an unusual linker): look for the header in the loaded segments.
    for (const ElfSegment& seg : elf_.segments()) {
      if (seg.type != PT_LOAD) continue;
      auto bytes = *elf_.BytesAt(seg.offset, seg.filesz);  // checked by ElfFile::Open
      for (uint64_t offset : ScanForPclntab(bytes, kMaxPclntabCandidates - candidates.size())) {
        candidates.push_back(bytes.subspan(offset));
      }
    }
    if (candidates.empty()) return Error{"no .gopclntab: not a Go binary", ErrorCode::kNotFound};
  }

  std::optional<Error> first_error;
  for (std::span<const uint8_t> tab : candidates) {
    auto parsed = ParsePclntab(tab, module_data_ ? module_data_->text : 0);
    std::vector<GoFunction> functions;
    if (parsed) {
      functions.reserve(parsed->size());
      // Names live once each in the table's name section, so their copies cannot total more
      // than the table itself; a crafted table pointing every function at one long name
      // would otherwise make us copy it per function (gigabytes from a 1 MB file).
      uint64_t name_bytes = 0;
      for (const RawFunction& raw : *parsed) name_bytes += raw.name.size();
      if (name_bytes > 2 * uint64_t{tab.size()}) {
        parsed = Error{"function names total " + std::to_string(name_bytes) +
                       " bytes, more than twice the pclntab (" + std::to_string(tab.size()) +
                       " bytes): names are shared, crafted or corrupt data", ErrorCode::kLimit};
      }
    }
    if (parsed) {
      for (const RawFunction& raw : *parsed) {
        auto offset = elf_.ExecutableFileOffset(raw.entry);
        if (!offset) {
          parsed = Error{"function " + std::string(raw.name) + " at " + Hex(raw.entry) +
                         " is not in an executable segment"};
          break;
        }
        functions.push_back({std::string(raw.name), raw.entry, raw.end, *offset, raw.args});
      }
    }
    if (!parsed) {
      if (!first_error) first_error = parsed.error();
      continue;
    }
    pclntab_magic_ = *ReadUint(tab, 0, 4);
    functions_ = std::move(functions);
    by_name_.reserve(parsed->size());
    for (uint32_t i = 0; i < parsed->size(); ++i) by_name_.emplace((*parsed)[i].name, i);
    return true;
  }
  return *first_error;  // candidates is not empty
}

Result<bool> GoBinary::ReadBuildInfo() {
  // Like debug/buildinfo: the section if there is one, else the first writable data segment.
  std::optional<uint64_t> start;
  if (const ElfSection* section = elf_.FindSection(".go.buildinfo")) {
    start = section->addr;
  } else {
    for (const ElfSegment& seg : elf_.segments()) {
      if (seg.type == PT_LOAD && (seg.flags & (PF_X | PF_W)) == PF_W) {
        start = seg.vaddr;
        break;
      }
    }
  }
  if (!start) return Error{"no .go.buildinfo and no data segment", ErrorCode::kNotFound};
  std::span<const uint8_t> data;  // up to 64 KiB from `start`, within its segment
  for (const ElfSegment& seg : elf_.segments()) {
    if (seg.type == PT_LOAD && *start >= seg.vaddr && *start - seg.vaddr < seg.filesz) {
      uint64_t size = std::min(kBuildInfoSearchSize, seg.filesz - (*start - seg.vaddr));
      data = *elf_.BytesAtVaddr(*start, size);
      break;
    }
  }
  std::string_view text(reinterpret_cast<const char*>(data.data()), data.size());
  size_t at = 0;
  while (true) {
    at = text.find(kBuildInfoMagic, at);
    if (at == std::string_view::npos || data.size() - at < kBuildInfoHeaderSize) {
      return Error{"no Go build info (.go.buildinfo): not a Go 1.13+ binary, or corrupt", ErrorCode::kNotFound};
    }
    if (at % kBuildInfoAlign == 0) break;
    at = (at / kBuildInfoAlign + 1) * kBuildInfoAlign;
  }
  std::span<const uint8_t> blob = data.subspan(at);
  uint8_t ptr_size = blob[14];
  uint8_t flags = blob[15];

  std::optional<std::string_view> version, modinfo;
  if (flags & kBuildInfoFlagInline) {
    std::span<const uint8_t> rest = blob.subspan(kBuildInfoHeaderSize);
    version = ReadVarintString(rest);
    if (version) modinfo = ReadVarintString(rest);
  } else {
    if (ptr_size != kPtrSize || (flags & kBuildInfoFlagBigEndian)) {
      return Error{"Go build info is not for a 64-bit little-endian target", ErrorCode::kUnsupported};
    }
    version = ReadGoString(elf_, *ReadUint(blob, 16, kPtrSize));
    if (version) modinfo = ReadGoString(elf_, *ReadUint(blob, 16 + kPtrSize, kPtrSize));
  }
  if (!version || !modinfo) return Error{"Go build info strings lie outside the file"};
  if (version->empty()) return Error{"Go build info has no Go version"};
  // Module info is framed by 16-byte sentinels; anything else means no module info.
  if (modinfo->size() >= 2 * kModInfoSentinelSize + 1 &&
      (*modinfo)[modinfo->size() - kModInfoSentinelSize - 1] == '\n') {
    *modinfo = modinfo->substr(kModInfoSentinelSize, modinfo->size() - 2 * kModInfoSentinelSize);
  } else {
    *modinfo = {};
  }
  auto info = ParseGoModInfo(*version, *modinfo);
  if (!info) return info.error();
  build_info_ = std::move(*info);
  return true;
}

std::optional<GoFunction> GoBinary::FindFunction(std::string_view name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  return functions_[it->second];
}

Result<EntryProbeSite> GoBinary::EntryProbeSiteOf(const GoFunction& fn) const {
  uint64_t size = std::min<uint64_t>(fn.end - fn.entry, 64);
  auto code = fn.end > fn.entry ? elf_.BytesAt(fn.file_offset, size) : std::nullopt;
  if (!code) return Error{"function " + fn.name + " lies outside the file"};
  auto site = FindEntryProbeSite(*code, fn.file_offset);
  if (!site) return Context(fn.name + ": ", site.error());
  return site;
}

Result<std::vector<uint64_t>> GoBinary::ReturnInstructionOffsets(const GoFunction& fn) const {
  uint64_t size = fn.end - fn.entry;
  // The whole body must lie in the same executable segment as its entry.
  auto last = size > 0 ? elf_.ExecutableFileOffset(fn.end - 1) : std::nullopt;
  if (fn.end <= fn.entry || !last || *last != fn.file_offset + size - 1) {
    return Error{"function " + fn.name + " [" + Hex(fn.entry) + ", " + Hex(fn.end) +
                 ") is not within one executable segment"};
  }
  auto code = elf_.BytesAt(fn.file_offset, size);
  if (!code) return Error{"function " + fn.name + " lies outside the file"};
  auto rets = FindReturnInstructions(*code, fn.file_offset);
  if (!rets) return Context(fn.name + ": ", rets.error());
  return rets;
}

}  // namespace stormwatch
