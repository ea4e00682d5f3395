// The versioned offset table (agent/capture/go_offsets.cc) and the probe plan per binary
// (agent/capture/target_manager.cc), without privileges:
//  - Go version parsing and the proven/unproven combinations of (stack, Go, x/net);
//  - for the test API server built by every toolchain of the matrix (CMake:
//    test-apiserver-go1.NN), both HTTP/2 stacks are found in the stripped binary, the layout
//    lookup succeeds, the probe sites sit after the stack-growth check exactly where the
//    toolchain's own objdump says, and every offset of the table equals the compiler's DWARF
//    of the unstripped build (read by a small Go program, debug/dwarf).
// The end-to-end proof (real uprobes, exact counts) is tests/e2e/test_capture_matrix.py.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "agent/capture/go_binary.h"
#include "agent/capture/go_offsets.h"
#include "agent/capture/target_manager.h"

namespace stormwatch {
namespace {

const std::string kGoOut = STORMWATCH_GO_OUT;
const char* const kMatrix[] = {"1.19", "1.21", "1.22", "1.23"};

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

std::string Run(const std::string& cmd, int* status = nullptr) {
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (pipe && fgets(buf, sizeof(buf), pipe)) out += buf;
  int rc = pipe ? pclose(pipe) : -1;
  if (status) *status = rc;
  return out;
}

// ---- GoVersion ----

TEST(GoVersionParse, Releases) {
  auto v = GoVersion::Parse("go1.21.13");
  ASSERT_TRUE(v.ok()) << v.error();
  EXPECT_EQ(v->major, 1);
  EXPECT_EQ(v->minor, 21);
  EXPECT_EQ(v->patch, 13);
  EXPECT_TRUE(v->is_release());
  v = GoVersion::Parse("go1.19");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ((std::tuple{v->major, v->minor, v->patch}), (std::tuple{1, 19, 0}));
  EXPECT_TRUE(v->is_release());
  EXPECT_LT(*GoVersion::Parse("go1.19.8"), *GoVersion::Parse("go1.21.0"));
  EXPECT_LT(*GoVersion::Parse("go1.21.9"), *GoVersion::Parse("go1.21.13"));
}

TEST(GoVersionParse, PreReleasesAndExperimentsKeepTheirSuffix) {
  auto v = GoVersion::Parse("go1.22rc1");
  ASSERT_TRUE(v.ok()) << v.error();
  EXPECT_EQ((std::tuple{v->major, v->minor, v->patch}), (std::tuple{1, 22, 0}));
  EXPECT_EQ(v->suffix, "rc1");
  EXPECT_FALSE(v->is_release());
  v = GoVersion::Parse("go1.21beta2");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->suffix, "beta2");
  v = GoVersion::Parse("go1.21.13 X:boringcrypto");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->patch, 13);
  EXPECT_EQ(v->suffix, " X:boringcrypto");
  EXPECT_FALSE(v->is_release());
}

TEST(GoVersionParse, RejectsNonReleases) {
  EXPECT_FALSE(GoVersion::Parse("devel go1.23-4c1ac5a9 Tue Jan 2 10:00:00 2024 +0000").ok());
  EXPECT_FALSE(GoVersion::Parse("devel +b7a4c3d1 Mon Jan 1 2024").ok());
  EXPECT_FALSE(GoVersion::Parse("").ok());
  EXPECT_FALSE(GoVersion::Parse("go").ok());
  EXPECT_FALSE(GoVersion::Parse("go.1.21").ok());
  EXPECT_FALSE(GoVersion::Parse("1.21.0").ok());
  EXPECT_FALSE(GoVersion::Parse("go2.0.0").ok());
}

// ---- the table ----

