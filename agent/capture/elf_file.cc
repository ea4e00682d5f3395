#include "agent/capture/elf_file.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace stormwatch {

struct ElfFile::Mapping {
  void* addr = MAP_FAILED;
  size_t size = 0;
  ~Mapping() {
    if (addr != MAP_FAILED) munmap(addr, size);
  }
};

namespace {

// Headers are read with memcpy: mmapped bytes carry no alignment guarantee for a struct cast.
template <typename T>
std::optional<T> ReadStruct(const ElfFile& elf, uint64_t offset) {
  auto bytes = elf.BytesAt(offset, sizeof(T));
  if (!bytes) return std::nullopt;
  T value;
  std::memcpy(&value, bytes->data(), sizeof(T));
  return value;
}

Error ElfError(const std::string& path, const std::string& what) {
  return Error{path + ": " + what};
}

}  // namespace

Result<ElfFile> ElfFile::Open(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ElfError(path, std::string("open: ") + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return ElfError(path, std::string("fstat: ") + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode) || st.st_size < static_cast<off_t>(sizeof(Elf64_Ehdr))) {
    close(fd);
    return ElfError(path, "not a regular file large enough for an ELF header");
  }
  auto mapping = std::make_shared<Mapping>();
  mapping->size = static_cast<size_t>(st.st_size);
  mapping->addr = mmap(nullptr, mapping->size, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  close(fd);
  if (mapping->addr == MAP_FAILED)
    return ElfError(path, std::string("mmap: ") + std::strerror(err));

  ElfFile elf;
  elf.path_ = path;
  elf.bytes_ = {static_cast<const uint8_t*>(mapping->addr), mapping->size};
  elf.mapping_ = std::move(mapping);
  if (auto parsed = elf.Parse(); !parsed) return parsed.error();
  return elf;
}

Result<bool> ElfFile::Parse() {
  auto ehdr = ReadStruct<Elf64_Ehdr>(*this, 0);
  if (!ehdr || std::memcmp(ehdr->e_ident, ELFMAG, SELFMAG) != 0) {
    return ElfError(path_, "not an ELF file");
  }
  if (ehdr->e_ident[EI_CLASS] != ELFCLASS64 || ehdr->e_ident[EI_DATA] != ELFDATA2LSB ||
      ehdr->e_machine != EM_X86_64) {
    return ElfError(path_, "not a 64-bit little-endian x86-64 ELF file");
  }

  if (ehdr->e_phnum > 0 && ehdr->e_phentsize < sizeof(Elf64_Phdr)) {
    return ElfError(path_, "program header entries too small");
  }
  if (!BytesAt(ehdr->e_phoff, uint64_t{ehdr->e_phnum} * ehdr->e_phentsize)) {
    return ElfError(path_, "program headers lie outside the file (truncated?)");
  }
  for (uint64_t i = 0; i < ehdr->e_phnum; ++i) {
    auto phdr = *ReadStruct<Elf64_Phdr>(*this, ehdr->e_phoff + i * ehdr->e_phentsize);
    ElfSegment seg{phdr.p_type,  phdr.p_flags,  phdr.p_offset,
                   phdr.p_vaddr, phdr.p_filesz, phdr.p_memsz};
    if (seg.type == PT_LOAD && !BytesAt(seg.offset, seg.filesz)) {
      return ElfError(path_, "PT_LOAD segment lies outside the file (truncated?)");
    }
    segments_.push_back(seg);
  }

  // Section headers are optional (sstrip removes them); callers fall back to segments.
  if (ehdr->e_shoff == 0) return true;
  if (ehdr->e_shentsize < sizeof(Elf64_Shdr)) return ElfError(path_, "section headers too small");
  auto first = ReadStruct<Elf64_Shdr>(*this, ehdr->e_shoff);
  if (!first) return ElfError(path_, "section headers lie outside the file (truncated?)");
  // More than 0xff00 sections: the real count and string table index move to section 0.
  uint64_t shnum = ehdr->e_shnum != 0 ? ehdr->e_shnum : first->sh_size;
  uint64_t shstrndx = ehdr->e_shstrndx != SHN_XINDEX ? ehdr->e_shstrndx : first->sh_link;
  if (shnum > bytes_.size() / ehdr->e_shentsize ||
      !BytesAt(ehdr->e_shoff, shnum * ehdr->e_shentsize)) {
    return ElfError(path_, "section headers lie outside the file (truncated?)");
  }
  std::vector<Elf64_Shdr> headers;
  for (uint64_t i = 0; i < shnum; ++i) {
    headers.push_back(*ReadStruct<Elf64_Shdr>(*this, ehdr->e_shoff + i * ehdr->e_shentsize));
  }
  std::span<const uint8_t> strtab;
  if (shstrndx != SHN_UNDEF) {
    if (shstrndx >= headers.size()) return ElfError(path_, "bad section name table index");
    auto bytes = BytesAt(headers[shstrndx].sh_offset, headers[shstrndx].sh_size);
    if (!bytes) return ElfError(path_, "section name table lies outside the file (truncated?)");
    strtab = *bytes;
  }
  for (const Elf64_Shdr& shdr : headers) {
    ElfSection section{"", shdr.sh_type, shdr.sh_flags, shdr.sh_addr, shdr.sh_offset, shdr.sh_size};
    if (shdr.sh_name < strtab.size()) {
      const char* name = reinterpret_cast<const char*>(strtab.data()) + shdr.sh_name;
      size_t max_len = strtab.size() - shdr.sh_name;
      section.name.assign(name, strnlen(name, max_len));
    }
    sections_.push_back(std::move(section));
  }
  return true;
}

const ElfSection* ElfFile::FindSection(std::string_view name) const {
  for (const ElfSection& section : sections_) {
    if (section.name == name) return &section;
  }
  return nullptr;
}

std::optional<std::span<const uint8_t>> ElfFile::BytesAt(uint64_t offset, uint64_t size) const {
  if (offset > bytes_.size() || size > bytes_.size() - offset) return std::nullopt;
  return bytes_.subspan(offset, size);
}

std::optional<std::span<const uint8_t>> ElfFile::BytesAtVaddr(uint64_t vaddr, uint64_t size) const {
  for (const ElfSegment& seg : segments_) {
    if (seg.type != PT_LOAD || vaddr < seg.vaddr) continue;
    uint64_t delta = vaddr - seg.vaddr;
    if (delta < seg.filesz && size <= seg.filesz - delta) return BytesAt(seg.offset + delta, size);
  }
  return std::nullopt;
}

std::optional<uint64_t> ElfFile::ExecutableFileOffset(uint64_t vaddr) const {
  for (const ElfSegment& seg : segments_) {
    if (seg.type != PT_LOAD || !(seg.flags & PF_X) || vaddr < seg.vaddr) continue;
    if (vaddr - seg.vaddr < seg.filesz) return vaddr - seg.vaddr + seg.offset;
  }
  return std::nullopt;
}

}  // namespace stormwatch
