// Layouts from the binary itself (agent/capture/go_types.cc, go_layout.cc) and the probe plan
// per binary (agent/capture/target_manager.cc), without privileges:
//  - Go version parsing;
//  - for the test API server built by every toolchain of the matrix (CMake:
//    test-apiserver-go1.NN, Go 1.19-1.27 with x/net 0.7.0/0.27/0.61/0.62), every HTTP/2 stack
//    in the stripped binary is found and planned, the probe sites sit after the stack-growth
//    check exactly where the toolchain's own objdump says, every offset derived from the type
//    data equals the compiler's DWARF of the unstripped build (read by a small Go program,
//    debug/dwarf), and so does every field of every named struct both know;
//  - Debian's stripped etcd servers (bookworm 3.4, trixie and forky 3.5): type data read,
//    layout derived, recognised as etcd by their code.
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
#include "agent/capture/go_layout.h"
#include "agent/capture/go_types.h"
#include "agent/capture/target_manager.h"

namespace stormwatch {
namespace {

const std::string kGoOut = STORMWATCH_GO_OUT;
const std::string kDebianDir = STORMWATCH_DEBIAN_DIR;

// CMake's STORMWATCH_GO_MATRIX: "version|toolchain|gopath,..."
struct Toolchain {
  std::string version, go;
};
std::vector<Toolchain> Matrix() {
  std::vector<Toolchain> out;
  std::istringstream cells(STORMWATCH_GO_MATRIX);
  std::string cell;
  while (std::getline(cells, cell, ',')) {
    size_t a = cell.find('|'), b = cell.find('|', a + 1);
    out.push_back({cell.substr(0, a), cell.substr(a + 1, b - a - 1)});
  }
  return out;
}
const std::vector<Toolchain>& MatrixCells() {
  static const std::vector<Toolchain> cells = Matrix();
  return cells;
}

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
  ASSERT_TRUE(v.ok()) << v.error().message;
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
  ASSERT_TRUE(v.ok()) << v.error().message;
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

TEST(AttachFailureNames, AreTheMetricReasons) {
  EXPECT_STREQ(AttachFailureName(AttachFailure::kNoTypeData), "no_type_data");
  EXPECT_STREQ(AttachFailureName(AttachFailure::kMissingField), "missing_field");
  EXPECT_STREQ(AttachFailureName(AttachFailure::kFunctionShape), "function_shape");
  EXPECT_STREQ(AttachFailureName(AttachFailure::kUnreadableBinary), "unreadable_binary");
  EXPECT_STREQ(AttachFailureName(AttachFailure::kNoHttp2Server), "no_http2_server");
  EXPECT_STREQ(AttachFailureName(AttachFailure::kAttachFailed), "attach_failed");
  EXPECT_STREQ(AttachFailureName(AttachFailure::kProcUnreadable), "proc_unreadable");
}

TEST(GoHttp2ProbePlan, UnreadableBinaryIsRefused) {
  auto plan = PlanGoHttp2Probes(std::string("/nonexistent/kube-apiserver"));
  EXPECT_EQ(plan.failure, AttachFailure::kUnreadableBinary);
  EXPECT_FALSE(plan.problem.empty());
}

// ---- the matrix builds ----

void PrintTo(const Toolchain& t, std::ostream* os) { *os << "Go " << t.version << " (" << t.go << ")"; }

class MatrixBuild : public ::testing::TestWithParam<Toolchain> {
 protected:
  const std::string& go() const { return GetParam().go; }
  std::string stripped() const { return kGoOut + "/test-apiserver-go" + GetParam().version; }
  std::string unstripped() const { return stripped() + ".unstripped"; }
  int minor() const { return std::stoi(GetParam().version.substr(2)); }
  // The stacks the test API server's binary holds: x/net's and net/http's bundled copy; from
  // Go 1.27 on, x/net >= 0.62 hands its server to net/http/internal/http2, and the bundle is gone.
  std::string expected_stacks() const { return minor() >= 27 ? "std-internal" : "x/net,std"; }
};

TEST_P(MatrixBuild, EveryStackFoundAndPlannedFromTypeData) {
  ASSERT_TRUE(Exists(stripped())) << stripped() << " missing: Go " << GetParam().version
                                  << " toolchain not installed (scripts/setup.sh)?";
  auto binary = GoBinary::Open(stripped());
  ASSERT_TRUE(binary.ok()) << binary.error().message;
  EXPECT_TRUE(binary->go_version().starts_with("go" + GetParam().version + ".") ||
              binary->go_version() == "go" + GetParam().version)
      << binary->go_version();
  ASSERT_TRUE(binary->module_data().ok()) << binary->module_data().error().message;
  GoHttp2ProbePlan plan = PlanGoHttp2Probes(*binary);
  ASSERT_EQ(plan.failure, AttachFailure::kNone) << plan.problem;
  EXPECT_EQ(plan.stack_names(), expected_stacks());
  EXPECT_EQ(plan.problem, "") << "every part of the layout found";
  EXPECT_FALSE(plan.module_info) << "GOPATH build";
  EXPECT_FALSE(plan.etcd) << "an etcd client is not an etcd server";
  EXPECT_GT(plan.type_count, 3000u);
  ASSERT_TRUE(plan.http1.has_value());
  ASSERT_EQ(plan.sites.size(), plan.stacks.size());
  for (const GoHttp2ProbeSites& site : plan.sites) {
    EXPECT_NE(site.process_headers.offset, site.handler_done.offset);
    EXPECT_EQ(site.offsets.capture_write_bodies, 1u);
    EXPECT_EQ(site.offsets.read_addrs, 1u);
    EXPECT_NE(site.offsets.tls_peer_certificates, 0u);
    EXPECT_NE(site.offsets.group_size, 0u);
    EXPECT_EQ(site.offsets.map_swiss, minor() >= 24 ? 1u : 0u);
  }
}

TEST_P(MatrixBuild, FunctionAddressesEqualTheSymbolTable) {
  // Go 1.26 dropped the pclntab's text start: entries are relative to moduledata.text.
  ASSERT_TRUE(Exists(unstripped())) << unstripped();
  auto binary = GoBinary::Open(stripped());
  ASSERT_TRUE(binary.ok()) << binary.error().message;
  std::string nm = stormwatch::Run("nm " + unstripped() + " | grep -E ' T (net/http\\.\\(\\*connReader\\)\\.Read|runtime\\.main)$'");
  std::istringstream lines(nm);
  std::string addr, kind, name;
  int checked = 0;
  while (lines >> addr >> kind >> name) {
    auto fn = binary->FindFunction(name);
    ASSERT_TRUE(fn) << name;
    EXPECT_EQ(fn->entry, std::stoull(addr, nullptr, 16)) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 2) << nm;
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
  ASSERT_TRUE(binary.ok()) << binary.error().message;
  int stacks = 0;
  for (const Http2Stack& stack : Http2Stacks()) {
    if (!binary->FindFunction(stack.process_headers)) continue;
    ++stacks;
    for (const std::string& name : {stack.process_headers, stack.handler_done}) {
      auto fn = binary->FindFunction(name);
      ASSERT_TRUE(fn) << name;
      auto site = binary->EntryProbeSiteOf(*fn);
      ASSERT_TRUE(site.ok()) << site.error().message;
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
      EXPECT_EQ(site->offset - fn->file_offset, expected - fn->entry) << name << " (Go " << GetParam().version << ")";
    }
  }
  EXPECT_EQ(stacks, minor() >= 27 ? 1 : 2);
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
      if (b == a + 1) ++structs_[line.substr(0, a)];
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
  std::map<std::string, int> structs_;  // name -> definitions (generic shapes repeat names)

 public:
  // A struct defined once under this name (so its fields are unambiguous).
  bool HasUniqueStruct(const std::string& type) const {
    auto it = structs_.find(type);
    return it != structs_.end() && it->second == 1;
  }
};

// Every offset the probes read, derived from the stripped binary's type data, against DWARF.
void ExpectDerivedOffsetsEqualDwarf(const std::string& stripped, const std::string& unstripped, int minor) {
  ASSERT_TRUE(Exists(unstripped)) << unstripped;
  ASSERT_FALSE(DwarfLayouts::Dumper().empty()) << "could not build the DWARF dumper";
  DwarfLayouts dw(unstripped);
  ASSERT_FALSE(dw.empty());
  auto binary = GoBinary::Open(stripped);
  ASSERT_TRUE(binary.ok());
  GoHttp2ProbePlan plan = PlanGoHttp2Probes(*binary);
  ASSERT_EQ(plan.failure, AttachFailure::kNone) << plan.problem;
  for (size_t i = 0; i < plan.stacks.size(); ++i) {
    const Http2Stack& st = *plan.stacks[i];
    SCOPED_TRACE(st.name + " stack, Go 1." + std::to_string(minor));
    const sw_go_offsets& o = plan.sites[i].offsets;
    const std::string p = st.type_prefix, e = st.embed_prefix;
    // Both of net/http's stacks use the standard library's vendored hpack.
    const std::string hpack = st.kind == Http2StackKind::kXNet ? "golang.org/x/net/http2/hpack.HeaderField"
                                                               : "vendor/golang.org/x/net/http2/hpack.HeaderField";
    EXPECT_EQ(dw.Get(p + "MetaHeadersFrame", e + "HeadersFrame"), o.mhf_headers_frame);
    EXPECT_EQ(dw.Get(p + "MetaHeadersFrame", "Fields"), o.mhf_fields);
    EXPECT_EQ(dw.Get(p + "HeadersFrame", e + "FrameHeader") + dw.Get(p + "FrameHeader", "StreamID"),
              o.frame_stream_id);
    EXPECT_EQ(dw.Get(hpack, ""), o.field_size);
    EXPECT_EQ(dw.Get(hpack, "Name"), o.field_name);
    EXPECT_EQ(dw.Get(hpack, "Value"), o.field_value);
    EXPECT_EQ(dw.Get(p + "serverConn", "conn"), o.sc_conn);
    EXPECT_EQ(dw.Get(p + "responseWriter", "rws"), o.rw_rws);
    EXPECT_EQ(dw.Get(p + "responseWriterState", "stream"), o.rws_stream);
    EXPECT_EQ(dw.Get(p + "responseWriterState", "status"), o.rws_status);
    EXPECT_EQ(dw.Get(p + "responseWriterState", "wroteBytes"), o.rws_wrote_bytes);
    EXPECT_EQ(dw.Get(p + "responseWriterState", "req"), o.rws_req);
    EXPECT_EQ(dw.Get(p + "responseWriterState", "bw"), o.rws_bw);
    EXPECT_EQ(dw.Get(p + "responseWriterState", "handlerHeader"), o.rws_handler_header);
    EXPECT_EQ(dw.Get(p + "stream", "sc"), o.stream_sc);
    EXPECT_EQ(dw.Get(p + "stream", "id"), o.stream_id);
    EXPECT_EQ(dw.Get(o.rws_req_inline ? p + "ServerRequest" : "net/http.Request", "Method"), o.req_method);
    EXPECT_EQ(o.rws_req_inline, minor >= 27 ? 1u : 0u);
    EXPECT_EQ(dw.Get("bufio.Writer", "buf"), o.bufio_buf);
    EXPECT_EQ(dw.Get("bufio.Writer", "n"), o.bufio_n);
    EXPECT_EQ(dw.Get("crypto/tls.Conn", "peerCertificates"), o.tls_peer_certificates);
    EXPECT_EQ(dw.Get("crypto/x509.Certificate", "Raw"), o.x509_raw);
    EXPECT_EQ(dw.Get("crypto/tls.Conn", "conn"), o.tls_conn_conn);
    EXPECT_EQ(dw.Get("net.TCPConn", "conn") + dw.Get("net.conn", "fd"), o.tcpconn_fd);
    EXPECT_EQ(dw.Get("net.netFD", "family"), o.netfd_family);
    EXPECT_EQ(dw.Get("net.netFD", "sotype"), o.netfd_sotype);
    EXPECT_EQ(dw.Get("net.netFD", "laddr"), o.netfd_laddr);
    EXPECT_EQ(dw.Get("net.netFD", "raddr"), o.netfd_raddr);
    EXPECT_EQ(dw.Get("net.TCPAddr", "IP"), o.tcpaddr_ip);
    EXPECT_EQ(dw.Get("net.TCPAddr", "Port"), o.tcpaddr_port);
    EXPECT_EQ(dw.Get("net/http.connReader", "conn"), o.conn_reader_conn);
    EXPECT_EQ(o.conn_reader_conn, minor >= 26 ? 24u : 0u) << "Go 1.26 put rwc first";
    EXPECT_EQ(dw.Get("net/http.conn", "rwc"), o.http_conn_rwc);
    if (o.map_swiss) {
      EXPECT_EQ(dw.Get("internal/runtime/maps.Map", "dirPtr"), o.map_dir_ptr);
      EXPECT_EQ(dw.Get("internal/runtime/maps.Map", "dirLen"), o.map_dir_len);
      EXPECT_EQ(dw.Get("internal/runtime/maps.table", "groups") +
                    dw.Get("internal/runtime/maps.groupsReference", "data"), o.table_groups);
      EXPECT_EQ(dw.Get("internal/runtime/maps.table", "groups") +
                    dw.Get("internal/runtime/maps.groupsReference", "lengthMask"), o.table_mask);
      // http.Header's group: {ctrl uint64; slots [8]{key string; elem []string}}
      EXPECT_EQ(o.group_size, 8u + 8u * 40u);
      EXPECT_EQ(o.keys_offset, 8u);
      EXPECT_EQ(o.key_stride, 40u);
      EXPECT_EQ(o.elems_offset, 24u);
      EXPECT_EQ(o.elem_stride, 40u);
    } else {
      EXPECT_EQ(dw.Get("noalg.map.bucket[string][]string", ""), o.group_size);
      EXPECT_EQ(dw.Get("noalg.map.bucket[string][]string", "keys"), o.keys_offset);
      EXPECT_EQ(dw.Get("noalg.map.bucket[string][]string", "elems"), o.elems_offset);
      EXPECT_EQ(o.key_stride, 16u);
      EXPECT_EQ(o.elem_stride, 24u);
      EXPECT_EQ(dw.Get("runtime.hmap", "B"), SW_HMAP_B);
      EXPECT_EQ(dw.Get("runtime.hmap", "buckets"), SW_HMAP_BUCKETS);
      EXPECT_EQ(dw.Get("runtime.hmap", "oldbuckets"), SW_HMAP_OLDBUCKETS);
    }
  }
}

TEST_P(MatrixBuild, DerivedOffsetsEqualTheCompilersDwarf) {
  ExpectDerivedOffsetsEqualDwarf(stripped(), unstripped(), minor());
}

// Not only the fields the probes read: every field of every named struct that both the type
// data and DWARF describe (thousands per binary) has the same offset.
void ExpectEveryNamedStructEqualsDwarf(const std::string& stripped, const std::string& unstripped,
                                       const std::string& what, size_t min_structs) {
  ASSERT_TRUE(Exists(unstripped)) << unstripped;
  ASSERT_FALSE(DwarfLayouts::Dumper().empty());
  DwarfLayouts dw(unstripped);
  auto binary = GoBinary::Open(stripped);
  ASSERT_TRUE(binary.ok());
  auto types = binary->types();
  ASSERT_TRUE(types.ok()) << types.error().message;
  size_t structs = 0, fields = 0, mismatches = 0;
  for (const std::string& name : (*types)->NamedTypes()) {
    if (!dw.HasUniqueStruct(name)) continue;
    auto type = (*types)->FindNamed(name);
    ASSERT_TRUE(type);
    if (type->kind != GoKind::kStruct) continue;
    auto fs = (*types)->StructFields(*type);
    ASSERT_TRUE(fs.ok()) << fs.error().message;
    ++structs;
    EXPECT_EQ(dw.Get(name, ""), static_cast<long long>(type->size)) << name;
    for (const GoStructField& f : *fs) {
      if (f.name == "_") continue;  // padding: a struct may have several, DWARF keys by name
      ++fields;
      long long want = dw.Get(name, f.name);
      if (want != static_cast<long long>(f.offset)) {
        ++mismatches;
        ADD_FAILURE() << name << "." << f.name << ": type data " << f.offset << ", DWARF " << want;
      }
    }
  }
  std::printf("%s: %zu structs, %zu fields compared with DWARF, %zu mismatches\n", what.c_str(),
              structs, fields, mismatches);
  EXPECT_GT(structs, min_structs);
  EXPECT_EQ(mismatches, 0u);
}

TEST_P(MatrixBuild, EveryNamedStructEqualsTheCompilersDwarf) {
  ExpectEveryNamedStructEqualsDwarf(stripped(), unstripped(), "Go " + GetParam().version, 1000);
}

// The real upstream API server: k8s.io/apiextensions-apiserver 0.36 (Kubernetes 1.36's
// k8s.io/apiserver) built from Debian sid's sources with Go 1.26 (CMake: apiextensions-apiserver).
TEST(RealApiServer, LayoutDerivedAndEqualToDwarf) {
  const std::string stripped = kGoOut + "/apiextensions-apiserver";
  ASSERT_TRUE(Exists(stripped)) << stripped << " missing (scripts/build_apiextensions_apiserver.sh)";
  GoHttp2ProbePlan plan = PlanGoHttp2Probes(stripped);
  ASSERT_EQ(plan.failure, AttachFailure::kNone) << plan.problem;
  EXPECT_EQ(plan.stack_names(), "x/net,std");
  EXPECT_TRUE(plan.go_version.starts_with("go1.26.")) << plan.go_version;
  EXPECT_FALSE(plan.etcd) << "it links etcd's client, not its server";
  EXPECT_EQ(plan.problem, "");
  EXPECT_TRUE(plan.http1.has_value());
  EXPECT_GT(plan.type_count, 30000u);
  ExpectDerivedOffsetsEqualDwarf(stripped, stripped + ".unstripped", 26);
  ExpectEveryNamedStructEqualsDwarf(stripped, stripped + ".unstripped", "apiextensions-apiserver", 5000);
}

INSTANTIATE_TEST_SUITE_P(GoToolchains, MatrixBuild, ::testing::ValuesIn(MatrixCells()),
                         [](const ::testing::TestParamInfo<Toolchain>& info) {
                           std::string s = "go" + info.param.version;
                           for (char& c : s) {
                             if (c == '.') c = '_';
                           }
                           return s;
                         });

// ---- Debian's stripped etcd servers ----

struct EtcdBuild {
  const char* name;
  std::string path;
  const char* go_prefix;
  uint32_t grpc_peer_auth_info;  // peer.Peer.AuthInfo
  uint32_t status_direct;        // 1: status.Error points at the status proto itself
};

class DebianEtcd : public ::testing::TestWithParam<EtcdBuild> {};

TEST_P(DebianEtcd, TypeDataReadLayoutDerivedRoleFromItsCode) {
  const EtcdBuild& e = GetParam();
  ASSERT_TRUE(Exists(e.path)) << e.path << " missing (scripts/setup.sh)";
  auto binary = GoBinary::Open(e.path);
  ASSERT_TRUE(binary.ok()) << binary.error().message;
  EXPECT_TRUE(binary->go_version().starts_with(e.go_prefix)) << binary->go_version();
  GoHttp2ProbePlan plan = PlanGoHttp2Probes(*binary);
  ASSERT_EQ(plan.failure, AttachFailure::kNone) << plan.problem;
  EXPECT_TRUE(plan.etcd);
  // Attached at go-grpc-prometheus's interceptors, not at its HTTP/2 server.
  EXPECT_EQ(plan.stack_names(), "grpc");
  EXPECT_TRUE(plan.sites.empty());
  ASSERT_TRUE(plan.grpc.has_value());
  EXPECT_EQ(plan.problem, "") << "every optional part found";
  EXPECT_FALSE(plan.grpc->sites.unary_returns.empty());
  EXPECT_FALSE(plan.grpc->sites.stream_returns.empty());
  // Messages on open streams: one function each, of the shape the programs read.
  EXPECT_EQ(plan.grpc->sites.watch_creates.size(), 1u);
  EXPECT_EQ(plan.grpc->sites.watch_cancels.size(), 1u);
  EXPECT_EQ(plan.grpc->sites.lease_renews.size(), 1u);
  EXPECT_FALSE(plan.grpc->sites.watch_stream_returns.empty());
  // The offsets the BPF program reads, as the type data of these builds has them (the dump of
  // their descriptors; etcd's release binaries carry no DWARF to compare with).
  const sw_grpc_offsets& o = plan.grpc->sites.offsets;
  EXPECT_EQ(o.unary_info_method, 16u);
  EXPECT_EQ(o.stream_info_method, 0u);
  EXPECT_EQ(o.value_ctx_key, 16u);
  EXPECT_EQ(o.value_ctx_val, 32u);
  EXPECT_NE(o.value_ctx_type, 0u);
  EXPECT_NE(o.peer_key_type, 0u);
  EXPECT_EQ(o.peer_addr, 0u);
  EXPECT_EQ(o.peer_auth_info, e.grpc_peer_auth_info);  // grpc >= 1.57 added Peer.LocalAddr
  EXPECT_EQ(o.tls_info_peer_certificates, 48u);
  EXPECT_EQ(o.status_direct, e.status_direct);         // grpc 1.26: Error{e *spb.Status}
  EXPECT_NE(o.status_error_type, 0u);
  EXPECT_EQ(o.range_resp_kvs, 8u);
  EXPECT_EQ(o.kv_key, 0u);
  EXPECT_EQ(o.kv_value, 48u);
  EXPECT_EQ(o.txn_compare, 0u);
  EXPECT_EQ(o.compare_key, 8u);
  EXPECT_EQ(o.txn_success, 24u);
  const EtcdMessageFields& f = plan.grpc->layout.fields;
  EXPECT_EQ(f.range_limit, 48);
  EXPECT_EQ(f.range_revision, 56);
  EXPECT_EQ(f.range_serializable, 72);
  EXPECT_EQ(f.range_count_only, 74);
  EXPECT_EQ(f.range_resp_more, 32);
  EXPECT_EQ(f.range_resp_count, 40);
  EXPECT_EQ(f.txn_resp_succeeded, 8);
  EXPECT_EQ(plan.grpc->layout.messages.size(), 9u);
  // The facts lie within the bytes copied of each struct (3.5's gogo structs end in XXX_
  // fields past them).
  for (int at : {f.range_limit, f.range_revision, f.range_serializable, f.range_keys_only,
                 f.range_count_only, f.compact_revision, f.lease_grant_ttl}) {
    EXPECT_GE(at, 0);
    EXPECT_LE(at + 8, SW_GRPC_MSG_MAX);
  }
  for (int at : {f.range_resp_kvs, f.range_resp_more, f.range_resp_count, f.txn_resp_succeeded}) {
    EXPECT_GE(at, 0);
    EXPECT_LE(at + 8, SW_GRPC_RESP_MAX);
  }
  // The same binary under another name is still etcd: the role is not the file name.
  std::string copy = "/tmp/stormwatch-etcd-renamed-" + std::to_string(getpid());
  ASSERT_EQ(std::system(("cp " + e.path + " " + copy).c_str()), 0);
  GoHttp2ProbePlan renamed = PlanGoHttp2Probes(copy);
  std::remove(copy.c_str());
  EXPECT_TRUE(renamed.etcd);
}

INSTANTIATE_TEST_SUITE_P(
    Debian, DebianEtcd,
    ::testing::Values(EtcdBuild{"bookworm_3_4", "/usr/bin/etcd", "go1.19", 16, 1},
                      EtcdBuild{"trixie_3_5_16", kDebianDir + "/trixie/root/usr/bin/etcd", "go1.24", 32, 0},
                      EtcdBuild{"forky_3_5_30", kDebianDir + "/forky/root/usr/bin/etcd", "go1.26", 32, 0}),
    [](const ::testing::TestParamInfo<EtcdBuild>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace stormwatch

namespace stormwatch {
namespace {

// Bytes of a target's file are untrusted: corrupt type data gives errors (or a layout that
// fails its checks), never a crash, a read outside the file or an unbounded walk.
TEST(GoTypeData, CorruptDescriptorsAreErrorsNotCrashes) {
  const std::string src = kGoOut + "/test-apiserver-go1.23";
  ASSERT_TRUE(Exists(src)) << src;
  auto clean = GoBinary::Open(src);
  ASSERT_TRUE(clean.ok());
  ASSERT_TRUE(clean->module_data().ok());
  const GoModuleData md = *clean->module_data();
  const ElfSection* rodata = clean->elf().FindSection(".rodata");
  ASSERT_NE(rodata, nullptr);
  ASSERT_GE(md.types, rodata->addr);
  std::ifstream in(src, std::ios::binary);
  std::string original((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const uint64_t types_off = rodata->offset + (md.types - rodata->addr);
  const uint64_t types_len = md.etypes - md.types;
  const std::string path = "/tmp/stormwatch-corrupt-types-" + std::to_string(getpid());
  uint64_t seed = 42;
  auto next = [&] { return seed = seed * 6364136223846793005ULL + 1442695040888963407ULL; };
  int opened = 0, refused = 0;
  for (int round = 0; round < 40; ++round) {
    std::string bytes = original;
    for (int i = 0; i < 2000; ++i) bytes[types_off + next() % types_len] = static_cast<char>(next() >> 56);
    std::ofstream(path, std::ios::binary) << bytes;
    auto binary = GoBinary::Open(path);
    if (!binary.ok()) continue;
    ++opened;
    GoHttp2ProbePlan plan = PlanGoHttp2Probes(*binary);  // must return, whatever it says
    refused += plan.failure != AttachFailure::kNone;
    if (plan.failure == AttachFailure::kMissingField) {
      EXPECT_FALSE(plan.gap.type.empty()) << plan.problem;
    }
  }
  std::remove(path.c_str());
  EXPECT_EQ(opened, 40) << "the pclntab and build info are outside the corrupted range";
  EXPECT_GT(refused, 0) << "2000 corrupted bytes in the descriptors and nothing noticed?";
}

// A crafted struct whose fields all name one 1 MiB name (and as many fields as the type data
// holds): StructFields copied the name per field (tens of gigabytes); it now stops at a small
// multiple of the type data.
TEST(GoTypeData, FieldsSharingOneLongNameAreRefusedNotCopied) {
  const std::string src = kGoOut + "/test-apiserver-go1.23";
  ASSERT_TRUE(Exists(src)) << src;
  auto clean = GoBinary::Open(src);
  ASSERT_TRUE(clean.ok());
  ASSERT_TRUE(clean->types().ok());
  const GoModuleData md = *clean->module_data();
  auto target = (*clean->types())->FindNamed("golang.org/x/net/http2.serverConn");
  ASSERT_TRUE(target);
  const ElfSection* rodata = clean->elf().FindSection(".rodata");
  ASSERT_NE(rodata, nullptr);
  std::ifstream in(src, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto file_offset = [&](uint64_t vaddr) { return rodata->offset + (vaddr - rodata->addr); };
  auto put64 = [&](uint64_t vaddr, uint64_t v) { std::memcpy(&bytes[file_offset(vaddr)], &v, 8); };
  // Early in runtime.types (before the struct's descriptor): one name of 1 MiB - 1 bytes, then
  // the field array.
  constexpr uint64_t kNameLen = (1 << 20) - 1, kFields = 8192;
  const uint64_t name = (md.types + 4096) & ~uint64_t{7};
  const uint64_t fields = (name + kNameLen + 8 + 7) & ~uint64_t{7};
  ASSERT_LT(fields + kFields * 24, target->vaddr) << "the struct's descriptor must stay intact";
  bytes[file_offset(name)] = 0;  // flags, then uvarint length 0xfffff
  bytes[file_offset(name) + 1] = static_cast<char>(0xff);
  bytes[file_offset(name) + 2] = static_cast<char>(0xff);
  bytes[file_offset(name) + 3] = 0x3f;
  auto field_type = (*clean->types())->StructFields(*target);
  ASSERT_TRUE(field_type.ok() && !field_type->empty());
  for (uint64_t i = 0; i < kFields; ++i) {
    put64(fields + 24 * i, name);
    put64(fields + 24 * i + 8, (*field_type)[0].type.vaddr);
    put64(fields + 24 * i + 16, 0);
  }
  put64(target->vaddr + 56, fields);
  put64(target->vaddr + 64, kFields);
  const std::string path = "/tmp/stormwatch-shared-field-name-" + std::to_string(getpid());
  std::ofstream(path, std::ios::binary) << bytes;
  auto crafted = GoBinary::Open(path);
  std::remove(path.c_str());
  ASSERT_TRUE(crafted.ok()) << crafted.error().message;
  ASSERT_TRUE(crafted->types().ok()) << crafted->types().error().message;
  auto type = (*crafted->types())->FindNamed("golang.org/x/net/http2.serverConn");
  ASSERT_TRUE(type);
  auto crafted_fields = (*crafted->types())->StructFields(*type);
  ASSERT_FALSE(crafted_fields.ok()) << "8192 copies of a 1 MiB name";
  EXPECT_NE(crafted_fields.error().message.find("field names total more than"), std::string::npos)
      << crafted_fields.error().message;
  EXPECT_EQ(crafted_fields.error().code, ErrorCode::kLimit);
}

TEST(GoTypeData, ModuleDataThatDoesNotMatchTheSectionsIsRefused) {
  const std::string src = kGoOut + "/test-apiserver-go1.23";
  auto clean = GoBinary::Open(src);
  ASSERT_TRUE(clean.ok());
  const ElfSection* pcln = clean->elf().FindSection(".gopclntab");
  ASSERT_NE(pcln, nullptr);
  // The Go 1.27 layout on a Go 1.23 binary: typedesclen is etypes here, and does not fit.
  EXPECT_FALSE(FindGoModuleData(clean->elf(), 27, pcln->addr).ok());
  // Outside the supported releases: a clear error, not a guess.
  auto old = FindGoModuleData(clean->elf(), 16, pcln->addr);
  ASSERT_FALSE(old.ok());
  EXPECT_NE(old.error().message.find("1.18-1.27"), std::string::npos) << old.error().message;
  EXPECT_EQ(old.error().code, ErrorCode::kUnsupported);
  EXPECT_FALSE(FindGoModuleData(clean->elf(), 23, pcln->addr + 8).ok()) << "no word points there";
}

}  // namespace
}  // namespace stormwatch

namespace stormwatch {
namespace {

TEST(FunctionShape, ArgumentBytesFromThePclntabAreChecked) {
  auto binary = GoBinary::Open(kGoOut + "/test-apiserver-go1.23");
  ASSERT_TRUE(binary.ok());
  auto fn = binary->FindFunction("golang.org/x/net/http2.(*serverConn).processHeaders");
  ASSERT_TRUE(fn);
  EXPECT_EQ(fn->args, 16) << "receiver and one pointer argument";
  EXPECT_TRUE(CheckFunctionShape(*fn, 16, "processHeaders(f)").ok());
  // processHeaders(f *MetaHeadersFrame, extra int), as a future release might declare it:
  auto shape = CheckFunctionShape(*fn, 24, "processHeaders(f, extra)");
  ASSERT_FALSE(shape.ok());
  EXPECT_EQ(shape.error().code, ErrorCode::kUnsupported);
  const std::string& why = shape.error().message;
  EXPECT_NE(why.find("processHeaders takes 16 bytes of arguments, not the 24"), std::string::npos) << why;
  auto read = binary->FindFunction("net/http.(*connReader).Read");
  ASSERT_TRUE(read);
  EXPECT_EQ(read->args, 32) << "receiver and a slice";
}

}  // namespace
}  // namespace stormwatch
