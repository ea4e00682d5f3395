#include "agent/capture/go_types.h"

#include <elf.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <unordered_set>

namespace stormwatch {
namespace {

constexpr uint64_t kPtr = 8;

// runtime.moduledata field offsets (amd64), from runtime/symtab.go of each release. Go 1.20
// added covctrs/ecovctrs before `end`, Go 1.26 epclntab after gofunc, Go 1.27 typedesclen,
// itaboffset and itabsize and dropped typelinks.
constexpr uint64_t kMdText = 176, kMdEtext = 184;
struct ModuleDataOffsets {
  uint64_t types, etypes, typedesclen, typelinks;  // typedesclen/typelinks: 0 = absent
};
// The layouts a release may have, most likely first; the one whose fields check out against
// the ELF sections wins. Go 1.20 and 1.25 have no Debian toolchain to check against here: for
// them both neighbours' layouts are tried.
std::vector<ModuleDataOffsets> ModuleDataOffsetsFor(int go_minor) {
  const ModuleDataOffsets go118{280, 288, 0, 336}, go120{296, 304, 0, 352}, go126{296, 304, 0, 360},
      go127{296, 312, 304, 0};
  if (go_minor <= 19) return {go118};
  if (go_minor == 20) return {go120, go118};
  if (go_minor <= 24) return {go120};
  if (go_minor == 25) return {go120, go126};
  if (go_minor == 26) return {go126};
  return {go127};
}

// internal/abi.Type: 48 bytes; TFlag at 20, Kind_ at 23, Str at 40, PtrToThis at 44.
constexpr uint64_t kTypeSize = 48;
constexpr uint8_t kTFlagUncommon = 1 << 0, kTFlagExtraStar = 1 << 1, kTFlagNamed = 1 << 2;
constexpr uint8_t kKindMask = 0x1f;  // before Go 1.26 the top bits of Kind_ were flags
constexpr uint64_t kUncommonSize = 16;  // PkgPath NameOff, Mcount, Xcount, Moff, _
constexpr uint64_t kMethodSize = 16;    // Name NameOff, Mtyp TypeOff, Ifn, Tfn
constexpr uint64_t kStructFieldSize = 24;
constexpr uint64_t kImethodSize = 8;

// Bounds on what a walk accepts: far above any real binary (kube-apiserver: ~60k types), so a
// crafted file cannot make it allocate without limit.
constexpr size_t kMaxTypes = 2'000'000;
constexpr uint64_t kMaxFields = 1 << 16;
constexpr uint64_t kMaxTypelinks = 4'000'000;

std::string Hex(uint64_t v) {
  char buf[24];
  snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

uint64_t Le(std::span<const uint8_t> b, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{b[at + i]} << (8 * i);
  return v;
}

// The size of the kind-specific descriptor (what comes before an uncommon type).
uint64_t DescriptorBaseSize(GoKind kind, int go_minor) {
  switch (kind) {
    case GoKind::kPointer:
    case GoKind::kSlice:
    case GoKind::kFunc:  // 48 + InCount, OutCount, padded
      return 56;
    case GoKind::kChan:
      return 64;
    case GoKind::kArray:
      return 72;
    case GoKind::kStruct:
    case GoKind::kInterface:
      return 80;
    case GoKind::kMap:
      if (go_minor <= 23) return 88;
      if (go_minor <= 26) return 112;
      return 136;
    default:
      return kTypeSize;
  }
}

}  // namespace

std::string_view GoKindName(GoKind kind) {
  static constexpr std::string_view kNames[] = {
      "invalid", "bool",    "int",    "int8",      "int16",     "int32",     "int64",
      "uint",    "uint8",   "uint16", "uint32",    "uint64",    "uintptr",   "float32",
      "float64", "complex64", "complex128", "array", "chan",    "func",      "interface",
      "map",     "ptr",     "slice",  "string",    "struct",    "unsafe.Pointer"};
  auto i = static_cast<size_t>(kind);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

namespace {

constexpr uint64_t kModuleDataBytes = 400;  // past every field read, in every layout
constexpr size_t kMaxModuleDataCandidates = 64;

// moduledata at `vaddr` read with the layout `off`, if its fields agree with the file.
Result<GoModuleData> ReadModuleData(const ElfFile& elf, uint64_t vaddr, const ModuleDataOffsets& off,
                                    int go_minor, uint64_t pclntab_vaddr) {
  const std::string at = "moduledata at " + Hex(vaddr);
  auto bytes = elf.BytesAtVaddr(vaddr, kModuleDataBytes);
  if (!bytes) return Error{at + " lies outside the file"};
  GoModuleData md;
  md.vaddr = vaddr;
  md.pcheader = Le(*bytes, 0, kPtr);
  md.text = Le(*bytes, kMdText, kPtr);
  md.etext = Le(*bytes, kMdEtext, kPtr);
  md.types = Le(*bytes, off.types, kPtr);
  md.etypes = Le(*bytes, off.etypes, kPtr);
  if (off.typedesclen) md.typedesclen = Le(*bytes, off.typedesclen, kPtr);
  if (md.pcheader != pclntab_vaddr) return Error{at + " does not point at .gopclntab"};
  const ElfSection* text = elf.FindSection(".text");
  if (md.text == 0 || md.etext <= md.text ||
      (text && (md.text < text->addr || md.etext > text->addr + text->size))) {
    return Error{at + ": text [" + Hex(md.text) + ", " + Hex(md.etext) + ") is not inside .text"};
  }
  if (md.etypes <= md.types || !elf.BytesAtVaddr(md.types, md.etypes - md.types)) {
    return Error{at + ": types [" + Hex(md.types) + ", " + Hex(md.etypes) + ") is not file-backed data"};
  }
  if (off.typelinks) {
    md.typelinks = Le(*bytes, off.typelinks, kPtr);
    md.typelinks_count = Le(*bytes, off.typelinks + kPtr, kPtr);
    uint64_t cap = Le(*bytes, off.typelinks + 2 * kPtr, kPtr);
    const ElfSection* links = elf.FindSection(".typelink");
    if (cap != md.typelinks_count || md.typelinks_count > kMaxTypelinks ||
        !elf.BytesAtVaddr(md.typelinks, md.typelinks_count * 4) ||
        (links && (md.typelinks != links->addr || md.typelinks_count * 4 > links->size))) {
      return Error{at + ": typelinks do not match .typelink (not Go 1." + std::to_string(go_minor) +
                   "'s layout?)", ErrorCode::kUnsupported};
    }
  } else if (md.typedesclen == 0 || md.typedesclen > md.etypes - md.types) {
    return Error{at + ": typedesclen " + std::to_string(md.typedesclen) + " does not fit the types"};
  }
  return md;
}

}  // namespace

Result<GoModuleData> FindGoModuleData(const ElfFile& elf, int go_minor, uint64_t pclntab_vaddr) {
  if (go_minor < 18 || go_minor > 27) {
    return Error{"Go type data is read for Go 1.18-1.27, not Go 1." + std::to_string(go_minor), ErrorCode::kUnsupported};
  }
  std::vector<uint64_t> candidates;
  if (const ElfSection* s = elf.FindSection(".go.module")) {
    candidates.push_back(s->addr);
  } else {
    for (const char* name : {".noptrdata", ".data.rel.ro", ".data"}) {
      const ElfSection* s = elf.FindSection(name);
      if (!s || s->type == SHT_NOBITS) continue;
      auto bytes = elf.BytesAt(s->offset, s->size);
      if (!bytes) continue;
      for (uint64_t at = 0; at + kModuleDataBytes <= bytes->size() &&
                            candidates.size() < kMaxModuleDataCandidates;
           at += kPtr) {
        if (Le(*bytes, at, kPtr) == pclntab_vaddr) candidates.push_back(s->addr + at);
      }
      if (!candidates.empty()) break;
    }
  }
  if (candidates.empty()) {
    return Error{"no runtime.moduledata: no word points at .gopclntab (" + Hex(pclntab_vaddr) + ")", ErrorCode::kNotFound};
  }
  std::string why;
  for (const ModuleDataOffsets& off : ModuleDataOffsetsFor(go_minor)) {
    for (uint64_t vaddr : candidates) {
      auto md = ReadModuleData(elf, vaddr, off, go_minor, pclntab_vaddr);
      if (md) return md;
      if (why.empty()) why = md.error().message;
    }
  }
  return Error{why};
}

Result<GoTypes> GoTypes::Read(const ElfFile& elf, const GoModuleData& md, int go_minor) {
  GoTypes types(elf, md, go_minor);
  if (auto ok = types.Walk(); !ok) return ok.error();
  return types;
}

// A name (internal/abi.Name, Go 1.17+): flag byte, uvarint length, bytes; then, if the flags say
// so, a tag and a pkgPath nameOff. The embedded flag (1<<3) is Go 1.19+.
std::optional<std::string> GoTypes::NameAt(uint64_t vaddr, bool* embedded) const {
  if (vaddr < md_.types || vaddr >= md_.etypes) return std::nullopt;
  auto head = elf_.BytesAtVaddr(vaddr, std::min<uint64_t>(11, md_.etypes - vaddr));
  if (!head || head->size() < 2) return std::nullopt;
  uint64_t len = 0;
  size_t i = 1;
  for (int shift = 0; i < head->size(); ++i, shift += 7) {
    len |= uint64_t{(*head)[i] & 0x7fu} << shift;
    if ((*head)[i] < 0x80) break;
  }
  if (i >= head->size() || len > 1 << 20) return std::nullopt;
  auto data = elf_.BytesAtVaddr(vaddr + i + 1, len);
  if (!data || vaddr + i + 1 + len > md_.etypes) return std::nullopt;
  if (embedded) *embedded = ((*head)[0] & (1 << 3)) != 0;
  return std::string(reinterpret_cast<const char*>(data->data()), data->size());
}

std::optional<std::string> GoTypes::PkgPathOf(uint64_t vaddr, uint8_t tflag, GoKind kind) const {
  if (!(tflag & kTFlagUncommon)) return std::nullopt;
  auto u = elf_.BytesAtVaddr(vaddr + DescriptorBaseSize(kind, go_minor_), kUncommonSize);
  if (!u) return std::nullopt;
  uint32_t off = Le(*u, 0, 4);
  if (off == 0) return std::string();
  return NameAt(md_.types + off);
}

uint64_t GoTypes::NameBudget() const {
  return 4 * (md_.etypes - md_.types) + (uint64_t{16} << 20);
}

Result<GoType> GoTypes::Describe(uint64_t vaddr) const {
  if (vaddr < md_.types || vaddr + kTypeSize > md_.etypes || vaddr % kPtr) {
    return Error{"type descriptor " + Hex(vaddr) + " is outside runtime.types"};
  }
  auto t = elf_.BytesAtVaddr(vaddr, kTypeSize);
  if (!t) return Error{"type descriptor " + Hex(vaddr) + " lies outside the file"};
  GoType type;
  type.vaddr = vaddr;
  type.size = Le(*t, 0, kPtr);
  uint8_t tflag = (*t)[20];
  type.kind = static_cast<GoKind>((*t)[23] & kKindMask);
  if (type.kind == GoKind{0} || static_cast<uint8_t>(type.kind) > 26) {
    return Error{"type descriptor " + Hex(vaddr) + " has kind " + std::to_string((*t)[23])};
  }
  auto str = NameAt(md_.types + static_cast<uint32_t>(Le(*t, 40, 4)));
  if (!str) return Error{"type descriptor " + Hex(vaddr) + " has no readable name"};
  if ((tflag & kTFlagExtraStar) && !str->empty()) str->erase(0, 1);
  type.name = std::move(*str);
  if (tflag & kTFlagNamed) {
    // "http2.serverConn" -> "golang.org/x/net/http2.serverConn" (package names have no dots).
    auto pkg = PkgPathOf(vaddr, tflag, type.kind);
    size_t dot = type.name.find('.');
    size_t bracket = type.name.find('[');
    if (pkg && !pkg->empty() && dot != std::string::npos && dot < bracket) {
      type.name = *pkg + type.name.substr(dot);
    }
  }
  return type;
}

Result<bool> GoTypes::Walk() {
  std::vector<uint64_t> work;
  if (md_.typelinks) {
    auto links = elf_.BytesAtVaddr(md_.typelinks, md_.typelinks_count * 4);
    if (!links) return Error{"typelinks lie outside the file"};
    for (uint64_t i = 0; i < md_.typelinks_count; ++i) {
      work.push_back(md_.types + static_cast<uint32_t>(Le(*links, i * 4, 4)));
    }
  } else {
    // Go 1.27: typelink descriptors lie one after another (runtime.moduleTypelinks).
    uint64_t end = md_.types + md_.typedesclen;
    for (uint64_t td = md_.types + kPtr; td < end;) {
      td = (td + kPtr - 1) & ~(kPtr - 1);
      auto head = elf_.BytesAtVaddr(td, kTypeSize);
      if (!head || work.size() >= kMaxTypelinks) return Error{"typelink descriptors lie outside the file"};
      auto kind = static_cast<GoKind>((*head)[23] & kKindMask);
      uint8_t tflag = (*head)[20];
      uint64_t base = DescriptorBaseSize(kind, go_minor_);
      auto t = elf_.BytesAtVaddr(td, base + ((tflag & kTFlagUncommon) ? kUncommonSize : 0));
      if (!t) return Error{"typelink descriptor at " + Hex(td) + " lies outside the file"};
      uint64_t size = base, mcount = 0;
      if (tflag & kTFlagUncommon) {
        size += kUncommonSize;
        mcount = Le(*t, base + 4, 2);
      }
      if (kind == GoKind::kFunc) size += (Le(*t, 48, 2) + (Le(*t, 50, 2) & 0x7fff)) * kPtr;
      if (kind == GoKind::kStruct) size += Le(*t, 64, kPtr) * kStructFieldSize;
      if (kind == GoKind::kInterface) size += Le(*t, 64, kPtr) * kImethodSize;
      if (kind == GoKind{0} || static_cast<uint8_t>(kind) > 26 || size > md_.typedesclen) {
        return Error{"typelink descriptor at " + Hex(td) + " has kind " + std::to_string((*t)[23])};
      }
      work.push_back(td);
      td += size + mcount * kMethodSize;
    }
  }

  std::unordered_set<uint64_t> seen;
  auto push = [&](uint64_t vaddr) {
    if (vaddr && seen.size() < kMaxTypes && seen.insert(vaddr).second) work.push_back(vaddr);
  };
  auto push_off = [&](uint32_t off) {
    if (off != 0 && off != 0xffffffff) push(md_.types + off);
  };
  std::vector<uint64_t> roots;
  roots.swap(work);
  for (uint64_t r : roots) push(r);
  const uint64_t name_budget = NameBudget();
  uint64_t name_bytes = 0;
  while (!work.empty()) {
    uint64_t vaddr = work.back();
    work.pop_back();
    auto type = Describe(vaddr);
    if (!type) continue;  // an unreadable edge: skipped, the walk goes on (counted below)
    ++visited_;
    name_bytes += type->name.size();
    if (name_bytes > name_budget) {
      return Error{"type names total more than " + std::to_string(name_budget) +
                   " bytes: descriptors share names, crafted or corrupt type data", ErrorCode::kLimit};
    }
    auto t = *elf_.BytesAtVaddr(vaddr, kTypeSize);
    uint8_t tflag = t[20];
    push_off(static_cast<uint32_t>(Le(t, 44, 4)));  // PtrToThis
    if (tflag & kTFlagNamed) named_.emplace(type->name, vaddr);
    uint64_t base = DescriptorBaseSize(type->kind, go_minor_);
    auto desc = elf_.BytesAtVaddr(vaddr, base);
    if (!desc) continue;
    switch (type->kind) {
      case GoKind::kPointer:
        pointer_to_.emplace(Le(*desc, 48, kPtr), vaddr);
        push(Le(*desc, 48, kPtr));
        break;
      case GoKind::kSlice:
      case GoKind::kArray:
      case GoKind::kChan:
        push(Le(*desc, 48, kPtr));
        break;
      case GoKind::kMap:
        push(Le(*desc, 48, kPtr));
        push(Le(*desc, 56, kPtr));
        break;
      case GoKind::kStruct: {
        uint64_t fields = Le(*desc, 56, kPtr), n = Le(*desc, 64, kPtr);
        auto f = n <= kMaxFields ? elf_.BytesAtVaddr(fields, n * kStructFieldSize) : std::nullopt;
        if (!f) break;
        for (uint64_t i = 0; i < n; ++i) push(Le(*f, i * kStructFieldSize + 8, kPtr));
        break;
      }
      case GoKind::kFunc: {
        uint64_t n = Le(*desc, 48, 2) + (Le(*desc, 50, 2) & 0x7fff);
        uint64_t at = vaddr + base + ((tflag & kTFlagUncommon) ? kUncommonSize : 0);
        auto p = elf_.BytesAtVaddr(at, n * kPtr);
        if (!p) break;
        for (uint64_t i = 0; i < n; ++i) push(Le(*p, i * kPtr, kPtr));
        break;
      }
      case GoKind::kInterface: {
        uint64_t methods = Le(*desc, 56, kPtr), n = Le(*desc, 64, kPtr);
        auto m = n <= kMaxFields ? elf_.BytesAtVaddr(methods, n * kImethodSize) : std::nullopt;
        if (!m) break;
        for (uint64_t i = 0; i < n; ++i) push_off(static_cast<uint32_t>(Le(*m, i * kImethodSize + 4, 4)));
        break;
      }
      default:
        break;
    }
    if (tflag & kTFlagUncommon) {  // method types
      auto u = elf_.BytesAtVaddr(vaddr + base, kUncommonSize);
      if (!u) continue;
      uint64_t mcount = Le(*u, 4, 2), moff = Le(*u, 8, 4);
      auto m = elf_.BytesAtVaddr(vaddr + base + moff, mcount * kMethodSize);
      if (!m) continue;
      for (uint64_t i = 0; i < mcount; ++i) push_off(static_cast<uint32_t>(Le(*m, i * kMethodSize + 4, 4)));
    }
  }
  if (seen.size() >= kMaxTypes) {
    return Error{"more than " + std::to_string(kMaxTypes) + " type descriptors: not a sane binary", ErrorCode::kLimit};
  }
  if (named_.empty()) return Error{"no named type descriptors found from moduledata", ErrorCode::kNotFound};
  return true;
}

std::optional<GoType> GoTypes::FindNamedSuffix(std::string_view suffix) const {
  std::optional<GoType> found;
  for (const auto& [name, vaddr] : named_) {
    if (name.size() < suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    size_t before = name.size() - suffix.size();
    if (before != 0 && name[before - 1] != '/') continue;
    if (found) return std::nullopt;  // ambiguous
    auto type = Describe(vaddr);
    if (!type) return std::nullopt;
    found = *type;
  }
  return found;
}

std::optional<GoType> GoTypes::PointerTo(const GoType& type) const {
  auto it = pointer_to_.find(type.vaddr);
  if (it == pointer_to_.end()) return std::nullopt;
  auto ptr = Describe(it->second);
  if (!ptr) return std::nullopt;
  return *ptr;
}

std::vector<std::string> GoTypes::NamedTypes() const {
  std::vector<std::string> names;
  names.reserve(named_.size());
  for (const auto& [name, vaddr] : named_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

std::optional<GoType> GoTypes::FindNamed(std::string_view qualified_name) const {
  auto it = named_.find(std::string(qualified_name));
  if (it == named_.end()) return std::nullopt;
  auto type = Describe(it->second);
  if (!type) return std::nullopt;
  return *type;
}

Result<std::vector<GoStructField>> GoTypes::StructFields(const GoType& type) const {
  if (type.kind != GoKind::kStruct) return Error{type.name + " is a " + std::string(GoKindName(type.kind)) + ", not a struct"};
  auto desc = elf_.BytesAtVaddr(type.vaddr, 80);
  if (!desc) return Error{type.name + ": descriptor lies outside the file"};
  uint64_t fields = Le(*desc, 56, kPtr), n = Le(*desc, 64, kPtr);
  auto f = n <= kMaxFields ? elf_.BytesAtVaddr(fields, n * kStructFieldSize) : std::nullopt;
  if (!f) return Error{type.name + ": field array lies outside the file"};
  std::vector<GoStructField> out;
  out.reserve(n);
  const uint64_t name_budget = NameBudget();
  uint64_t name_bytes = 0;
  for (uint64_t i = 0; i < n; ++i) {
    GoStructField field;
    auto name = NameAt(Le(*f, i * kStructFieldSize, kPtr), &field.embedded);
    auto ftype = Describe(Le(*f, i * kStructFieldSize + 8, kPtr));
    if (!name || !ftype) return Error{type.name + ": field " + std::to_string(i) + " is unreadable"};
    name_bytes += name->size() + ftype->name.size();
    if (name_bytes > name_budget) {
      return Error{type.name + ": field names total more than " + std::to_string(name_budget) +
                   " bytes: fields share names, crafted or corrupt type data", ErrorCode::kLimit};
    }
    field.name = std::move(*name);
    field.type = std::move(*ftype);
    field.offset = Le(*f, i * kStructFieldSize + 16, kPtr);
    if (go_minor_ <= 18) {  // offsetEmbed: offset << 1 | embedded
      field.embedded = field.offset & 1;
      field.offset >>= 1;
    }
    if (field.offset + field.type.size > type.size) {
      return Error{type.name + "." + field.name + " at " + std::to_string(field.offset) +
                   " runs past the struct's " + std::to_string(type.size) + " bytes"};
    }
    out.push_back(std::move(field));
  }
  return out;
}

Result<GoType> GoTypes::Elem(const GoType& type) const {
  if (type.kind != GoKind::kPointer && type.kind != GoKind::kSlice && type.kind != GoKind::kArray &&
      type.kind != GoKind::kChan) {
    return Error{type.name + " has no element type"};
  }
  auto desc = elf_.BytesAtVaddr(type.vaddr + 48, kPtr);
  if (!desc) return Error{type.name + ": descriptor lies outside the file"};
  return Describe(Le(*desc, 0, kPtr));
}

Result<GoMapLayout> GoTypes::MapLayout(const GoType& type) const {
  if (type.kind != GoKind::kMap) return Error{type.name + " is not a map"};
  auto d = elf_.BytesAtVaddr(type.vaddr, DescriptorBaseSize(GoKind::kMap, go_minor_));
  if (!d) return Error{type.name + ": descriptor lies outside the file"};
  auto key = Describe(Le(*d, 48, kPtr));
  auto elem = Describe(Le(*d, 56, kPtr));
  if (!key || !elem) return Error{type.name + ": key or element type unreadable"};
  GoMapLayout m;
  m.key_size = key->size;
  m.elem_size = elem->size;
  constexpr uint64_t kSlots = 8;
  if (go_minor_ <= 23) {
    m.bucket_size = Le(*d, 82, 2);
    uint64_t key_slot = (*d)[80], elem_slot = (*d)[81];
    if (key_slot != m.key_size || elem_slot != m.elem_size ||
        m.bucket_size != kSlots + kSlots * (key_slot + elem_slot) + kPtr) {
      return Error{type.name + ": bucket layout is not {tophash; keys; elems; overflow}"};
    }
    m.keys_offset = kSlots;
    m.key_stride = key_slot;
    m.elems_offset = kSlots + kSlots * key_slot;
    m.elem_stride = elem_slot;
    return m;
  }
  m.swiss = true;
  m.group_size = Le(*d, 80, kPtr);
  if (go_minor_ <= 26) {  // {ctrl uint64; slots [8]struct{key; elem}}
    uint64_t slot = Le(*d, 88, kPtr), elem_off = Le(*d, 96, kPtr);
    m.keys_offset = kPtr;
    m.key_stride = m.elem_stride = slot;
    m.elems_offset = kPtr + elem_off;
  } else {
    m.keys_offset = Le(*d, 88, kPtr);
    m.key_stride = Le(*d, 96, kPtr);
    m.elems_offset = Le(*d, 104, kPtr);
    m.elem_stride = Le(*d, 112, kPtr);
  }
  // Every term at most group_size (itself < 2^32) first, so the sums cannot wrap around.
  auto fits = [&](uint64_t offset, uint64_t stride, uint64_t size) {
    return offset <= m.group_size && stride <= m.group_size && size <= m.group_size &&
           stride >= size && offset + (kSlots - 1) * stride + size <= m.group_size;
  };
  if (m.group_size > 0xffffffffu || !fits(m.keys_offset, m.key_stride, m.key_size) ||
      !fits(m.elems_offset, m.elem_stride, m.elem_size)) {
    return Error{type.name + ": group layout does not fit its " + std::to_string(m.group_size) + " bytes"};
  }
  return m;
}

Result<GoStructField> GoTypes::Field(std::string_view qualified_struct, std::string_view path) const {
  auto type = FindNamed(qualified_struct);
  if (!type) return Error{"type " + std::string(qualified_struct) + " is not in the binary's type data", ErrorCode::kNotFound};
  GoStructField result;
  result.type = *type;
  std::string walked(qualified_struct);
  while (!path.empty()) {
    size_t dot = path.find('.');
    std::string_view name = path.substr(0, dot);
    path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
    auto fields = StructFields(result.type);
    if (!fields) return fields.error();
    auto it = std::find_if(fields->begin(), fields->end(),
                           [&](const GoStructField& f) { return f.name == name; });
    if (it == fields->end()) {
      return Error{"type " + result.type.name + " has no field " + std::string(name) +
                   (walked == result.type.name ? "" : " (in " + walked + ")"), ErrorCode::kNotFound};
    }
    uint64_t offset = result.offset + it->offset;
    result = *it;
    result.offset = offset;
    walked += "." + std::string(name);
  }
  result.name = walked;
  return result;
}

}  // namespace stormwatch