TEST(GoOffsetTable, ProvenXNetOnEveryMatrixRelease) {
  for (const char* go : {"go1.19.8", "go1.21.13", "go1.22.12", "go1.23.5", "go1.21.0", "go1.23.12"}) {
    auto l = LookupGoHttp2Layout(XNetHttp2Stack(), go, "v0.7.0", /*module_info=*/true);
    ASSERT_TRUE(l.ok()) << go << ": " << l.error();
    EXPECT_EQ(l->note, "") << go;
    EXPECT_EQ(l->offsets.mhf_fields, 8u);
    EXPECT_EQ(l->offsets.frame_stream_id, 8u);
    EXPECT_EQ(l->offsets.field_size, 40u);
    EXPECT_EQ(l->offsets.field_value, 16u);
    EXPECT_EQ(l->offsets.rws_status, 72u);
    EXPECT_EQ(l->offsets.rws_wrote_bytes, 96u);
    EXPECT_EQ(l->offsets.stream_id, 8u);
  }
}

TEST(GoOffsetTable, StdLayoutPerGoRelease) {
  // Go 1.19's bundled responseWriterState still has `body *http2requestBody` after req.
  auto l19 = LookupGoHttp2Layout(StdHttp2Stack(), "go1.19.8", "", false);
  ASSERT_TRUE(l19.ok()) << l19.error();
  EXPECT_EQ(l19->offsets.rws_status, 80u);
  EXPECT_EQ(l19->offsets.rws_wrote_bytes, 104u);
  EXPECT_EQ(l19->note, "");
  for (const char* go : {"go1.21.13", "go1.22.12", "go1.23.5"}) {
    auto l = LookupGoHttp2Layout(StdHttp2Stack(), go, "", false);
    ASSERT_TRUE(l.ok()) << go << ": " << l.error();
    EXPECT_EQ(l->offsets.rws_status, 72u) << go;
    EXPECT_EQ(l->offsets.rws_wrote_bytes, 96u) << go;
    EXPECT_EQ(l->note, "") << go << ": the std stack's version is the Go version";
  }
  // The std stack ignores x/net's version: a module build with any x/net is fine.
  EXPECT_TRUE(LookupGoHttp2Layout(StdHttp2Stack(), "go1.22.3", "v0.19.0", true).ok());
}

TEST(GoOffsetTable, UnprovenGoReleasesAreRefusedForBothStacks) {
  for (const Http2Stack* stack : {&XNetHttp2Stack(), &StdHttp2Stack()}) {
    for (const char* go : {"go1.18.10", "go1.20.14", "go1.24.0", "go1.17"}) {
      auto l = LookupGoHttp2Layout(*stack, go, "v0.7.0", true);
      ASSERT_FALSE(l.ok()) << stack->name << " " << go;
      EXPECT_NE(l.error().find(go), std::string::npos) << l.error();
      EXPECT_NE(l.error().find("not proven"), std::string::npos) << l.error();
      EXPECT_NE(l.error().find("(proven: go1.19, go1.21, go1.22, go1.23)"), std::string::npos) << l.error();
    }
    for (const char* go : {"go1.22rc1", "go1.21.13 X:boringcrypto", "devel go1.23-abc"}) {
      auto l = LookupGoHttp2Layout(*stack, go, "v0.7.0", true);
      EXPECT_FALSE(l.ok()) << stack->name << " " << go;
    }
  }
}

TEST(GoOffsetTable, XNetVersionMustBeProvenInModuleBuilds) {
  // kube-apiserver v1.28.7's pair, measured on the release binary (DESIGN.md), is accepted;
  // the same x/net with another Go release was never measured.
  EXPECT_TRUE(LookupGoHttp2Layout(XNetHttp2Stack(), "go1.21.13", "v0.19.0", true).ok());
  EXPECT_FALSE(LookupGoHttp2Layout(XNetHttp2Stack(), "go1.22.12", "v0.19.0", true).ok());
  for (const char* xnet : {"v0.6.0", "v0.8.0", "v0.7.1-0.20230301000000-abcdef123456"}) {
    auto l = LookupGoHttp2Layout(XNetHttp2Stack(), "go1.21.13", xnet, true);
    ASSERT_FALSE(l.ok()) << xnet;
    EXPECT_NE(l.error().find(xnet), std::string::npos) << l.error();
    EXPECT_NE(l.error().find("v0.7.0"), std::string::npos) << l.error();
  }
  // Module information but no x/net module for the x/net code: unknown, refused.
  EXPECT_FALSE(LookupGoHttp2Layout(XNetHttp2Stack(), "go1.21.13", "", true).ok());
}

