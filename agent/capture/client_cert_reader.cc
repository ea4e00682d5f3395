#include "agent/capture/client_cert_reader.h"

#include <openssl/x509.h>
#include <sys/uio.h>

#include <memory>

#include "agent/capture/go_offsets.h"

namespace stormwatch {
namespace {

constexpr uint64_t kMaxPeerCertificates = 16;
constexpr uint64_t kMaxCertificateBytes = 64 * 1024;

bool ReadRemote(pid_t pid, uint64_t address, void* out, size_t size) {
  if (address == 0) return false;
  iovec local{out, size};
  iovec remote{reinterpret_cast<void*>(address), size};
  return process_vm_readv(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(size);
}

struct GoSlice {
  uint64_t ptr, len, cap;
};

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

std::optional<GoTlsLayout> LookupGoTlsLayout(std::string_view go_version) {
  auto v = GoVersion::Parse(go_version);
  if (!v) return std::nullopt;
  GoTlsLayout layout;
  if (v->minor >= 17 && v->minor <= 20) {
    layout.tls_peer_certificates = 144;  // proven: go1.19 (reflect; tests/unit)
  } else if (v->minor >= 21 && v->minor <= 23) {
    layout.tls_peer_certificates = 152;  // proven: go1.21, go1.22, go1.23
  } else {
    return std::nullopt;
  }
  return layout;
}

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

std::optional<CertSubject> ClientCertReader::Read(pid_t pid, uint64_t server_conn,
                                                  const GoTlsLayout& layout) {
  uint64_t iface[2];  // itab, data (*tls.Conn)
  if (!ReadRemote(pid, server_conn + layout.server_conn_conn, iface, sizeof(iface))) {
    ++read_errors_;
    return std::nullopt;
  }
  GoSlice peers{};
  if (!ReadRemote(pid, iface[1] + layout.tls_peer_certificates, &peers, sizeof(peers))) {
    ++read_errors_;
    return std::nullopt;
  }
  // A TLS server never renegotiates: a connection's certificates are fixed at the handshake.
  // Go reuses freed memory, so a new connection may sit where a closed one was: the cached
  // answer holds only while the tls.Conn and its peerCertificates array are the same objects.
  Key key{pid, server_conn};
  if (auto it = cache_.find(key); it != cache_.end() && it->second.first.tls_conn == iface[1] &&
                                  it->second.first.peers_ptr == peers.ptr &&
                                  it->second.first.peers_len == peers.len) {
    order_.splice(order_.end(), order_, it->second.second);
    return it->second.first.subject;
  }
  Entry entry{iface[1], peers.ptr, peers.len, std::nullopt};
  if (peers.len > 0) {
    uint64_t cert = 0;
    GoSlice raw{};
    std::string der;
    if (peers.len > kMaxPeerCertificates || peers.cap < peers.len ||
        !ReadRemote(pid, peers.ptr, &cert, sizeof(cert)) ||
        !ReadRemote(pid, cert, &raw, sizeof(raw)) || raw.len == 0 ||
        raw.len > kMaxCertificateBytes || raw.cap < raw.len) {
      ++read_errors_;
      return std::nullopt;
    }
    der.resize(raw.len);
    if (!ReadRemote(pid, raw.ptr, der.data(), der.size())) {
      ++read_errors_;
      return std::nullopt;
    }
    if (auto parsed = ParseCertificateSubject(der)) {
      entry.subject = std::move(*parsed);
    } else {
      ++read_errors_;
    }
  }
  if (auto it = cache_.find(key); it != cache_.end()) {
    order_.erase(it->second.second);
    cache_.erase(it);
  }
  if (cache_.size() >= capacity_) {
    cache_.erase(order_.front());
    order_.pop_front();
  }
  order_.push_back(key);
  cache_.emplace(key, std::make_pair(entry, std::prev(order_.end())));
  return entry.subject;
}

void ClientCertIdentities::SetTarget(pid_t pid, std::string_view go_version) {
  if (auto layout = LookupGoTlsLayout(go_version)) {
    layouts_[pid] = *layout;
  } else {
    layouts_.erase(pid);
  }
}

void ClientCertIdentities::ForgetProcess(pid_t pid) {
  layouts_.erase(pid);
  reader_.ForgetProcess(pid);
}

std::optional<Identity> ClientCertIdentities::Lookup(pid_t pid, uint64_t server_conn) {
  auto layout = layouts_.find(pid);
  if (layout == layouts_.end()) return std::nullopt;
  std::optional<CertSubject> subject = reader_.Read(pid, server_conn, layout->second);
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
  for (auto it = order_.begin(); it != order_.end();) {
    if (it->first == pid) {
      cache_.erase(*it);
      it = order_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace stormwatch
