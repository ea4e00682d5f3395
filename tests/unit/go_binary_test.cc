// GoBinary against ground truth: `go tool nm` on an unstripped twin of the stripped fixture,
// objdump, `go version -m`, Debian's stripped /usr/bin/etcd, and synthetic ELF files built here
// (every pclntab format, both build info formats, no section headers, every truncation).
#include "agent/capture/go_binary.h"

#include <elf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace stormwatch {
namespace {

const std::string kGoOut = STORMWATCH_GO_OUT;
const std::string kStripped = kGoOut + "/test-apiserver";
const std::string kUnstripped = kGoOut + "/test-apiserver.unstripped";
const std::string kEtcd = "/usr/bin/etcd";
constexpr std::string_view kProcessHeaders = "golang.org/x/net/http2.(*serverConn).processHeaders";
constexpr std::string_view kHandlerDone = "golang.org/x/net/http2.(*responseWriter).handlerDone";

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("go_binary_test." + std::to_string(getpid()) + "." + name))
      .string();
}

// Stdout of a shell command; a non-zero exit fails the test.
std::string RunCommand(const std::string& command) {
  std::string full = "GOCACHE=" + TempPath("gocache") + " " + command;
  FILE* pipe = popen(full.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "popen failed: " << command;
    return "";
  }
  std::string out;
  char buf[1 << 16];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), pipe)) > 0;) out.append(buf, n);
  int status = pclose(pipe);
  EXPECT_EQ(status, 0) << command;
  return out;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string Hex(uint64_t v) {
  char buf[24];
  snprintf(buf, sizeof(buf), "%llx", static_cast<unsigned long long>(v));
  return buf;
}

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

GoBinary OpenOrDie(const std::string& path) {
  auto binary = GoBinary::Open(path);
  if (!binary) {
    ADD_FAILURE() << binary.error().message;
    std::abort();
  }
  return std::move(*binary);
}

// --- objdump as the reference disassembler ---------------------------------------------------

bool IsRetMnemonic(std::string_view insn) {
  for (std::string_view prefix : {"repz ", "rep ", "bnd ", "notrack "}) {
    if (insn.starts_with(prefix)) insn.remove_prefix(prefix.size());
  }
  if (!insn.starts_with("ret")) return false;
  insn.remove_prefix(3);
  return insn.empty() || insn[0] == ' ' || insn == "q" || insn.starts_with("q ") || insn == "w" ||
         insn.starts_with("w ");
}

// Addresses of the RET instructions objdump lists in [start, stop) (or the whole .text).
std::set<uint64_t> ObjdumpRets(const std::string& path, uint64_t start = 0, uint64_t stop = 0) {
  std::string command = "objdump -d --no-show-raw-insn -j .text ";
  if (stop > start) {
    command += "--start-address=0x" + Hex(start) + " --stop-address=0x" + Hex(stop) + " ";
  }
  std::set<uint64_t> rets;
  for (const std::string& line : Lines(RunCommand(command + path))) {
    size_t colon = line.find(":\t");
    if (colon == std::string::npos || line.empty() || line[0] != ' ') continue;
    std::string insn = line.substr(colon + 2);
    while (!insn.empty() && insn.back() == ' ') insn.pop_back();
    if (IsRetMnemonic(insn)) rets.insert(std::stoull(line.substr(0, colon), nullptr, 16));
  }
  return rets;
}

// The raw bytes objdump shows for [start, stop).
std::vector<uint8_t> ObjdumpBytes(const std::string& path, uint64_t start, uint64_t stop) {
  std::vector<uint8_t> bytes;
  std::string command = "objdump -d -j .text --start-address=0x" + Hex(start) +
                        " --stop-address=0x" + Hex(stop) + " " + path;
  for (const std::string& line : Lines(RunCommand(command))) {
    size_t colon = line.find(":\t");
    if (colon == std::string::npos || line.empty() || line[0] != ' ') continue;
    std::string rest = line.substr(colon + 2);
    std::istringstream hex(rest.substr(0, rest.find('\t')));
    for (std::string byte; hex >> byte;) bytes.push_back(std::stoul(byte, nullptr, 16));
  }
  return bytes;
}

std::set<uint64_t> RetVaddrs(const GoBinary& binary, const GoFunction& fn) {
  auto offsets = binary.ReturnInstructionOffsets(fn);
  EXPECT_TRUE(offsets.ok()) << (offsets ? "" : offsets.error().message);
  std::set<uint64_t> vaddrs;
  if (offsets) {
    for (uint64_t offset : *offsets) vaddrs.insert(offset - fn.file_offset + fn.entry);
  }
  return vaddrs;
}

// --- go version -m as the reference build info reader -----------------------------------------

struct GoVersionM {
  std::string go_version;
  std::string path;
  std::vector<std::string> modules;  // "mod|dep path version [=> path version]"
};

GoVersionM RunGoVersionM(const std::string& path) {
  GoVersionM out;
  auto lines = Lines(RunCommand("go version -m " + path));
  EXPECT_FALSE(lines.empty());
  if (lines.empty()) return out;
  out.go_version = lines[0].substr(lines[0].rfind(' ') + 1);  // "<path>: go1.19.8"
  for (size_t i = 1; i < lines.size(); ++i) {
    std::vector<std::string> cols;
    std::istringstream in(lines[i]);
    for (std::string col; std::getline(in, col, '\t');) cols.push_back(col);
    if (cols.size() < 3) continue;
    if (cols[1] == "path") out.path = cols[2];
    if (cols[1] == "mod" || cols[1] == "dep") {
      out.modules.push_back(cols[1] + " " + cols[2] + " " + (cols.size() > 3 ? cols[3] : ""));
    }
    if (cols[1] == "=>" && !out.modules.empty()) {
      out.modules.back() += " => " + cols[2] + " " + (cols.size() > 3 ? cols[3] : "");
    }
  }
  return out;
}