TEST(GoOffsetTable, GopathBuildsAreAcceptedWithACaveat) {
  auto l = LookupGoHttp2Layout(XNetHttp2Stack(), "go1.22.12", "", /*module_info=*/false);
  ASSERT_TRUE(l.ok()) << l.error();
  EXPECT_NE(l->note.find("GOPATH"), std::string::npos) << l->note;
  EXPECT_NE(l->note.find("v0.7.0"), std::string::npos) << l->note;
  // ... but not when the Go release itself is unproven.
  EXPECT_FALSE(LookupGoHttp2Layout(XNetHttp2Stack(), "go1.20.1", "", false).ok());
}

TEST(GoOffsetTable, EveryRowIsAMatrixCell) {
  std::map<std::pair<int, int>, int> cells;  // (stack, minor) -> rows
  for (const auto& e : ProvenGoHttp2Table()) {
    // The one row proven by measurement on a release binary instead (DESIGN.md).
    if (e.stack == Http2StackKind::kXNet && e.go_minor == 21 && e.xnet == std::string("v0.19.0")) continue;
    ++cells[{static_cast<int>(e.stack), e.go_minor}];
    EXPECT_EQ(e.xnet, e.stack == Http2StackKind::kStd ? "" : "v0.7.0");
  }
  EXPECT_EQ(cells.size(), 8u);
  for (int minor : {19, 21, 22, 23}) {
    EXPECT_EQ((cells[{static_cast<int>(Http2StackKind::kXNet), minor}]), 1) << minor;
    EXPECT_EQ((cells[{static_cast<int>(Http2StackKind::kStd), minor}]), 1) << minor;
  }
}

TEST(AttachFailureNames, AreTheMetricReasons) {
  EXPECT_STREQ(AttachFailureName(AttachFailure::kUnprovenVersion), "unproven_version");
  EXPECT_STREQ(AttachFailureName(AttachFailure::kUnreadableBinary), "unreadable_binary");
  EXPECT_STREQ(AttachFailureName(AttachFailure::kNoHttp2Server), "no_http2_server");
  EXPECT_STREQ(AttachFailureName(AttachFailure::kAttachFailed), "attach_failed");
}

TEST(GoHttp2ProbePlan, UnreadableBinaryIsRefused) {
  auto plan = PlanGoHttp2Probes(std::string("/nonexistent/kube-apiserver"));
  EXPECT_EQ(plan.failure, AttachFailure::kUnreadableBinary);
  EXPECT_FALSE(plan.problem.empty());
}

// ---- the matrix builds ----

class MatrixBuild : public ::testing::TestWithParam<const char*> {
 protected:
  std::string go() const { return std::string("/usr/lib/go-") + GetParam() + "/bin/go"; }
  std::string stripped() const { return kGoOut + "/test-apiserver-go" + GetParam(); }
  std::string unstripped() const { return stripped() + ".unstripped"; }
};

