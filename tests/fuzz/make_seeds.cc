// Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/), from the same kinds of
// inputs the unit tests use: ring-buffer records built from bpf/events.h, a synthetic Go binary
// (tests/unit/go_binary_test.cc's), a capture file written by CaptureWriter, a protobuf body
// built with the generated classes, and text inputs. Test tokens only: no secrets.
//   build-sanitize/tests/fuzz/make_fuzz_seeds tests/fuzz/corpus
// (client certificate seeds come from openssl, see docs/fuzzing.md).
#include <elf.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "agent/record/capture_file.h"
#include "bpf/events.h"
#include "k8s.io/apimachinery/pkg/apis/meta/v1/generated.pb.h"
#include "k8s.io/apimachinery/pkg/runtime/generated.pb.h"

using namespace stormwatch;
namespace fs = std::filesystem;

namespace {

fs::path g_root;

void Seed(const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(g_root / target);
  std::ofstream(g_root / target / name, std::ios::binary) << bytes;
}

template <typename T>
std::string Raw(const T& v, size_t size = sizeof(T)) {
  return std::string(reinterpret_cast<const char*>(&v), size);
}

// A ring record prefixed by its u16 length (fuzz_ring_events' framing).
std::string Framed(const std::string& record) {
  uint16_t len = static_cast<uint16_t>(record.size());
  return Raw(len) + record;
}

std::string Base64Url(std::string_view in) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  uint32_t v = 0;
  int bits = 0;
  for (unsigned char c : in) {
    v = (v << 8) | c;
    bits += 8;
    while (bits >= 6) out += k[(v >> (bits -= 6)) & 63];
  }
  if (bits > 0) out += k[(v << (6 - bits)) & 63];
  return out;
}

const std::string kToken =
    Base64Url(R"({"alg":"RS256","kid":"test"})") + "." +
    Base64Url(R"({"iss":"https://kubernetes.default.svc.cluster.local","sub":"system:serviceaccount:team-a:operator",)"
              R"("kubernetes.io":{"namespace":"team-a","pod":{"name":"operator-0","uid":"p-1"},)"
              R"("serviceaccount":{"name":"operator","uid":"s-1"}}})") +
    ".c2lnbmF0dXJl";
const std::string kUserAgent = "datajob-operator/v1.4.2 (linux/amd64) kubernetes/4c1e2a7/controller";
const std::string kPodJson =
    R"({"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-0","namespace":"team-a",)"
    R"("uid":"4f1c2d3e-0000-4000-8000-000000000001","resourceVersion":"123456","generation":123,)"
    R"("creationTimestamp":"2026-11-29T10:00:00Z","deletionTimestamp":"2026-11-29T11:00:00Z",)"
    R"("labels":{"app":"web"},"finalizers":["example.com/cleanup"]},"spec":{}})";

sw_sock_addr V4(uint8_t d, uint16_t port) {
  sw_sock_addr a{};
  a.ip_len = 4;
  a.port = port;
  a.ip[0] = 10, a.ip[3] = d;
  return a;
}

std::string H2Request(uint64_t conn, uint32_t stream, uint64_t ts,
                      std::vector<std::pair<std::string, std::string>> fields) {
  std::string data;
  for (const auto& [n, v] : fields) {
    uint16_t lens[2] = {uint16_t(n.size()), uint16_t(v.size())};
    data += Raw(lens) + n + v;
  }
  sw_h2_request r{};
  r.hdr = {SW_EV_H2_REQUEST, 42, ts, conn, stream, 0};
  r.field_count = r.fields_kept = fields.size();
  r.data_len = data.size();
  r.peer = V4(7, 40000);
  r.local = V4(1, 6443);
  return Raw(r, offsetof(sw_h2_request, data)) + data;
}