std::vector<std::string> ModuleLines(const GoBuildInfo& info) {
  std::vector<std::string> lines;
  auto add = [&](const std::string& kind, const GoModule& m) {
    std::string line = kind + " " + m.path + " " + m.version;
    if (m.replace) line += " => " + m.replace->path + " " + m.replace->version;
    lines.push_back(line);
  };
  if (info.main) add("mod", *info.main);
  for (const GoModule& dep : info.deps) add("dep", dep);
  return lines;
}

void ExpectBuildInfoMatchesGoTool(const GoBinary& binary, const std::string& path) {
  GoVersionM expected = RunGoVersionM(path);
  EXPECT_EQ(binary.go_version(), expected.go_version);
  EXPECT_EQ(binary.build_info().path, expected.path);
  EXPECT_EQ(ModuleLines(binary.build_info()), expected.modules);
}

// --- the fixture: stripped test API server vs. its unstripped twin -----------------------------

TEST(GoBinaryFixture, FixturesExist) {
  // CI always builds them (CMake target test-apiserver): a missing one is a failure.
  ASSERT_TRUE(std::filesystem::exists(kStripped)) << kStripped;
  ASSERT_TRUE(std::filesystem::exists(kUnstripped)) << kUnstripped;
}

// The linker's pclntab name for an ELF symbol: ABI0 (assembly) symbols carry a ".abi0" suffix
// only in .symtab, and type arguments (first '[' to last ']') are shortened to "[...]".
std::string PclntabName(std::string name) {
  if (name.ends_with(".abi0")) name.resize(name.size() - 5);
  size_t open = name.find('[');
  size_t close = name.rfind(']');
  if (open != std::string::npos && close != std::string::npos && close > open) {
    name = name.substr(0, open) + "[...]" + name.substr(close + 1);
  }
  return name;
}

// .symtab spells the middle dot of Go names as '.'.
std::string SymtabSpelling(std::string name) {
  for (size_t at; (at = name.find("\u00b7")) != std::string::npos;) name.replace(at, 2, ".");
  return name;
}

struct NmSymbol {
  uint64_t addr;
  uint64_t size;
  std::string name;
};

TEST(GoBinaryFixture, EveryTextSymbolFoundInStrippedPclntab) {
  ASSERT_TRUE(std::filesystem::exists(kStripped)) << kStripped;
  GoBinary binary = OpenOrDie(kStripped);
  EXPECT_EQ(binary.elf().FindSection(".symtab"), nullptr) << "fixture should be stripped";

  std::vector<NmSymbol> text;
  uint64_t go_text = 0, go_etext = 0;
  for (const std::string& line : Lines(RunCommand("go tool nm -size " + kUnstripped))) {
    // "%8x %10d %c %s": the name is the rest of the line and may contain spaces.
    std::istringstream in(line);
    NmSymbol sym;
    char type;
    in >> std::hex >> sym.addr >> std::dec >> sym.size >> type;
    std::getline(in >> std::ws, sym.name);
    if (type != 'T' && type != 't') continue;
    if (sym.name == "runtime.text") go_text = sym.addr;
    if (sym.name == "runtime.etext") go_etext = sym.addr;
    text.push_back(sym);
  }
  ASSERT_GT(text.size(), 1000u);
  ASSERT_LT(go_text, go_etext);

  std::map<std::string, std::set<uint64_t>> pclntab;  // names repeat: ABI wrappers, generics
  for (const GoFunction& fn : binary.functions()) pclntab[SymtabSpelling(fn.name)].insert(fn.entry);

  size_t compared = 0, not_functions = 0;
  std::map<uint64_t, uint64_t> size_at;
  for (const NmSymbol& sym : text) {
    // Not Go functions, so not in the pclntab: the runtime.text/etext markers, and C code
    // (cgo's objects: "runtime/cgo(.text)" inside Go's text, or outside it with external linking).
    if (sym.name == "runtime.text" || sym.name == "runtime.etext" ||
        sym.name.find("(.text") != std::string::npos || sym.addr < go_text ||
        sym.addr >= go_etext) {
      ++not_functions;
      continue;
    }
    ++compared;
    size_at[sym.addr] = sym.size;
    std::string name = PclntabName(sym.name);
    auto it = pclntab.find(name);
    ASSERT_NE(it, pclntab.end()) << sym.name << " (as " << name << ") not in the pclntab";
    EXPECT_TRUE(it->second.contains(sym.addr)) << sym.name << " at " << Hex(sym.addr);
  }
  EXPECT_EQ(compared, binary.functions().size());
  printf(
      "compared %zu text symbols of go tool nm with %zu pclntab functions (%zu not Go "
      "functions: markers, C code)\n",
      compared, binary.functions().size(), not_functions);

  // Function bounds: sorted, contiguous, and each at least as large as nm's size.
  const auto& fns = binary.functions();
  for (size_t i = 0; i < fns.size(); ++i) {
    ASSERT_LT(fns[i].entry, fns[i].end) << fns[i].name;
    if (i + 1 < fns.size()) {
      ASSERT_EQ(fns[i].end, fns[i + 1].entry) << fns[i].name;
    }
    EXPECT_GE(fns[i].end - fns[i].entry, size_at[fns[i].entry]) << fns[i].name;
  }
}

