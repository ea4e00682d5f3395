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
uint64_t GoObjdumpAfterJbe(const std::string& binary, const std::string& symbol_regex) {
  std::string out = Run("go tool objdump -s '" + symbol_regex + "' " + binary + " 2>/dev/null | head -6");
  bool next = false;
  size_t pos = 0;
  while (pos < out.size()) {
    size_t eol = out.find('\n', pos);
    std::string line = out.substr(pos, eol - pos);
    pos = eol == std::string::npos ? out.size() : eol + 1;
    size_t hex = line.find("0x");
    if (hex == std::string::npos || line.starts_with("TEXT")) continue;
    uint64_t addr = std::stoull(line.substr(hex), nullptr, 16);
    if (next) return addr;
    if (line.find("JBE") != std::string::npos) next = true;
  }
  return 0;
}

TEST(ProbeSite, AfterStackCheckMatchesGoObjdump) {
  const std::string stripped = std::string(STORMWATCH_GO_OUT) + "/test-apiserver";
  const std::string unstripped = stripped + ".unstripped";
  auto binary = GoBinary::Open(stripped);
  ASSERT_TRUE(binary.ok()) << binary.error();
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
    auto site = binary->EntryAfterStackCheckOffset(*fn);
    ASSERT_TRUE(site.ok()) << site.error();
    uint64_t expected_vaddr = GoObjdumpAfterJbe(unstripped, c.regex);
    ASSERT_NE(expected_vaddr, 0u) << "go tool objdump found no JBE in " << c.name;
    EXPECT_GT(*site, fn->file_offset) << c.name;
    EXPECT_EQ(*site - fn->file_offset, expected_vaddr - fn->entry) << c.name;
  }
}

TEST(ProbeSite, SyntheticPrologues) {
  // Small frame: CMPQ 0x10(R14), SP; JBE rel32; SUBQ $0x30, SP
  const uint8_t small[] = {0x49, 0x3b, 0x66, 0x10, 0x0f, 0x86, 0x86, 0x00, 0x00, 0x00,
                           0x48, 0x83, 0xec, 0x30};
  EXPECT_EQ(*FindEntryAfterStackCheck(small, 1000), 1010u);
  // Big frame: LEAQ -0x10(SP), R12; CMPQ 0x10(R14), R12; JBE rel32; SUBQ $0x90, SP
  const uint8_t big[] = {0x4c, 0x8d, 0x64, 0x24, 0xf0, 0x4d, 0x3b, 0x66, 0x10, 0x0f, 0x86,
                         0x03, 0x07, 0x00, 0x00, 0x48, 0x81, 0xec, 0x90, 0x00, 0x00, 0x00};
  EXPECT_EQ(*FindEntryAfterStackCheck(big, 0), 15u);
  // Short branch: CMPQ 0x10(R14), SP; JBE rel8
  const uint8_t short_jbe[] = {0x49, 0x3b, 0x66, 0x10, 0x76, 0x20, 0x90};
  EXPECT_EQ(*FindEntryAfterStackCheck(short_jbe, 0), 6u);
  // NOSPLIT leaf: MOVQ AX, BX; RET -> the entry itself.
  const uint8_t leaf[] = {0x48, 0x89, 0xc3, 0xc3};
  EXPECT_EQ(*FindEntryAfterStackCheck(leaf, 77), 77u);
  // A compare against something else is not a stack check.
  const uint8_t other_cmp[] = {0x48, 0x39, 0xd8, 0x76, 0x02, 0x90, 0x90};  // CMPQ BX, AX; JBE
  EXPECT_EQ(*FindEntryAfterStackCheck(other_cmp, 0), 0u);
  // Bytes that do not decode are an error, not a guess.
  const uint8_t junk[] = {0x49, 0x3b, 0x66};  // a CMP cut short
  EXPECT_FALSE(FindEntryAfterStackCheck(junk, 0).ok());
}

}  // namespace
}  // namespace stormwatch