TEST_P(MatrixBuild, BothStacksFoundAndProven) {
  ASSERT_TRUE(Exists(stripped())) << stripped() << " missing: Go " << GetParam()
                                  << " toolchain not installed (scripts/setup.sh)?";
  auto binary = GoBinary::Open(stripped());
  ASSERT_TRUE(binary.ok()) << binary.error();
  EXPECT_TRUE(binary->go_version().starts_with(std::string("go") + GetParam() + ".") ||
              binary->go_version() == std::string("go") + GetParam())
      << binary->go_version();
  GoHttp2ProbePlan plan = PlanGoHttp2Probes(*binary);
  ASSERT_EQ(plan.failure, AttachFailure::kNone) << plan.problem;
  EXPECT_EQ(plan.stack_names(), "x/net,std");
  EXPECT_FALSE(plan.module_info) << "GOPATH build";
  EXPECT_EQ(plan.xnet_version, "");
  EXPECT_EQ(plan.grpc_version, "");
  EXPECT_NE(plan.problem.find("GOPATH"), std::string::npos) << plan.problem;
  ASSERT_EQ(plan.sites.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    auto layout = LookupGoHttp2Layout(*plan.stacks[i], plan.go_version, "", false);
    ASSERT_TRUE(layout.ok());
    EXPECT_EQ(std::memcmp(&plan.sites[i].offsets, &layout->offsets, sizeof(sw_go_offsets)), 0);
    EXPECT_NE(plan.sites[i].process_headers.offset, plan.sites[i].handler_done.offset);
  }
}

// The toolchain's own objdump: the address of the first JBE of `symbol` (the stack check's).
uint64_t GoObjdumpJbe(const std::string& go, const std::string& binary,
                      const std::string& symbol_regex) {
  std::string out =
      Run(go + " tool objdump -s '" + symbol_regex + "' " + binary + " 2>/dev/null | head -8");
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    size_t hex = line.find("0x");
    if (hex == std::string::npos || line.starts_with("TEXT")) continue;
    if (line.find("JBE") != std::string::npos) return std::stoull(line.substr(hex), nullptr, 16);
  }
  return 0;
}

TEST_P(MatrixBuild, ProbeSitesOnTheStackCheckBranchMatchTheToolchainsObjdump) {
  ASSERT_TRUE(Exists(unstripped())) << unstripped();
  auto binary = GoBinary::Open(stripped());
  ASSERT_TRUE(binary.ok()) << binary.error();
  for (const Http2Stack& stack : Http2Stacks()) {
    for (const std::string& name : {stack.process_headers, stack.handler_done}) {
      auto fn = binary->FindFunction(name);
      ASSERT_TRUE(fn) << name;
      auto site = binary->EntryProbeSiteOf(*fn);
      ASSERT_TRUE(site.ok()) << site.error();
      EXPECT_EQ(site->morestack_if_flags, 0x41u) << "JBE: taken on CF or ZF";
      // "net/http.(*http2serverConn).processHeaders" -> regex "^net/http\.\(\*http2serverConn\)\.processHeaders$"
      std::string regex = "^";
      for (char c : name) {
        if (c == '.' || c == '(' || c == ')' || c == '*') regex += '\\';
        regex += c;
      }
      regex += "$";
      uint64_t expected = GoObjdumpJbe(go(), unstripped(), regex);
      ASSERT_NE(expected, 0u) << "objdump found no JBE in " << name;
      EXPECT_EQ(site->offset - fn->file_offset, expected - fn->entry) << name << " (Go " << GetParam() << ")";
    }
  }
}

// Prints "struct<TAB>field<TAB>offset" (field "" = the struct's size) for the structs the
// BPF programs read, from the DWARF of an unstripped binary.
constexpr const char* kDwarfDumper = R"GO(package main

import (
	"debug/dwarf"
	"debug/elf"
	"fmt"
	"os"
)

func main() {
	f, err := elf.Open(os.Args[1])
	if err != nil {
		panic(err)
	}
	d, err := f.DWARF()
	if err != nil {
		panic(err)
	}
	r := d.Reader()
	for {
		e, err := r.Next()
		if err != nil {
			panic(err)
		}
		if e == nil {
			break
		}
		if e.Tag != dwarf.TagStructType {
			continue
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		t, err := d.Type(e.Offset)
		if err != nil {
			r.SkipChildren()
			continue
		}
		if st, ok := t.(*dwarf.StructType); ok {
			fmt.Printf("%s\t\t%d\n", name, st.ByteSize)
			for _, fld := range st.Field {
				fmt.Printf("%s\t%s\t%d\n", name, fld.Name, fld.ByteOffset)
			}
		}
		r.SkipChildren()
	}
}
)GO";