TEST(GoBinaryFixture, FileOffsetsHoldTheFunctionBytes) {
  ASSERT_TRUE(std::filesystem::exists(kStripped)) << kStripped;
  GoBinary binary = OpenOrDie(kStripped);
  // Every function: the bytes at our file offset in the stripped file equal the bytes at that
  // address in the unstripped file, located through its section headers instead of segments.
  auto twin = ElfFile::Open(kUnstripped);
  ASSERT_TRUE(twin.ok()) << twin.error().message;
  const ElfSection* text = twin->FindSection(".text");
  ASSERT_NE(text, nullptr);
  for (const GoFunction& fn : binary.functions()) {
    ASSERT_GE(fn.entry, text->addr);
    uint64_t size = std::min<uint64_t>(fn.end - fn.entry, 64);
    auto ours = binary.elf().BytesAt(fn.file_offset, size);
    auto theirs = twin->BytesAt(fn.entry - text->addr + text->offset, size);
    ASSERT_TRUE(ours && theirs) << fn.name;
    ASSERT_TRUE(std::equal(ours->begin(), ours->end(), theirs->begin())) << fn.name;
  }
  // And, for the probed functions, the bytes objdump shows at the address.
  for (std::string_view name : {kProcessHeaders, kHandlerDone, std::string_view("main.main")}) {
    auto fn = binary.FindFunction(name);
    ASSERT_TRUE(fn) << name;
    auto ours = binary.elf().BytesAt(fn->file_offset, 32);
    ASSERT_TRUE(ours);
    std::vector<uint8_t> objdump = ObjdumpBytes(kStripped, fn->entry, fn->entry + 32);
    EXPECT_EQ(std::vector<uint8_t>(ours->begin(), ours->end()), objdump) << name;
  }
}

TEST(GoBinaryFixture, ReturnInstructionsMatchObjdump) {
  ASSERT_TRUE(std::filesystem::exists(kStripped)) << kStripped;
  GoBinary binary = OpenOrDie(kStripped);
  // ABI0 symbols are assembly: the only code capstone may fail on (data in text such as
  // crypto/internal/boring/sig markers; AVX2 vbroadcasti128, unknown to capstone 4).
  std::set<uint64_t> assembly;
  for (const std::string& line : Lines(RunCommand("go tool nm " + kUnstripped))) {
    if (line.ends_with(".abi0")) assembly.insert(std::stoull(line, nullptr, 16));
  }
  std::set<uint64_t> all_rets = ObjdumpRets(kUnstripped);  // restarts at every symbol
  size_t functions = 0, rets = 0;
  std::vector<std::string> undecodable;
  for (const GoFunction& fn : binary.functions()) {
    auto offsets = binary.ReturnInstructionOffsets(fn);
    if (!offsets) {
      undecodable.push_back(fn.name);
      EXPECT_TRUE(assembly.contains(fn.entry)) << "compiled Go code failed: " << offsets.error().message;
      continue;
    }
    std::set<uint64_t> ours;
    for (uint64_t offset : *offsets) ours.insert(offset - fn.file_offset + fn.entry);
    std::set<uint64_t> theirs(all_rets.lower_bound(fn.entry), all_rets.lower_bound(fn.end));
    ASSERT_EQ(ours, theirs) << fn.name;
    ++functions;
    rets += ours.size();
  }
  printf("%zu RETs in %zu functions equal objdump's; undecodable (assembly):", rets, functions);
  for (const std::string& name : undecodable) printf(" %s", name.c_str());
  printf("\n");
  EXPECT_LE(undecodable.size(), 10u);

  for (std::string_view name : {kProcessHeaders, kHandlerDone}) {
    auto fn = binary.FindFunction(name);
    ASSERT_TRUE(fn) << name;
    EXPECT_FALSE(RetVaddrs(binary, *fn).empty()) << name;
  }
}

TEST(GoBinaryFixture, BuildInfoMatchesGoVersion) {
  ASSERT_TRUE(std::filesystem::exists(kStripped)) << kStripped;
  GoBinary binary = OpenOrDie(kStripped);
  ExpectBuildInfoMatchesGoTool(binary, kStripped);
  EXPECT_TRUE(binary.go_version().starts_with("go1."));
  // GOPATH-mode builds (as CMake builds the fixture) have no module info.
  if (!binary.build_info().main) {
    EXPECT_TRUE(binary.build_info().deps.empty());
  }
}

// --- Debian's stripped etcd ---------------------------------------------------------------------

TEST(GoBinaryEtcd, StrippedReleaseBinary) {
  auto start = std::chrono::steady_clock::now();
  auto etcd = GoBinary::Open(kEtcd);
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(etcd.ok()) << etcd.error().message;
  printf("opened %s (%llu bytes, %zu functions, pclntab magic %x) in %.1f ms\n", kEtcd.c_str(),
         static_cast<unsigned long long>(etcd->elf().size()), etcd->functions().size(),
         etcd->pclntab_magic(), ms);
  EXPECT_EQ(etcd->elf().FindSection(".symtab"), nullptr);
  EXPECT_EQ(etcd->elf().FindSection(".debug_info"), nullptr);
  EXPECT_EQ(etcd->elf().FindSection(".zdebug_info"), nullptr);
  EXPECT_GT(etcd->functions().size(), 10000u);
  ExpectBuildInfoMatchesGoTool(*etcd, kEtcd);

  for (std::string_view name : {kProcessHeaders, kHandlerDone,
                                std::string_view("go.etcd.io/etcd/etcdserver.(*EtcdServer).Range"),
                                std::string_view("net/http.(*http2serverConn).processHeaders"),
                                std::string_view("main.main")}) {
    auto fn = etcd->FindFunction(name);
    ASSERT_TRUE(fn) << name;
    EXPECT_LT(fn->entry, fn->end);
    std::set<uint64_t> ours = RetVaddrs(*etcd, *fn);
    EXPECT_FALSE(ours.empty()) << name;
    EXPECT_EQ(ours, ObjdumpRets(kEtcd, fn->entry, fn->end)) << name;
    auto bytes = etcd->elf().BytesAt(fn->file_offset, 16);
    ASSERT_TRUE(bytes);
    EXPECT_EQ(std::vector<uint8_t>(bytes->begin(), bytes->end()),
              ObjdumpBytes(kEtcd, fn->entry, fn->entry + 16))
        << name;
  }
  EXPECT_FALSE(etcd->FindFunction("golang.org/x/net/http2.(*serverConn).noSuchMethod"));
}

