// ElfFile: a read-only, bounds-checked view of a 64-bit little-endian ELF file (x86-64 targets),
// mmapped rather than read, so opening a 100+ MB binary costs page faults, not copies.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agent/core/result.h"

namespace stormwatch {

struct ElfSection {
  std::string name;
  uint32_t type = 0;  // SHT_*
  uint64_t flags = 0;
  uint64_t addr = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};

struct ElfSegment {
  uint32_t type = 0;   // PT_*
  uint32_t flags = 0;  // PF_R | PF_W | PF_X
  uint64_t offset = 0;
  uint64_t vaddr = 0;
  uint64_t filesz = 0;
  uint64_t memsz = 0;
};

class ElfFile {
 public:
  static Result<ElfFile> Open(const std::string& path);

  const std::string& path() const { return path_; }
  uint64_t size() const { return bytes_.size(); }
  const std::vector<ElfSection>& sections() const { return sections_; }
  const std::vector<ElfSegment>& segments() const { return segments_; }
  const ElfSection* FindSection(std::string_view name) const;

  // `size` bytes at file offset `offset`, or nullopt if any of them lies outside the file.
  std::optional<std::span<const uint8_t>> BytesAt(uint64_t offset, uint64_t size) const;
  // File-backed bytes at a virtual address, within one PT_LOAD segment (never bss).
  std::optional<std::span<const uint8_t>> BytesAtVaddr(uint64_t vaddr, uint64_t size) const;
  // File offset of `vaddr` in an executable PT_LOAD segment: where a uprobe attaches.
  std::optional<uint64_t> ExecutableFileOffset(uint64_t vaddr) const;

 private:
  struct Mapping;
  ElfFile() = default;
  Result<bool> Parse();

  std::string path_;
  std::shared_ptr<const Mapping> mapping_;  // shared: copies and moves keep bytes_ valid
  std::span<const uint8_t> bytes_;
  std::vector<ElfSection> sections_;
  std::vector<ElfSegment> segments_;
};

}  // namespace stormwatch
