// Client-certificate identity: DER subject parsing, and the pointer chase through a process's
// memory (our own, laid out as Go lays out serverConn -> tls.Conn -> Certificate) at a target's
// offsets (derived from its type data: tests/unit/go_layout_test.cc checks them with DWARF).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "agent/capture/client_cert_reader.h"

namespace stormwatch {
namespace {

std::string Shell(const std::string& cmd) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  std::string out;
  char buf[4096];
  while (pipe && fgets(buf, sizeof(buf), pipe.get())) out += buf;
  return out;
}

// serial 0: openssl's random one (its DER may be a byte shorter: a leading zero dropped).
std::string MakeCertDer(const std::string& subject, uint32_t serial = 0) {
  std::string dir = "/tmp/stormwatch-cert-test-" + std::to_string(getpid());
  std::string set_serial = serial ? " -set_serial " + std::to_string(serial) : "";
  Shell("mkdir -p " + dir + " && openssl req -x509 -newkey rsa:2048 -nodes -keyout " + dir +
      "/k.pem -outform DER -out " + dir + "/c.der -days 1 -subj '" + subject + "'" + set_serial +
      " 2>/dev/null");
  std::ifstream in(dir + "/c.der", std::ios::binary);
  std::string der((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Shell("rm -rf " + dir);
  return der;
}

TEST(ClientCert, SubjectCommonNameAndEveryOrganization) {
  std::string der = MakeCertDer("/O=dev/O=system:masters/CN=kubernetes-admin");
  ASSERT_FALSE(der.empty());
  auto s = ParseCertificateSubject(der);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->common_name, "kubernetes-admin");
  EXPECT_EQ(s->organizations, (std::vector<std::string>{"dev", "system:masters"}));
  EXPECT_FALSE(ParseCertificateSubject("not a certificate").ok());
  EXPECT_FALSE(ParseCertificateSubject(der.substr(0, der.size() / 2)).ok());
}

// Go-shaped objects in our own memory: process_vm_readv on ourselves walks them like a target's.
struct FakeGoSlice {
  uint64_t ptr, len, cap;
};

TEST(ClientCert, Http1ReaderFollowsGoPointers) {
  std::string der = MakeCertDer("/O=system:nodes/CN=system:node:master-1");
  sw_go_offsets layout{};
  layout.http_conn_rwc = 16;
  layout.tls_peer_certificates = 152;
  layout.x509_raw = 0;
  alignas(8) uint8_t certificate[64] = {};   // x509.Certificate: Raw []byte first
  FakeGoSlice raw{reinterpret_cast<uint64_t>(der.data()), der.size(), der.size()};
  memcpy(certificate, &raw, sizeof(raw));
  uint64_t peer_array[1] = {reinterpret_cast<uint64_t>(certificate)};
  alignas(8) uint8_t tls_conn[256] = {};
  FakeGoSlice peers{reinterpret_cast<uint64_t>(peer_array), 1, 1};
  memcpy(tls_conn + 152, &peers, sizeof(peers));
  alignas(8) uint8_t http_conn[64] = {};  // net/http.conn: rwc net.Conn at +16
  uint64_t iface[2] = {0x1234, reinterpret_cast<uint64_t>(tls_conn)};
  memcpy(http_conn + 16, iface, sizeof(iface));

  ClientCertReader reader;
  auto s = reader.ReadConnection(getpid(), reinterpret_cast<uint64_t>(http_conn) + 16, layout);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->common_name, "system:node:master-1");
  EXPECT_EQ(s->organizations, (std::vector<std::string>{"system:nodes"}));

  // A connection without a client certificate (a token client): nothing, and no error.
  alignas(8) uint8_t token_tls[256] = {};
  iface[1] = reinterpret_cast<uint64_t>(token_tls);
  memcpy(http_conn + 16, iface, sizeof(iface));
  EXPECT_FALSE(reader.ReadConnection(getpid(), reinterpret_cast<uint64_t>(http_conn) + 16, layout));
  EXPECT_EQ(reader.read_errors(), 0u);

  // A dangling pointer is an error counted, not a crash.
  uint64_t bad_iface[2] = {0x1234, 0x10};
  memcpy(http_conn + 16, bad_iface, sizeof(bad_iface));
  EXPECT_FALSE(reader.ReadConnection(getpid(), reinterpret_cast<uint64_t>(http_conn) + 16, layout));
  EXPECT_EQ(reader.read_errors(), 1u);
}

TEST(ClientCert, CachedByLocationAndValidatedByTheSignatureTail) {
  // Same-length subjects and serials of equal length (a random serial encodes a byte shorter
  // 1 time in 128: the retries this test once had did not cover the first one being short).
  std::string first = MakeCertDer("/O=system:masters/CN=kubernetes-admin", 0x51c3a1);
  std::string second = MakeCertDer("/O=system:nodes00/CN=kubernetes-alice", 0x62d4b2);
  ASSERT_EQ(first.size(), second.size()) << "same-shaped certificates: the case a length check misses";
  std::string memory = first;  // the target's memory where the BPF program found the DER
  CertLocation where{reinterpret_cast<uint64_t>(memory.data()), static_cast<uint32_t>(memory.size())};

  ClientCertReader reader;
  EXPECT_EQ(reader.ReadDer(getpid(), where)->common_name, "kubernetes-admin");
  // Cached: a change before the tail is not re-parsed (proof the cache answered)...
  memory[memory.size() / 2] ^= 0x55;
  EXPECT_EQ(reader.ReadDer(getpid(), where)->common_name, "kubernetes-admin");
  // ...but another certificate at the same address and length (a new connection in a closed
  // one's memory) is read afresh.
  memory = second;
  where.der = reinterpret_cast<uint64_t>(memory.data());
  auto s = reader.ReadDer(getpid(), where);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->common_name, "kubernetes-alice");
  EXPECT_EQ(s->organizations, (std::vector<std::string>{"system:nodes00"}));
  EXPECT_EQ(reader.read_errors(), 0u);