TEST(GoBinaryEtcd, EveryCompiledFunctionDisassembles) {
  GoBinary etcd = OpenOrDie(kEtcd);
  size_t rets = 0, failed = 0;
  for (const GoFunction& fn : etcd.functions()) {
    auto offsets = etcd.ReturnInstructionOffsets(fn);
    if (offsets) {
      rets += offsets->size();
    } else {
      ++failed;  // assembly only (see ReturnInstructionsMatchObjdump)
    }
  }
  printf("%zu RETs in %zu functions, %zu undecodable\n", rets, etcd.functions().size(), failed);
  EXPECT_LE(failed, 10u);
}

// --- module info text ---------------------------------------------------------------------------

TEST(GoBinaryBuildInfo, ParsesModulesAndReplacements) {
  auto info = ParseGoModInfo("go1.21.7",
                             "path\tk8s.io/kubernetes/cmd/kube-apiserver\n"
                             "mod\tk8s.io/kubernetes\t(devel)\t\n"
                             "dep\tgolang.org/x/net\tv0.17.0\th1:aaa=\n"
                             "=>\tgolang.org/x/net\tv0.19.0\th1:bbb=\n"
                             "dep\tgoogle.golang.org/grpc\tv1.58.3\th1:ccc=\n"
                             "dep\tk8s.io/api\tv0.0.0\n"
                             "=>\t./staging/src/k8s.io/api\t\t\n"
                             "build\t-ldflags=\"-s -w\"\n"
                             "build\tGOARCH=amd64\n"
                             "dep\tignored.example/unterminated\tv1.0.0");
  ASSERT_TRUE(info.ok()) << info.error().message;
  EXPECT_EQ(info->go_version, "go1.21.7");
  EXPECT_EQ(info->path, "k8s.io/kubernetes/cmd/kube-apiserver");
  ASSERT_TRUE(info->main);
  EXPECT_EQ(info->main->path, "k8s.io/kubernetes");
  EXPECT_EQ(info->main->version, "(devel)");
  ASSERT_EQ(info->deps.size(), 3u);  // the unterminated last line is ignored, as Go does
  const GoModule* xnet = info->FindModule("golang.org/x/net");
  ASSERT_NE(xnet, nullptr);
  EXPECT_EQ(xnet->version, "v0.17.0");
  EXPECT_EQ(xnet->sum, "h1:aaa=");
  ASSERT_TRUE(xnet->replace);
  EXPECT_EQ(xnet->effective_version(), "v0.19.0");
  EXPECT_EQ(info->FindModule("google.golang.org/grpc")->effective_version(), "v1.58.3");
  const GoModule* api = info->FindModule("k8s.io/api");
  ASSERT_NE(api, nullptr);
  EXPECT_EQ(api->replace->path, "./staging/src/k8s.io/api");
  EXPECT_EQ(api->effective_version(), "");  // a directory: version unknown
  EXPECT_EQ(info->FindModule("k8s.io/kubernetes"), &*info->main);
  EXPECT_EQ(info->FindModule("nope"), nullptr);
  ASSERT_EQ(info->settings.size(), 2u);
  EXPECT_EQ(info->settings[0].first, "-ldflags");
  EXPECT_EQ(info->settings[1].second, "amd64");
}

TEST(GoBinaryBuildInfo, RejectsMalformedModuleLines) {
  EXPECT_FALSE(ParseGoModInfo("go1.19", "dep\tonly-path\n").ok());
  EXPECT_FALSE(ParseGoModInfo("go1.19", "dep\ta\tb\tc\td\n").ok());
  EXPECT_FALSE(ParseGoModInfo("go1.19", "=>\ta\tv1\th1:x\n").ok());        // nothing to replace
  EXPECT_FALSE(ParseGoModInfo("go1.19", "dep\ta\tv1\n=>\ta\tv2\n").ok());  // 2 columns
  EXPECT_FALSE(ParseGoModInfo("go1.19", "build\tnoequals\n").ok());
  auto empty = ParseGoModInfo("go1.19", "");
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(empty->main);
}

// --- synthetic Go binaries: every pclntab format, both build info formats ---------------------

// A minimal Go-shaped ELF with no section headers, so both tables are found by scanning:
// text (R+X) at 0x401000, pclntab (R) at 0x402000, build info (RW) at 0x403000.
constexpr uint64_t kTextVaddr = 0x401000, kTabVaddr = 0x402000, kDataVaddr = 0x403000;
constexpr uint64_t kTextOffset = 0x1000, kTabOffset = 0x2000, kDataOffset = 0x3000;
// main.one: mov rax, rax; ret.  main.two: rep ret; ret 8; nop.
const std::vector<uint8_t> kCode = {0x48, 0x89, 0xc0, 0xc3, 0xf3, 0xc3, 0xc2, 0x08, 0x00, 0x90};
constexpr uint64_t kTwoOffset = 4;
const std::string kSentinelStart("0w\xaf\x0c\x92t\x08\x02\x41\xe1\xc1\x07\xe6\xd6\x18\xe6", 16);
const std::string kSentinelEnd("\xf9\x32\x43\x31\x86\x18\x20\x72\x00\x82\x42\x10\x41\x16\xd8\xf2",
                               16);

