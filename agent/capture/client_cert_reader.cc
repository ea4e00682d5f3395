#include "agent/capture/client_cert_reader.h"

#include <openssl/x509.h>

#include <algorithm>
#include <cstdint>
#include <memory>

#include "agent/capture/remote_memory.h"

namespace stormwatch {
namespace {

constexpr uint64_t kMaxPeerCertificates = 16;
constexpr uint64_t kMaxCertificateBytes = 64 * 1024;

std::string NameEntry(X509_NAME* name, int index) {
  X509_NAME_ENTRY* e = X509_NAME_get_entry(name, index);
  ASN1_STRING* data = e ? X509_NAME_ENTRY_get_data(e) : nullptr;
  if (!data) return "";
  unsigned char* utf8 = nullptr;
  int n = ASN1_STRING_to_UTF8(&utf8, data);
  if (n < 0) return "";
  std::string s(reinterpret_cast<char*>(utf8), n);
  OPENSSL_free(utf8);
  return s;
}

}  // namespace

Result<CertSubject> ParseCertificateSubject(std::string_view der) {
  const auto* p = reinterpret_cast<const unsigned char*>(der.data());
  std::unique_ptr<X509, decltype(&X509_free)> cert(d2i_X509(nullptr, &p, static_cast<long>(der.size())),
                                                   &X509_free);
  if (!cert) return Error{"not a DER X.509 certificate"};
  X509_NAME* subject = X509_get_subject_name(cert.get());
  if (!subject) return Error{"certificate without a subject"};
  CertSubject out;
  for (int i = -1; (i = X509_NAME_get_index_by_NID(subject, NID_commonName, i)) >= 0;) {
    out.common_name = NameEntry(subject, i);  // the apiserver takes the (last) CN
  }
  for (int i = -1; (i = X509_NAME_get_index_by_NID(subject, NID_organizationName, i)) >= 0;) {
    out.organizations.push_back(NameEntry(subject, i));
  }
  return out;
}

std::optional<CertSubject> ClientCertReader::ReadDer(pid_t pid, CertLocation where) {
  if (where.der == 0 || where.len == 0 || where.len > kMaxCertificateBytes) {
    ++read_errors_;
    return std::nullopt;
  }
  size_t tail_len = std::min<size_t>(kTail, where.len);
  std::string tail(tail_len, '\0');
  if (!ReadRemote(pid, where.der + where.len - tail_len, tail.data(), tail.size())) {
    ++read_errors_;
    return std::nullopt;
  }
  Key key{pid, where.der, where.len};
  if (Entry* cached = cache_.Touch(key)) {
    if (cached->tail == tail) return cached->subject;
    cache_.Erase(key);  // another certificate now sits there
  }
  std::string der(where.len, '\0');
  if (!ReadRemote(pid, where.der, der.data(), der.size())) {
    ++read_errors_;
    return std::nullopt;
  }
  auto parsed = ParseCertificateSubject(der);
  if (!parsed) {
    ++read_errors_;
    return std::nullopt;
  }
  return cache_
      .FindOrInsert(
          key, [&] { return Entry{der.substr(der.size() - tail_len), std::move(*parsed)}; },
          [](const Key&, Entry&) {})
      .subject;
}

std::optional<CertSubject> ClientCertReader::ReadConnection(pid_t pid, uint64_t net_conn,
                                                            const sw_go_offsets& layout) {
  GoInterface conn{};  // data: *tls.Conn
  GoSlice peers{};
  if (!ReadRemote(pid, net_conn, &conn) ||
      !ReadRemote(pid, conn.data + layout.tls_peer_certificates, &peers)) {
    ++read_errors_;
    return std::nullopt;
  }
  if (peers.len == 0) return std::nullopt;  // no client certificate: a token or anonymous client
  uint64_t cert = 0;
  GoSlice raw{};
  if (peers.len > kMaxPeerCertificates || peers.cap < peers.len ||
      !ReadRemote(pid, peers.ptr, &cert) || !ReadRemote(pid, cert + layout.x509_raw, &raw) ||
      raw.cap < raw.len) {
    ++read_errors_;
    return std::nullopt;
  }
  return ReadDer(pid, {raw.ptr, static_cast<uint32_t>(std::min<uint64_t>(raw.len, UINT32_MAX))});
}

void ClientCertIdentities::SetTarget(pid_t pid, const sw_go_offsets& layout) {
  if (layout.tls_peer_certificates != 0) {
    layouts_[pid] = layout;
  } else {
    layouts_.erase(pid);
  }
}

void ClientCertIdentities::ForgetProcess(pid_t pid) {
  layouts_.erase(pid);
  reader_.ForgetProcess(pid);
}

std::optional<Identity> ClientCertIdentities::Lookup(const RequestConnection& c) {
  auto layout = layouts_.find(static_cast<pid_t>(c.pid));
  if (layout == layouts_.end()) return std::nullopt;
  std::optional<CertSubject> subject;
  if (c.http1) {
    subject = reader_.ReadConnection(static_cast<pid_t>(c.pid), c.conn + layout->second.http_conn_rwc,
                                     layout->second);
  } else if (c.client_cert_der != 0) {
    subject = reader_.ReadDer(static_cast<pid_t>(c.pid), {c.client_cert_der, c.client_cert_der_len});
  }
  if (!subject || subject->common_name.empty()) return std::nullopt;
  Identity id;
  id.kind = Identity::Kind::kUser;
  id.user = std::move(subject->common_name);
  id.groups = std::move(subject->organizations);
  for (const std::string& g : id.groups) id.system_masters |= g == "system:masters";
  id.reason = "x509 client certificate";
  return id;
}

void ClientCertReader::ForgetProcess(pid_t pid) {
  for (auto it = cache_.begin(); it != cache_.end();) {
    it = it->first.pid == pid ? cache_.Erase(it) : std::next(it);
  }
}

}  // namespace stormwatch