  // Unreadable or not a certificate: counted, nothing cached.
  EXPECT_FALSE(reader.ReadDer(getpid(), {0x10, 800}));
  std::string junk(600, 'x');
  EXPECT_FALSE(reader.ReadDer(getpid(), {reinterpret_cast<uint64_t>(junk.data()), 600}));
  EXPECT_EQ(reader.read_errors(), 2u);
}

TEST(ClientCert, IdentityOnlyFromTheBpfLocationForHttp2) {
  std::string der = MakeCertDer("/O=system:masters/CN=kubernetes-admin");
  ClientCertIdentities identities;
  sw_go_offsets layout{};
  layout.tls_peer_certificates = 152;
  identities.SetTarget(getpid(), layout);
  RequestConnection h2{.pid = static_cast<uint32_t>(getpid()), .conn = 0xdead0000,
                       .client_cert_der = reinterpret_cast<uint64_t>(der.data()),
                       .client_cert_der_len = static_cast<uint32_t>(der.size())};
  auto id = identities.Lookup(h2);
  ASSERT_TRUE(id);
  EXPECT_EQ(id->user, "kubernetes-admin");
  EXPECT_TRUE(id->system_masters);
  // No location (a token, or no certificate): the *serverConn is never followed from user space.
  h2.client_cert_der = 0;
  EXPECT_FALSE(identities.Lookup(h2));
  EXPECT_EQ(identities.read_errors(), 0u);
  // A process whose tls.Conn fields were not found in its type data: no lookups at all.
  layout.tls_peer_certificates = 0;
  identities.SetTarget(getpid(), layout);
  h2.client_cert_der = reinterpret_cast<uint64_t>(der.data());
  EXPECT_FALSE(identities.Lookup(h2));
}

}  // namespace
}  // namespace stormwatch
