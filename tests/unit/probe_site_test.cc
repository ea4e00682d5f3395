// Entry probes go after the Go stack-growth check: a call that grows its stack runs the
// prologue twice (morestack jumps back to the entry), and an entry probe would fire twice.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>

#include "agent/capture/go_binary.h"

namespace stormwatch {
namespace {

std::string Run(const std::string& cmd) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  std::string out;
  char buf[4096];
  while (pipe && fgets(buf, sizeof(buf), pipe.get())) out += buf;
  return out;
}

// The address after the first JBE of `symbol`'s disassembly by the Go toolchain itself.
uint64_t GoObjdumpJbe(const std::string& binary, const std::string& symbol_regex) {
  std::string out = Run("go tool objdump -s '" + symbol_regex + "' " + binary + " 2>/dev/null | head -6");
  size_t pos = 0;
  while (pos < out.size()) {
    size_t eol = out.find('\n', pos);
    std::string line = out.substr(pos, eol - pos);
    pos = eol == std::string::npos ? out.size() : eol + 1;
    size_t hex = line.find("0x");
    if (hex == std::string::npos || line.starts_with("TEXT")) continue;
    if (line.find("JBE") != std::string::npos) return std::stoull(line.substr(hex), nullptr, 16);
  }
  return 0;
}

TEST(ProbeSite, OnTheStackCheckBranchAsGoObjdumpShows) {
  const std::string stripped = std::string(STORMWATCH_GO_OUT) + "/test-apiserver";
  const std::string unstripped = stripped + ".unstripped";
  auto binary = GoBinary::Open(stripped);
  ASSERT_TRUE(binary.ok()) << binary.error().message;
  struct Case {
    const char* name;
    const char* regex;
  } cases[] = {
      {"golang.org/x/net/http2.(*serverConn).processHeaders",
       "http2.\\(\\*serverConn\\).processHeaders$"},
      {"golang.org/x/net/http2.(*responseWriter).handlerDone",
       "http2.\\(\\*responseWriter\\).handlerDone$"},
  };
  for (const Case& c : cases) {
    auto fn = binary->FindFunction(c.name);
    ASSERT_TRUE(fn) << c.name;
    auto site = binary->EntryProbeSiteOf(*fn);
    ASSERT_TRUE(site.ok()) << site.error().message;
    uint64_t expected_vaddr = GoObjdumpJbe(unstripped, c.regex);
    ASSERT_NE(expected_vaddr, 0u) << "go tool objdump found no JBE in " << c.name;
    EXPECT_GT(site->offset, fn->file_offset) << c.name;
    EXPECT_EQ(site->offset - fn->file_offset, expected_vaddr - fn->entry) << c.name;
    EXPECT_EQ(site->morestack_if_flags, 0x41u) << c.name;
  }
}

TEST(ProbeSite, SyntheticPrologues) {
  constexpr uint32_t kJbe = 0x41, kJb = 0x01;  // EFLAGS under which the branch is taken
  auto site = [](std::span<const uint8_t> code, uint64_t base) {
    auto s = FindEntryProbeSite(code, base);
    EXPECT_TRUE(s.ok()) << s.error().message;
    return s.ok() ? std::make_pair(s->offset, s->morestack_if_flags) : std::make_pair(~uint64_t{0}, ~0u);
  };
  // Small frame: CMPQ 0x10(R14), SP; JBE rel32; SUBQ $0x30, SP -> on the JBE.
  const uint8_t small[] = {0x49, 0x3b, 0x66, 0x10, 0x0f, 0x86, 0x86, 0x00, 0x00, 0x00,
                           0x48, 0x83, 0xec, 0x30};
  EXPECT_EQ(site(small, 1000), std::make_pair(uint64_t{1004}, kJbe));
  // Big frame: LEAQ -0x10(SP), R12; CMPQ 0x10(R14), R12; JBE rel32; SUBQ $0x90, SP
  const uint8_t big[] = {0x4c, 0x8d, 0x64, 0x24, 0xf0, 0x4d, 0x3b, 0x66, 0x10, 0x0f, 0x86,
                         0x03, 0x07, 0x00, 0x00, 0x48, 0x81, 0xec, 0x90, 0x00, 0x00, 0x00};
  EXPECT_EQ(site(big, 0), std::make_pair(uint64_t{9}, kJbe));
  // Short branch: CMPQ 0x10(R14), SP; JBE rel8
  const uint8_t short_jbe[] = {0x49, 0x3b, 0x66, 0x10, 0x76, 0x20, 0x90};
  EXPECT_EQ(site(short_jbe, 0), std::make_pair(uint64_t{4}, kJbe));
  // Operands the other way round: CMPQ SP, 0x10(R14); JB rel8 -> taken on CF only.
  const uint8_t jb[] = {0x49, 0x39, 0x66, 0x10, 0x72, 0x20, 0x90};
  EXPECT_EQ(site(jb, 0), std::make_pair(uint64_t{4}, kJb));
  // NOSPLIT leaf: MOVQ AX, BX; RET -> the entry itself, never skipped.
  const uint8_t leaf[] = {0x48, 0x89, 0xc3, 0xc3};
  EXPECT_EQ(site(leaf, 77), std::make_pair(uint64_t{77}, 0u));
  // A compare against something else is not a stack check.
  const uint8_t other_cmp[] = {0x48, 0x39, 0xd8, 0x76, 0x02, 0x90, 0x90};  // CMPQ BX, AX; JBE
  EXPECT_EQ(site(other_cmp, 0), std::make_pair(uint64_t{0}, 0u));
  // Bytes that do not decode are an error, not a guess.
  const uint8_t junk[] = {0x49, 0x3b, 0x66};  // a CMP cut short
  EXPECT_FALSE(FindEntryProbeSite(junk, 0).ok());
}

}  // namespace
}  // namespace stormwatch