class DwarfLayouts {
 public:
  // Builds the dumper once per test run, in a temporary directory removed at exit.
  static const std::string& Dumper() {
    struct TempDir {
      std::string path;
      ~TempDir() {
        if (!path.empty()) Run("rm -rf '" + path + "'");
      }
    };
    static TempDir dir;
    static std::string binary = [] {
      char dir_template[] = "/tmp/stormwatch-dwarf-XXXXXX";
      if (!mkdtemp(dir_template)) return std::string();
      dir.path = dir_template;
      std::ofstream(dir.path + "/main.go") << kDwarfDumper;
      std::string cache = kGoOut + "/../gocache";
      int status = 0;
      Run("cd " + dir.path + " && GO111MODULE=off GOFLAGS=-buildvcs=false GOCACHE=" + cache +
              " /usr/lib/go-1.19/bin/go build -o dwarf-layout . 2>&1",
          &status);
      return status == 0 ? dir.path + "/dwarf-layout" : std::string();
    }();
    return binary;
  }

  explicit DwarfLayouts(const std::string& binary) {
    std::istringstream lines(Run(Dumper() + " " + binary));
    std::string line;
    while (std::getline(lines, line)) {
      size_t a = line.find('\t'), b = line.find('\t', a + 1);
      if (a == std::string::npos || b == std::string::npos) continue;
      std::string key = line.substr(0, a) + "." + line.substr(a + 1, b - a - 1);
      offsets_.emplace(key, std::stoll(line.substr(b + 1)));  // first definition wins
    }
  }
  bool empty() const { return offsets_.empty(); }
  // Offset of `field` in struct `type`; "" = sizeof(type). -1 if not found.
  long long Get(const std::string& type, const std::string& field) const {
    auto it = offsets_.find(type + "." + field);
    return it == offsets_.end() ? -1 : it->second;
  }

 private:
  std::map<std::string, long long> offsets_;
};