std::string H2Response(uint64_t conn, uint32_t stream, uint64_t ts, int64_t status,
                       const std::string& body = "", const std::string& retry_after = "") {
  sw_h2_response r{};
  r.hdr = {SW_EV_H2_RESPONSE, 42, ts, conn, stream, 0};
  r.status = status;
  r.wrote_bytes = body.size();
  std::string uid = "7e2b6c1a-0000-4000-8000-00000000000a";
  r.priority_level_uid_len = uid.size();
  std::memcpy(r.priority_level_uid, uid.data(), uid.size());
  r.retry_after_len = retry_after.size();
  std::memcpy(r.retry_after, retry_after.data(), retry_after.size());
  r.body_len = body.size();
  std::memcpy(r.body, body.data(), body.size());
  return Raw(r, offsetof(sw_h2_response, body) + body.size());
}

std::string TlsData(uint64_t conn, uint64_t ts, bool write, const std::string& bytes) {
  sw_tls_data d{};
  d.hdr = {SW_EV_TLS_DATA, 42, ts, conn, 0, 0};
  d.direction = write ? SW_TLS_WRITE : SW_TLS_READ;
  d.total_len = d.captured = bytes.size();
  std::memcpy(d.data, bytes.data(), bytes.size());
  return Raw(d, offsetof(sw_tls_data, data) + bytes.size());
}

std::string TlsClose(uint64_t conn, uint64_t ts) {
  sw_tls_close c{};
  c.hdr = {SW_EV_TLS_CLOSE, 42, ts, conn, 0, 0};
  return Raw(c);
}

std::string GrpcCall(uint64_t g, uint64_t ts, const std::string& method, uint64_t type,
                     const std::string& key, const std::string& end, int64_t limit) {
  sw_grpc_call e{};
  e.hdr = {SW_EV_GRPC_CALL, 43, ts, g, 0, 0};
  e.kind = SW_GRPC_UNARY;
  e.method_len = method.size();
  std::memcpy(e.method, method.data(), method.size());
  e.msg_type = type;
  e.msg_len = 112;
  std::memcpy(e.msg + 48, &limit, 8);
  e.key_len = e.key_total = key.size();
  std::memcpy(e.key, key.data(), key.size());
  e.end_len = e.end_total = end.size();
  std::memcpy(e.end, end.data(), end.size());
  e.peer = V4(1, 50000);
  return Raw(e);
}

std::string GrpcDone(uint64_t g, uint64_t ts, uint64_t type, uint32_t kvs) {
  sw_grpc_done d{};
  d.hdr = {SW_EV_GRPC_DONE, 43, ts, g, 0, 0};
  d.msg_type = type;
  d.msg_len = 48;
  d.kvs_read = kvs;
  return Raw(d);
}

const std::string kHttp1Request =
    "GET /api/v1/namespaces/team-a/pods?labelSelector=app%3Dweb&limit=500 HTTP/1.1\r\n"
    "Host: 10.0.0.1:6443\r\nUser-Agent: " + kUserAgent + "\r\nAuthorization: Bearer " + kToken +
    "\r\nAccept: application/json\r\n\r\n";
const std::string kHttp1Put =
    "PUT /apis/example.com/v1/namespaces/team-a/datajobs/job-1 HTTP/1.1\r\nHost: x\r\n"
    "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
const std::string kHttp1Response =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
    "X-Kubernetes-Pf-Prioritylevel-Uid: 7e2b6c1a-0000-4000-8000-00000000000a\r\n"
    "Transfer-Encoding: chunked\r\n\r\n" "10\r\n{\"kind\":\"Pod\"}  \r\n0\r\n\r\n";
const std::string k429 = "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n";