class Image {
 public:
  explicit Image(size_t size) : bytes_(size) {}
  template <typename T>
  void Put(uint64_t offset, T value) {
    if (offset + sizeof(T) > bytes_.size()) std::abort();  // a bug in the test
    std::memcpy(bytes_.data() + offset, &value, sizeof(T));
  }
  void PutString(uint64_t offset, std::string_view s) {
    for (size_t i = 0; i < s.size(); ++i) bytes_.at(offset + i) = s[i];
  }
  void PutVarintString(uint64_t* offset, std::string_view s) {
    uint64_t len = s.size();
    do {
      bytes_.at((*offset)++) = (len & 0x7f) | (len >= 0x80 ? 0x80 : 0);
      len >>= 7;
    } while (len != 0);
    PutString(*offset, s);
    *offset += s.size();
  }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

void PutPclntab(Image& image, uint32_t magic) {
  const uint64_t tab = kTabOffset;
  image.Put<uint32_t>(tab, magic);
  image.Put<uint8_t>(tab + 6, 1);  // pc quantum
  image.Put<uint8_t>(tab + 7, 8);  // pointer size
  auto word = [&](int n, uint64_t v) { image.Put<uint64_t>(tab + 8 + 8 * n, v); };
  constexpr uint64_t kNames = 72, kFuncdata = 96;  // offsets within the table
  image.PutString(tab + kNames, std::string_view("main.one\0main.two\0", 18));
  word(0, 2);  // functions
  if (magic == 0xfffffff0 || magic == 0xfffffff1) {
    for (int n : {3, 4, 5, 6}) word(n, kNames);  // names, then cu/file/pc tables (unused)
    word(2, kTextVaddr);
    word(7, kFuncdata);
    // functab: {entry offset, _func offset} pairs of uint32, then the end offset.
    uint64_t i = 0;
    for (uint32_t v : {0u, 24u, 4u, 32u, 10u}) image.Put<uint32_t>(tab + kFuncdata + 4 * i++, v);
    image.Put<uint32_t>(tab + kFuncdata + 24, 0);  // _func: entryOff, nameOff
    image.Put<uint32_t>(tab + kFuncdata + 28, 0);
    image.Put<uint32_t>(tab + kFuncdata + 32, 4);
    image.Put<uint32_t>(tab + kFuncdata + 36, 9);
  } else if (magic == 0xfffffffa) {
    for (int n : {2, 3, 4, 5}) word(n, kNames);
    word(6, kFuncdata);
    // functab: {entry pc, _func offset} pairs of uint64, then the end pc.
    uint64_t i = 0;
    for (uint64_t v : {kTextVaddr, 48ul, kTextVaddr + 4, 64ul, kTextVaddr + 10}) {
      image.Put<uint64_t>(tab + kFuncdata + 8 * i++, v);
    }
    image.Put<uint64_t>(tab + kFuncdata + 48, kTextVaddr);  // _func: entry, nameOff
    image.Put<uint32_t>(tab + kFuncdata + 56, 0);
    image.Put<uint64_t>(tab + kFuncdata + 64, kTextVaddr + 4);
    image.Put<uint32_t>(tab + kFuncdata + 72, 9);
  } else {  // Go 1.2: functab after nfunc, offsets relative to the table
    uint64_t i = 0;
    for (uint64_t v : {kTextVaddr, kFuncdata, kTextVaddr + 4, kFuncdata + 16, kTextVaddr + 10}) {
      image.Put<uint64_t>(tab + 16 + 8 * i++, v);
    }
    image.Put<uint64_t>(tab + kFuncdata, kTextVaddr);
    image.Put<uint32_t>(tab + kFuncdata + 8, kNames);
    image.Put<uint64_t>(tab + kFuncdata + 16, kTextVaddr + 4);
    image.Put<uint32_t>(tab + kFuncdata + 24, kNames + 9);
  }
}

void PutBuildInfo(Image& image, bool inline_strings, std::string_view version,
                  std::string_view modinfo) {
  const uint64_t at = kDataOffset + 0x40;  // 16-aligned, not at the segment start
  image.PutString(at, "\xff Go buildinf:");
  image.Put<uint8_t>(at + 14, 8);
  image.Put<uint8_t>(at + 15, inline_strings ? 2 : 0);
  std::string framed = kSentinelStart + std::string(modinfo) + kSentinelEnd;
  if (inline_strings) {
    uint64_t offset = at + 32;
    image.PutVarintString(&offset, version);
    image.PutVarintString(&offset, framed);
  } else {
    // Pointers to Go string headers {data, len}, as before Go 1.18.
    image.Put<uint64_t>(at + 16, kDataVaddr + 0x100);
    image.Put<uint64_t>(at + 24, kDataVaddr + 0x110);
    image.Put<uint64_t>(kDataOffset + 0x100, kDataVaddr + 0x200);
    image.Put<uint64_t>(kDataOffset + 0x108, version.size());
    image.Put<uint64_t>(kDataOffset + 0x110, kDataVaddr + 0x300);
    image.Put<uint64_t>(kDataOffset + 0x118, framed.size());
    image.PutString(kDataOffset + 0x200, version);
    image.PutString(kDataOffset + 0x300, framed);
  }
}

std::vector<uint8_t> SyntheticGoBinary(uint32_t magic, bool inline_strings,
                                       std::string_view modinfo) {
  Image image(0x4000);
  Elf64_Ehdr ehdr{};
  std::memcpy(ehdr.e_ident, ELFMAG, SELFMAG);
  ehdr.e_ident[EI_CLASS] = ELFCLASS64;
  ehdr.e_ident[EI_DATA] = ELFDATA2LSB;
  ehdr.e_ident[EI_VERSION] = EV_CURRENT;
  ehdr.e_type = ET_EXEC;
  ehdr.e_machine = EM_X86_64;
  ehdr.e_version = EV_CURRENT;
  ehdr.e_entry = kTextVaddr;
  ehdr.e_phoff = sizeof(Elf64_Ehdr);
  ehdr.e_ehsize = sizeof(Elf64_Ehdr);
  ehdr.e_phentsize = sizeof(Elf64_Phdr);
  ehdr.e_phnum = 3;
  image.Put(0, ehdr);
  struct {
    uint32_t flags;
    uint64_t offset, vaddr;
  } segments[] = {{PF_R | PF_X, kTextOffset, kTextVaddr},
                  {PF_R, kTabOffset, kTabVaddr},
                  {PF_R | PF_W, kDataOffset, kDataVaddr}};
  for (int i = 0; i < 3; ++i) {
    Elf64_Phdr phdr{};
    phdr.p_type = PT_LOAD;
    phdr.p_flags = segments[i].flags;
    phdr.p_offset = segments[i].offset;
    phdr.p_vaddr = phdr.p_paddr = segments[i].vaddr;
    phdr.p_filesz = 0x1000;
    phdr.p_memsz = i == 2 ? 0x2000 : 0x1000;  // bss after the data
    phdr.p_align = 0x1000;
    image.Put(sizeof(Elf64_Ehdr) + i * sizeof(Elf64_Phdr), phdr);
  }
  for (size_t i = 0; i < kCode.size(); ++i) image.Put<uint8_t>(kTextOffset + i, kCode[i]);
  for (size_t i = kCode.size(); i < 0x1000; ++i) image.Put<uint8_t>(kTextOffset + i, 0xcc);
  PutPclntab(image, magic);
  PutBuildInfo(image, inline_strings, "go1.99.1", modinfo);
  return image.bytes();
}

constexpr std::string_view kModInfo =
    "path\texample.com/app\n"
    "mod\texample.com/app\tv1.2.3\th1:app=\n"
    "dep\tgolang.org/x/net\tv0.17.0\th1:old=\n"
    "=>\tgolang.org/x/net\tv0.19.0\th1:new=\n"
    "build\tGOARCH=amd64\n";

class GoBinarySynthetic : public testing::TestWithParam<std::tuple<uint32_t, bool>> {};

TEST_P(GoBinarySynthetic, ReadsFunctionsBuildInfoAndReturns) {
  auto [magic, inline_strings] = GetParam();
  std::string path = TempPath("synthetic");
  WriteFile(path, SyntheticGoBinary(magic, inline_strings, kModInfo));
  auto binary = GoBinary::Open(path);
  ASSERT_TRUE(binary.ok()) << binary.error().message;
  EXPECT_EQ(binary->pclntab_magic(), magic);
  ASSERT_EQ(binary->functions().size(), 2u);
  auto one = binary->FindFunction("main.one");
  auto two = binary->FindFunction("main.two");
  ASSERT_TRUE(one && two);
  EXPECT_EQ(one->entry, kTextVaddr);
  EXPECT_EQ(one->end, kTextVaddr + kTwoOffset);
  EXPECT_EQ(one->file_offset, kTextOffset);
  EXPECT_EQ(two->entry, kTextVaddr + kTwoOffset);
  EXPECT_EQ(two->end, kTextVaddr + kCode.size());
  EXPECT_EQ(two->file_offset, kTextOffset + kTwoOffset);
  EXPECT_FALSE(binary->FindFunction("main.three"));

  auto rets_one = binary->ReturnInstructionOffsets(*one);
  ASSERT_TRUE(rets_one.ok()) << rets_one.error().message;
  EXPECT_EQ(*rets_one, std::vector<uint64_t>{kTextOffset + 3});
  auto rets_two = binary->ReturnInstructionOffsets(*two);
  ASSERT_TRUE(rets_two.ok()) << rets_two.error().message;
  EXPECT_EQ(*rets_two,
            (std::vector<uint64_t>{kTextOffset + 4, kTextOffset + 6}));  // rep ret, ret 8

  const GoBuildInfo& info = binary->build_info();
  EXPECT_EQ(info.go_version, "go1.99.1");
  EXPECT_EQ(info.path, "example.com/app");
  ASSERT_TRUE(info.main);
  EXPECT_EQ(info.main->version, "v1.2.3");
  ASSERT_EQ(info.deps.size(), 1u);
  EXPECT_EQ(info.deps[0].effective_version(), "v0.19.0");
  std::filesystem::remove(path);
}

INSTANTIATE_TEST_SUITE_P(GoBinary, GoBinarySynthetic,
                         testing::Combine(testing::Values(0xfffffff1u, 0xfffffff0u, 0xfffffffau,
                                                          0xfffffffbu),
                                          testing::Bool()));

TEST(GoBinarySyntheticErrors, NoModuleInfoIsEmptyNotAnError) {
  std::string path = TempPath("gopath");
  std::vector<uint8_t> bytes = SyntheticGoBinary(0xfffffff0u, true, "");
  // A GOPATH build's modinfo is empty: no sentinels either.
  Image image(0);
  image.bytes() = bytes;
  uint64_t offset = kDataOffset + 0x40 + 32;
  image.PutVarintString(&offset, "go1.99.1");
  image.PutVarintString(&offset, "");
  WriteFile(path, image.bytes());
  auto binary = GoBinary::Open(path);
  ASSERT_TRUE(binary.ok()) << binary.error().message;
  EXPECT_EQ(binary->go_version(), "go1.99.1");
  EXPECT_FALSE(binary->build_info().main);
  EXPECT_TRUE(binary->build_info().deps.empty());
  std::filesystem::remove(path);
}

TEST(GoBinarySyntheticErrors, UndecodableBytesAreAnError) {
  auto rets = FindReturnInstructions(std::vector<uint8_t>{0xc3, 0x0f, 0x0b, 0xc3, 0x0f}, 0x100);
  ASSERT_FALSE(rets.ok());
  EXPECT_NE(rets.error().message.find("0x104"), std::string::npos) << rets.error().message;
  auto ok = FindReturnInstructions(std::vector<uint8_t>{0xc3, 0x0f, 0x0b, 0xc3}, 0x100);
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(*ok, (std::vector<uint64_t>{0x100, 0x103}));  // ret; ud2; ret
}

TEST(GoBinarySyntheticErrors, EveryTruncationIsAnError) {
  std::vector<uint8_t> full = SyntheticGoBinary(0xfffffff1u, false, kModInfo);
  std::string path = TempPath("truncated");
  WriteFile(path, full);
  ASSERT_TRUE(GoBinary::Open(path).ok());
  for (size_t size = full.size() - 1;; --size) {
    std::filesystem::resize_file(path, size);
    auto binary = GoBinary::Open(path);
    ASSERT_FALSE(binary.ok()) << "truncated to " << size;
    ASSERT_FALSE(binary.error().message.empty());
    if (size == 0) break;
  }
  std::filesystem::remove(path);
}

TEST(GoBinarySyntheticErrors, CorruptTablesAreErrors) {
  struct Corruption {
    const char* what;
    uint64_t offset;
    uint64_t value;
    int size;
  };
  const Corruption corruptions[] = {
      {"pclntab magic", kTabOffset, 0xfffffff7, 4},
      {"pointer size", kTabOffset + 7, 4, 1},
      {"huge function count", kTabOffset + 8, 1ull << 40, 8},
      {"text start zero", kTabOffset + 24, 0, 8},
      {"text start outside text", kTabOffset + 24, 0x900000, 8},
      {"name table offset", kTabOffset + 32, 0x10000, 8},
      {"funcdata offset", kTabOffset + 64, 0x10000, 8},
      {"_func offset", kTabOffset + 96 + 4, 0xfffffff0, 4},
      {"name offset", kTabOffset + 96 + 28, 0x7ffffff0, 4},
      {"unsorted table", kTabOffset + 96 + 8, 100, 4},
      {"name without NUL", kTabOffset + 96 + 36, 0xff0 - 72, 4},  // see below
      {"build info magic", kDataOffset + 0x40, 0, 8},
      {"build info pointer", kDataOffset + 0x40 + 16, 0xdeadbeef, 8},
      {"build info string length", kDataOffset + 0x118, 1ull << 62, 8},
      {"empty go version", kDataOffset + 0x108, 0, 8},
      {"phdr offset", 32, 1ull << 62, 8},
      {"segment outside the file", 64 + 56 + 8, 0x100000, 8},
      {"not x86-64", 18, EM_AARCH64, 2},
  };
  std::string path = TempPath("corrupt");
  for (const Corruption& c : corruptions) {
    Image image(0);
    image.bytes() = SyntheticGoBinary(0xfffffff0u, false, kModInfo);
    if (std::string_view(c.what) == "name without NUL") {
      // main.two's name runs into the end of the table's segment.
      for (uint64_t i = kTabOffset + 0xff0; i < kTabOffset + 0x1000; ++i)
        image.Put<uint8_t>(i, 'a');
    }
    for (int i = 0; i < c.size; ++i) image.Put<uint8_t>(c.offset + i, (c.value >> (8 * i)) & 0xff);
    WriteFile(path, image.bytes());
    auto binary = GoBinary::Open(path);
    ASSERT_FALSE(binary.ok()) << c.what;
    printf("%-26s -> %s\n", c.what, binary.error().message.c_str());
  }
  std::filesystem::remove(path);
}

// A crafted table whose functions all share one long name: copying the name per function would
// take gigabytes from a few megabytes of file; the reader refuses it instead.
TEST(GoBinarySyntheticErrors, SharedLongNameIsRefusedNotCopied) {
  Image image(0);
  image.bytes() = SyntheticGoBinary(0xfffffff1u, false, kModInfo);
  const uint64_t tab = kTabOffset;
  constexpr uint64_t kFunctions = 200, kFunctab = 96, kFunc = kFunctab + 8 * kFunctions + 8;
  constexpr uint64_t kLongName = 0x800, kNameBytes = 1500;
  image.Put<uint64_t>(tab + 8, kFunctions);
  image.Put<uint64_t>(tab + 8 + 8 * 3, kLongName);  // name table
  image.Put<uint64_t>(tab + 8 + 8 * 7, kFunctab);   // function table and _func records
  for (uint64_t i = 0; i < kFunctions; ++i) {
    image.Put<uint32_t>(tab + kFunctab + 8 * i, 0);          // entry
    image.Put<uint32_t>(tab + kFunctab + 8 * i + 4, kFunc);  // every function: one _func
  }
  image.Put<uint32_t>(tab + kFunctab + 8 * kFunctions, 10);  // end of the last function
  image.Put<uint32_t>(tab + kFunc, 0);                       // _func: entryOff, nameOff, args
  image.Put<uint32_t>(tab + kFunc + 4, 0);
  image.Put<uint32_t>(tab + kFunc + 8, 0);
  image.PutString(tab + kLongName, std::string(kNameBytes, 'a'));
  image.Put<uint8_t>(tab + kLongName + kNameBytes, 0);
  std::string path = TempPath("shared-name");
  WriteFile(path, image.bytes());
  auto binary = GoBinary::Open(path);
  ASSERT_FALSE(binary.ok());
  EXPECT_NE(binary.error().message.find("function names total 300000 bytes"), std::string::npos)
      << binary.error().message;
  EXPECT_EQ(binary.error().code, ErrorCode::kLimit) << "a bound, kept through the path's context";
  std::filesystem::remove(path);
}

// The error's code says what kind of refusal it is, for callers that count or branch: a C
// program (an ELF without Go's tables) is kNotFound, a corrupt table kInvalid.
TEST(GoBinarySyntheticErrors, ErrorCodesSayWhatKindOfRefusal) {
  auto not_go = GoBinary::Open("/bin/sh");
  ASSERT_FALSE(not_go.ok());
  EXPECT_EQ(not_go.error().code, ErrorCode::kNotFound) << not_go.error().message;
  EXPECT_NE(not_go.error().message.find("/bin/sh: "), std::string::npos) << not_go.error().message;
  EXPECT_EQ(ErrorCodeName(not_go.error().code), "not_found");
  auto not_elf = GoBinary::Open("/etc/hostname");
  ASSERT_FALSE(not_elf.ok());
  EXPECT_EQ(not_elf.error().code, ErrorCode::kInvalid) << not_elf.error().message;
}

// Without section headers the pclntab is found by scanning the segments for its header; every
// look-alike is parsed as far as its function table goes, so a file full of them took time
// quadratic in its size. At most 16 candidates are tried: the 16 look-alikes in .text before the
// real table leave it unread, 15 do not.
TEST(GoBinarySyntheticErrors, PclntabLookAlikesAreBounded) {
  for (int fakes : {15, 16}) {
    Image image(0);
    image.bytes() = SyntheticGoBinary(0xfffffff1u, true, kModInfo);
    for (int i = 0; i < fakes; ++i) {  // after the code, 16-byte apart: magic, 0, 0, quantum, ptr
      const uint64_t at = kTextOffset + 0x100 + 16 * i;
      image.Put<uint32_t>(at, 0xfffffff1u);
      image.Put<uint16_t>(at + 4, 0);
      image.Put<uint8_t>(at + 6, 1);
      image.Put<uint8_t>(at + 7, 8);
    }
    std::string path = TempPath("look-alikes");
    WriteFile(path, image.bytes());
    auto binary = GoBinary::Open(path);
    std::filesystem::remove(path);
    if (fakes == 15) {
      ASSERT_TRUE(binary.ok()) << binary.error().message;
      EXPECT_EQ(binary->functions().size(), 2u);
    } else {
      EXPECT_FALSE(binary.ok()) << "the 17th candidate is not tried";
    }
  }
}

// --- a real binary, truncated and corrupted ----------------------------------------------------

TEST(GoBinaryFixture, TruncatedOrCorruptCopiesAreErrors) {
  ASSERT_TRUE(std::filesystem::exists(kStripped)) << kStripped;
  const std::vector<uint8_t> original = ReadFile(kStripped);
  auto elf = ElfFile::Open(kStripped);
  ASSERT_TRUE(elf.ok()) << elf.error().message;
  const ElfSection* pcln = elf->FindSection(".gopclntab");
  if (!pcln) pcln = elf->FindSection(".data.rel.ro.gopclntab");  // PIE
  const ElfSection* buildinfo = elf->FindSection(".go.buildinfo");
  ASSERT_TRUE(pcln && buildinfo);
  std::string path = TempPath("real");

  uint64_t loaded_end = 0;  // the file may end with padding no segment covers
  for (const ElfSegment& seg : elf->segments()) {
    if (seg.type == PT_LOAD) loaded_end = std::max(loaded_end, seg.offset + seg.filesz);
  }
  for (uint64_t size : {0ul, 4ul, 63ul, 64ul, 200ul, original.size() / 3, pcln->offset + 100,
                        pcln->offset + pcln->size / 2, buildinfo->offset + 20, loaded_end - 1}) {
    WriteFile(path, std::vector<uint8_t>(original.begin(), original.begin() + size));
    auto binary = GoBinary::Open(path);
    EXPECT_FALSE(binary.ok()) << "truncated to " << size;
    if (!binary.ok()) printf("truncated to %9lu -> %s\n", size, binary.error().message.c_str());
  }

  // Corrupt in place and restore: copying the whole binary each time would dominate the test.
  WriteFile(path, original);
  auto patch = [&](uint64_t offset, const std::vector<uint8_t>& bytes) {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(offset);
    file.write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  };
  auto corrupt = [&](uint64_t offset, const std::vector<uint8_t>& bytes) {
    patch(offset, bytes);
    auto binary = GoBinary::Open(path);
    patch(offset, {original.begin() + offset, original.begin() + offset + bytes.size()});
    return binary;
  };
  const std::vector<uint8_t> ff8(8, 0xff);
  for (auto [what, offset] : std::initializer_list<std::pair<const char*, uint64_t>>{
           {"pclntab magic", pcln->offset},
           {"pclntab function count", pcln->offset + 8},
           {"pclntab name table offset", pcln->offset + 8 + 3 * 8},
           {"pclntab funcdata offset", pcln->offset + 8 + 7 * 8},
           {"build info magic", buildinfo->offset},
           {"section header offset", 40}}) {
    auto binary = corrupt(offset, ff8);
    EXPECT_FALSE(binary.ok()) << what;
    if (!binary.ok()) printf("corrupt %-26s -> %s\n", what, binary.error().message.c_str());
  }

  // Random bytes over the headers and tables never crash (the result may or may not be ok).
  uint64_t state = 42;
  auto next = [&] { return state = state * 6364136223846793005ull + 1442695040888963407ull; };
  size_t ok = 0;
  for (int i = 0; i < 300; ++i) {
    uint64_t region = i % 3 == 0 ? 0 : i % 3 == 1 ? pcln->offset : buildinfo->offset;
    std::vector<uint8_t> bytes(original.begin() + region, original.begin() + region + 256);
    for (int j = 0; j < 8; ++j) bytes[(next() >> 33) % 256] = static_cast<uint8_t>(next() >> 56);
    ok += corrupt(region, bytes).ok();
  }
  printf("300 randomly corrupted copies: %zu still opened, none crashed\n", ok);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace stormwatch