TEST_P(MatrixBuild, TableOffsetsEqualTheCompilersDwarf) {
  ASSERT_TRUE(Exists(unstripped())) << unstripped();
  ASSERT_FALSE(DwarfLayouts::Dumper().empty()) << "could not build the DWARF dumper";
  DwarfLayouts dw(unstripped());
  ASSERT_FALSE(dw.empty());
  auto binary = GoBinary::Open(stripped());
  ASSERT_TRUE(binary.ok());
  struct Names {
    const Http2Stack* stack;
    std::string p;        // type name prefix
    std::string embed;    // embedded field names: HeadersFrame in MetaHeadersFrame, FrameHeader
    std::string hpack;    // hpack.HeaderField's package
  };
  const Names names[] = {
      {&XNetHttp2Stack(), "golang.org/x/net/http2.", "", "golang.org/x/net/http2/hpack.HeaderField"},
      {&StdHttp2Stack(), "net/http.http2", "http2", "vendor/golang.org/x/net/http2/hpack.HeaderField"},
  };
  for (const Names& n : names) {
    SCOPED_TRACE(n.stack->name + " stack, Go " + GetParam());
    auto l = LookupGoHttp2Layout(*n.stack, binary->go_version(), "", false);
    ASSERT_TRUE(l.ok()) << l.error();
    const sw_go_offsets& o = l->offsets;
    EXPECT_EQ(dw.Get(n.p + "MetaHeadersFrame", n.embed + "HeadersFrame"), 0);  // *HeadersFrame at +0
    EXPECT_EQ(dw.Get(n.p + "MetaHeadersFrame", "Fields"), o.mhf_fields);
    EXPECT_EQ(dw.Get(n.p + "HeadersFrame", n.embed + "FrameHeader") +
                  dw.Get(n.p + "FrameHeader", "StreamID"),
              o.frame_stream_id);
    EXPECT_EQ(dw.Get(n.hpack, ""), o.field_size);
    EXPECT_EQ(dw.Get(n.hpack, "Name"), o.field_name);
    EXPECT_EQ(dw.Get(n.hpack, "Value"), o.field_value);
    EXPECT_EQ(dw.Get(n.p + "responseWriter", "rws"), o.rw_rws);
    EXPECT_EQ(dw.Get(n.p + "responseWriterState", "stream"), o.rws_stream);
    EXPECT_EQ(dw.Get(n.p + "responseWriterState", "status"), o.rws_status);
    EXPECT_EQ(dw.Get(n.p + "responseWriterState", "wroteBytes"), o.rws_wrote_bytes);
    EXPECT_EQ(dw.Get(n.p + "responseWriterState", "req"), o.rws_req);
    EXPECT_EQ(dw.Get(n.p + "responseWriterState", "bw"), o.rws_bw);
    EXPECT_EQ(dw.Get(n.p + "responseWriterState", "handlerHeader"), o.rws_handler_header);
    // Read by the BPF program at fixed offsets in every Go release of the table.
    EXPECT_EQ(dw.Get("net/http.Request", "Method"), 0);
    EXPECT_EQ(dw.Get("bufio.Writer", "buf"), 16);
    EXPECT_EQ(dw.Get("bufio.Writer", "n"), 40);
    EXPECT_EQ(dw.Get("runtime.hmap", "B"), 9);
    EXPECT_EQ(dw.Get("runtime.hmap", "buckets"), 16);
    EXPECT_EQ(dw.Get("runtime.hmap", "oldbuckets"), 24);
    EXPECT_EQ(dw.Get("noalg.map.bucket[string][]string", ""), 336);  // http.Header's buckets
    EXPECT_EQ(dw.Get("noalg.map.bucket[string][]string", "keys"), 8);
    EXPECT_EQ(dw.Get("noalg.map.bucket[string][]string", "elems"), 136);
    EXPECT_EQ(dw.Get("noalg.map.bucket[string][]string", "overflow"), 328);
    EXPECT_EQ(dw.Get(n.p + "stream", "sc"), o.stream_sc);
    EXPECT_EQ(dw.Get(n.p + "stream", "id"), o.stream_id);
    EXPECT_EQ(dw.Get(n.p + "serverConn", "conn"), o.sc_conn);
  }
  // The connection's ends (bpf/events.h SW_*; agent/capture/connection_ends.cc): the same in
  // every Go release of the table.
  EXPECT_EQ(dw.Get("crypto/tls.Conn", "conn"), SW_TLS_CONN_CONN);
  EXPECT_EQ(dw.Get("net.TCPConn", "conn"), 0);
  EXPECT_EQ(dw.Get("net.conn", "fd"), SW_TCPCONN_FD);
  EXPECT_EQ(dw.Get("net.netFD", "family"), SW_NETFD_FAMILY);
  EXPECT_EQ(dw.Get("net.netFD", "sotype"), SW_NETFD_FAMILY + 8);
  EXPECT_EQ(dw.Get("net.netFD", "laddr"), SW_NETFD_LADDR);
  EXPECT_EQ(dw.Get("net.netFD", "raddr"), SW_NETFD_LADDR + 16);
  EXPECT_EQ(dw.Get("net.TCPAddr", "IP"), 0);
  EXPECT_EQ(dw.Get("net.TCPAddr", "Port"), SW_TCPADDR_PORT);
  EXPECT_EQ(dw.Get("net/http.conn", "rwc"), SW_HTTP_CONN_RWC);
}

INSTANTIATE_TEST_SUITE_P(GoToolchains, MatrixBuild, ::testing::ValuesIn(kMatrix),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string s = std::string("go") + info.param;
                           for (char& c : s) {
                             if (c == '.') c = '_';
                           }
                           return s;
                         });

}  // namespace
}  // namespace stormwatch