void RingSeeds() {
  std::vector<std::pair<std::string, std::string>> get = {
      {":method", "GET"}, {":path", "/api/v1/namespaces/team-a/pods?limit=500&resourceVersion=0"},
      {":authority", "10.0.0.1:6443"}, {"authorization", "Bearer " + kToken},
      {"user-agent", kUserAgent}, {"accept", "application/json"}};
  std::vector<std::pair<std::string, std::string>> put = {
      {":method", "PUT"}, {":path", "/apis/example.com/v1/namespaces/team-a/datajobs/job-1"},
      {"content-type", "application/json"}, {"authorization", "Bearer " + kToken},
      {"user-agent", kUserAgent}};
  Seed("fuzz_ring_events", "h2_get", Framed(H2Request(1, 1, 1000, get)) + Framed(H2Response(1, 1, 2000, 200)));
  Seed("fuzz_ring_events", "h2_put_object",
       Framed(H2Request(1, 3, 1000, put)) + Framed(H2Response(1, 3, 2000, 200, kPodJson)) +
       Framed(H2Request(1, 5, 3000, put)) + Framed(H2Response(1, 5, 4000, 409)));
  Seed("fuzz_ring_events", "h2_429", Framed(H2Request(2, 1, 1000, get)) + Framed(H2Response(2, 1, 2000, 429, "", "1")));
  Seed("fuzz_ring_events", "http1",
       Framed(TlsData(9, 1000, false, kHttp1Request)) + Framed(TlsData(9, 2000, true, kHttp1Response)) +
       Framed(TlsData(9, 3000, false, kHttp1Put)) + Framed(TlsData(9, 4000, true, k429)) +
       Framed(TlsClose(9, 5000)));
  Seed("fuzz_ring_events", "grpc_range",
       Framed(GrpcCall(77, 1000, "/etcdserverpb.KV/Range", 0x1000, "/registry/pods/team-a/", "/registry/pods/team-a0", 500)) +
       Framed(GrpcDone(77, 2000, 0x2000, 3)) +
       Framed(GrpcCall(78, 3000, "/etcdserverpb.KV/Txn", 0x3000, "/registry/configmaps/team-a/cm", "", 0)) +
       Framed(GrpcDone(78, 4000, 0x4000, 0)));

  // fuzz_http1_stream: [control][u16 len][bytes], control bit 3 = write.
  auto ev = [](uint8_t control, const std::string& bytes) {
    uint16_t len = bytes.size();
    return std::string(1, char(control)) + Raw(len) + bytes;
  };
  Seed("fuzz_http1_stream", "get_chunked", ev(0, kHttp1Request) + ev(8, kHttp1Response));
  Seed("fuzz_http1_stream", "pipelined",
       ev(1, kHttp1Put + kHttp1Request) + ev(9, k429) + ev(9, kHttp1Response) + ev(0x39, ""));
  Seed("fuzz_http1_stream", "split",
       ev(2, kHttp1Request.substr(0, 20)) + ev(2, kHttp1Request.substr(20)) +
       ev(10, kHttp1Response.substr(0, 30)) + ev(10, kHttp1Response.substr(30)));
  Seed("fuzz_http1_stream", "upgrade",
       ev(3, "GET /api/v1/pods?watch=true HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n") +
       ev(11, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n"));
}

// tests/unit/go_binary_test.cc's SyntheticGoBinary (Go 1.20+ pclntab, inline build info).
std::string SyntheticGoBinary() {
  constexpr uint64_t kTextVaddr = 0x401000, kDataVaddr = 0x403000;
  constexpr uint64_t kTextOffset = 0x1000, kTabOffset = 0x2000, kDataOffset = 0x3000;
  std::string image(0x4000, '\0');
  auto put = [&](uint64_t at, const auto& v) { std::memcpy(image.data() + at, &v, sizeof(v)); };
  auto put_s = [&](uint64_t at, std::string_view s) { std::memcpy(image.data() + at, s.data(), s.size()); };
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
  put(0, ehdr);
  const uint32_t flags[] = {PF_R | PF_X, PF_R, PF_R | PF_W};
  for (int i = 0; i < 3; ++i) {
    Elf64_Phdr phdr{};
    phdr.p_type = PT_LOAD;
    phdr.p_flags = flags[i];
    phdr.p_offset = 0x1000 * (i + 1);
    phdr.p_vaddr = phdr.p_paddr = 0x400000 + 0x1000 * (i + 1);
    phdr.p_filesz = 0x1000;
    phdr.p_memsz = i == 2 ? 0x2000 : 0x1000;
    phdr.p_align = 0x1000;
    put(sizeof(Elf64_Ehdr) + i * sizeof(Elf64_Phdr), phdr);
  }
  const uint8_t code[] = {0x48, 0x89, 0xc0, 0xc3, 0xf3, 0xc3, 0xc2, 0x08, 0x00, 0x90};
  std::memset(image.data() + kTextOffset, 0xcc, 0x1000);
  std::memcpy(image.data() + kTextOffset, code, sizeof(code));
  // pclntab, Go 1.20 magic
  const uint64_t tab = kTabOffset;
  put(tab, uint32_t{0xfffffff1});
  put(tab + 6, uint8_t{1});
  put(tab + 7, uint8_t{8});
  auto word = [&](int n, uint64_t v) { put(tab + 8 + 8 * n, v); };
  constexpr uint64_t kNames = 72, kFuncdata = 96;
  put_s(tab + kNames, std::string_view("main.one\0main.two\0", 18));
  word(0, 2);
  for (int n : {3, 4, 5, 6}) word(n, kNames);
  word(2, kTextVaddr);
  word(7, kFuncdata);
  uint64_t i = 0;
  for (uint32_t v : {0u, 24u, 4u, 32u, 10u}) put(tab + kFuncdata + 4 * i++, v);
  put(tab + kFuncdata + 24, uint32_t{0});
  put(tab + kFuncdata + 28, uint32_t{0});
  put(tab + kFuncdata + 32, uint32_t{4});
  put(tab + kFuncdata + 36, uint32_t{9});
  // build info
  const uint64_t at = kDataOffset + 0x40;
  put_s(at, "\xff Go buildinf:");
  put(at + 14, uint8_t{8});
  put(at + 15, uint8_t{2});
  const std::string start("0w\xaf\x0c\x92t\x08\x02\x41\xe1\xc1\x07\xe6\xd6\x18\xe6", 16);
  const std::string end("\xf9\x32\x43\x31\x86\x18\x20\x72\x00\x82\x42\x10\x41\x16\xd8\xf2", 16);
  std::string modinfo = start +
      "path\texample.com/app\nmod\texample.com/app\tv1.2.3\th1:app=\n"
      "dep\tgolang.org/x/net\tv0.17.0\th1:old=\n=>\tgolang.org/x/net\tv0.19.0\th1:new=\n"
      "build\tGOARCH=amd64\n" + end;
  uint64_t off = at + 32;
  for (const std::string& s : {std::string("go1.22.1"), modinfo}) {
    uint64_t len = s.size();
    do {
      image[off++] = char((len & 0x7f) | (len >= 0x80 ? 0x80 : 0));
      len >>= 7;
    } while (len);
    put_s(off, s);
    off += s.size();
  }
  (void)kDataVaddr;
  return image;
}

void CaptureSeed(const fs::path& dir) {
  std::string path = (dir / "capture.tmp").string();
  {
    auto w = CaptureWriter::Open(path, {}, 12345);
    if (!w) return;
    RequestRecord r;
    r.pid = 42;
    r.method = "GET";
    r.path = "/api/v1/namespaces/team-a/pods?limit=500";
    r.status = 200;
    Identity id;
    id.user = "system:serviceaccount:team-a:operator";
    id.user_agent = kUserAgent;
    r.identity = IdentityRef::Make(std::move(id));
    (*w)->Write(r);
    EtcdRequest e;
    e.method = "/etcdserverpb.KV/Range";
    e.key = "/registry/pods/team-a/";
    e.limit = 500;
    (*w)->Write(e);
    (*w)->Flush();
  }
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fs::remove(path);
  Seed("fuzz_capture_file", "two_records", bytes);
}

std::string ProtobufBody() {
  namespace meta = k8s::io::apimachinery::pkg::apis::meta::v1;
  namespace kruntime = k8s::io::apimachinery::pkg::runtime;
  meta::PartialObjectMetadata object;
  meta::ObjectMeta* m = object.mutable_metadata();
  m->set_name("web-0");
  m->set_namespace_("team-a");
  m->set_resourceversion("123456");
  m->set_generation(123);
  m->mutable_deletiontimestamp()->set_seconds(1796122800);
  m->add_finalizers("example.com/cleanup");
  kruntime::Unknown unknown;
  unknown.mutable_typemeta()->set_apiversion("v1");
  unknown.mutable_typemeta()->set_kind("Pod");
  unknown.set_raw(object.SerializeAsString());
  unknown.set_contenttype("application/vnd.kubernetes.protobuf");
  return std::string("k8s\0", 4) + unknown.SerializeAsString();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s tests/fuzz/corpus\n", argv[0]);
    return 2;
  }
  g_root = argv[1];
  RingSeeds();
  Seed("fuzz_identity", "service_account", "Bearer " + kToken + "\n--\n" + kUserAgent);
  Seed("fuzz_identity", "opaque_token", "Bearer abcdef.0123456789abcdef\n--\nkubectl/v1.32.4 (linux/amd64) kubernetes/abc1234");
  Seed("fuzz_identity", "basic", "Basic YWRtaW46YWRtaW4=\n--\ncurl/8.0");
  Seed("fuzz_user_agent", "operator", kUserAgent);
  Seed("fuzz_user_agent", "kcm", "kube-controller-manager/v1.32.4 (linux/amd64) kubernetes/abc1234/system:serviceaccount:kube-system:deployment-controller");
  Seed("fuzz_user_agent", "python", "OpenAPI-Generator/31.0.0/python");
  Seed("fuzz_request_info", "list", "GET\n--\n/api/v1/namespaces/team-a/pods?labelSelector=app%3Dweb%2Ctier%21%3Dfront&limit=500&resourceVersion=0");
  Seed("fuzz_request_info", "watch", "GET\n--\n/apis/apps/v1/deployments?watch=true&fieldSelector=metadata.name%3Dweb&resourceVersionMatch=NotOlderThan&resourceVersion=12");
  Seed("fuzz_request_info", "patch_sub", "PATCH\n--\n/apis/example.com/v1/namespaces/a/datajobs/job-1/status?fieldManager=op");
  Seed("fuzz_request_info", "nonresource", "GET\n--\n/openapi/v3/apis/apps/v1?hash=1");
  Seed("fuzz_object_facts", "pod", kPodJson);
  Seed("fuzz_object_facts", "status", R"({"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409})");
  Seed("fuzz_object_facts_protobuf", "pod", ProtobufBody());
  Seed("fuzz_config_file", "example",
       "listen_address: \":9090\"\nlog_level: info\nstorms:\n  update_loop:\n    enabled: true\n"
       "    object_writes_per_s: 5\n  list_storm:\n    lists_per_s: 5\nexempt_users:\n  - system:admin\n");
  Seed("fuzz_etcd_keys", "list", std::string("\0", 1) + "/registry/pods/team-a/\n--\n/registry/pods/team-a0\n--\n");
  Seed("fuzz_etcd_keys", "crd", std::string("\0", 1) + "/registry/example.com/datajobs/team-a/job-1\n--\n\n--\n/registry");
  Seed("fuzz_etcd_keys", "truncated", std::string("\1", 1) + "/kubernetes.io/services/specs/default/kubernetes\n--\n\n--\n/kubernetes.io");
  Seed("fuzz_go_binary", "synthetic_go120", SyntheticGoBinary());
  Seed("fuzz_go_modinfo", "modules",
       "go1.22.1\n--\npath\texample.com/app\nmod\texample.com/app\tv1.2.3\th1:app=\n"
       "dep\tgolang.org/x/net\tv0.17.0\th1:old=\n=>\tgolang.org/x/net\tv0.19.0\th1:new=\nbuild\tGOARCH=amd64\n");
  CaptureSeed(g_root);
  return 0;
}
