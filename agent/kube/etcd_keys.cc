#include "agent/kube/etcd_keys.h"

#include "agent/kube/metric_labels.h"

#include <algorithm>
#include <string>
#include <vector>

namespace stormwatch {
namespace {

struct BuiltIn {
  std::string_view prefix;    // the resource prefix under /registry (may hold a '/')
  std::string_view resource;  // the resource it stores
  std::string_view group;
  bool cluster_scoped;
};

// kube-apiserver's built-in storage (pkg/registry/*/storage: the store's KeyRootFunc), for the
// prefixes that differ from the resource name, the groups and the scopes. A prefix not listed
// is taken as a namespaced core-or-unknown resource of that name.
constexpr BuiltIn kBuiltIns[] = {
    {"minions", "nodes", "", true},
    {"namespaces", "namespaces", "", true},
    {"persistentvolumes", "persistentvolumes", "", true},
    {"services/specs", "services", "", false},
    {"services/endpoints", "endpoints", "", false},
    {"controllers", "replicationcontrollers", "", false},
    {"ranges/serviceips", "serviceipallocations", "", true},
    {"ranges/servicenodeports", "servicenodeportallocations", "", true},
    {"masterleases", "masterleases", "", true},
    {"deployments", "deployments", "apps", false},
    {"replicasets", "replicasets", "apps", false},
    {"statefulsets", "statefulsets", "apps", false},
    {"daemonsets", "daemonsets", "apps", false},
    {"controllerrevisions", "controllerrevisions", "apps", false},
    {"jobs", "jobs", "batch", false},
    {"cronjobs", "cronjobs", "batch", false},
    {"leases", "leases", "coordination.k8s.io", false},
    {"ingress", "ingresses", "networking.k8s.io", false},
    {"ingressclasses", "ingressclasses", "networking.k8s.io", true},
    {"networkpolicies", "networkpolicies", "networking.k8s.io", false},
    {"ipaddresses", "ipaddresses", "networking.k8s.io", true},
    {"servicecidrs", "servicecidrs", "networking.k8s.io", true},
    {"endpointslices", "endpointslices", "discovery.k8s.io", false},
    {"horizontalpodautoscalers", "horizontalpodautoscalers", "autoscaling", false},
    {"poddisruptionbudgets", "poddisruptionbudgets", "policy", false},
    {"roles", "roles", "rbac.authorization.k8s.io", false},
    {"rolebindings", "rolebindings", "rbac.authorization.k8s.io", false},
    {"clusterroles", "clusterroles", "rbac.authorization.k8s.io", true},
    {"clusterrolebindings", "clusterrolebindings", "rbac.authorization.k8s.io", true},
    {"storageclasses", "storageclasses", "storage.k8s.io", true},
    {"volumeattachments", "volumeattachments", "storage.k8s.io", true},
    {"csinodes", "csinodes", "storage.k8s.io", true},
    {"csidrivers", "csidrivers", "storage.k8s.io", true},
    {"csistoragecapacities", "csistoragecapacities", "storage.k8s.io", false},
    {"priorityclasses", "priorityclasses", "scheduling.k8s.io", true},
    {"runtimeclasses", "runtimeclasses", "node.k8s.io", true},
    {"certificatesigningrequests", "certificatesigningrequests", "certificates.k8s.io", true},
    {"flowschemas", "flowschemas", "flowcontrol.apiserver.k8s.io", true},
    {"prioritylevelconfigurations", "prioritylevelconfigurations", "flowcontrol.apiserver.k8s.io", true},
    {"mutatingwebhookconfigurations", "mutatingwebhookconfigurations", "admissionregistration.k8s.io", true},
    {"validatingwebhookconfigurations", "validatingwebhookconfigurations", "admissionregistration.k8s.io", true},
    {"validatingadmissionpolicies", "validatingadmissionpolicies", "admissionregistration.k8s.io", true},
    {"validatingadmissionpolicybindings", "validatingadmissionpolicybindings", "admissionregistration.k8s.io", true},
    {"storageversions", "storageversions", "internal.apiserver.k8s.io", true},
};

std::vector<std::string_view> Split(std::string_view s) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (start <= s.size()) {
    size_t slash = s.find('/', start);
    if (slash == std::string_view::npos) slash = s.size();
    parts.push_back(s.substr(start, slash - start));
    start = slash + 1;
  }
  return parts;
}

// The prefix a range covers: range end = prefix with its last byte plus one (clientv3's
// WithPrefix); "" when the range is not a prefix range.
std::string PrefixOfRange(std::string_view key, std::string_view range_end) {
  if (range_end.empty()) return "";
  std::string prefix(range_end);
  if (static_cast<unsigned char>(prefix.back()) == 0) return "";  // "\0": from key on
  prefix.back() = static_cast<char>(prefix.back() - 1);
  if (key.substr(0, prefix.size()) != prefix) return "";
  return prefix;
}

}  // namespace

EtcdKey DecodeEtcdKey(std::string_view key, std::string_view range_end, bool truncated,
                      std::string_view registry_prefix) {
  EtcdKey out;
  std::string prefix_range = PrefixOfRange(key, range_end);
  out.prefix = !prefix_range.empty() || (!range_end.empty() && !truncated && range_end != key);
  // What the key names: the prefix of a prefix range (a LIST, or its later page), else the key.
  std::string_view subject = prefix_range.empty() ? key : std::string_view(prefix_range);
  std::string root = std::string(registry_prefix) + "/";
  if (subject.substr(0, root.size()) != root) return out;
  out.registry = true;
  std::string_view rest = subject.substr(root.size());
  std::vector<std::string_view> parts = Split(rest);
  // A prefix ends in '/': its last part is empty, and names nothing.
  bool open_end = !parts.empty() && parts.back().empty();
  if (open_end) parts.pop_back();
  if (parts.empty() || parts[0].empty()) return out;

  size_t used = 1;
  bool cluster_scoped = false;
  bool known = false;
  if (parts[0].find('.') != std::string_view::npos) {
    // <group>/<resource>: custom resources, apiextensions' CRDs, the aggregator's APIServices.
    if (parts.size() < 2) return out;
    out.group = parts[0];
    out.resource = parts[1];
    used = 2;
    known = out.group == "apiextensions.k8s.io" || out.group == "apiregistration.k8s.io";
    cluster_scoped = known;
  } else {
    // A built-in's prefix matches whole parts of the key: "services/specs" in
    // "services/specs/default/kubernetes", never "services/specsX".
    for (const BuiltIn& b : kBuiltIns) {
      if (!rest.starts_with(b.prefix) ||
          (rest.size() > b.prefix.size() && rest[b.prefix.size()] != '/')) {
        continue;
      }
      out.resource = b.resource;
      out.group = b.group;
      cluster_scoped = b.cluster_scoped;
      used = 1 + static_cast<size_t>(std::count(b.prefix.begin(), b.prefix.end(), '/'));
      known = true;
      break;
    }
    if (!known) out.resource = parts[0];
  }
  out.key_prefix = root;
  for (size_t i = 0; i < used; ++i) out.key_prefix.append(parts[i]).append("/");
  std::vector<std::string_view> tail(parts.begin() + used, parts.end());
  if (truncated && !open_end && !tail.empty()) tail.pop_back();  // its last part may be cut
  if (out.prefix) {
    // A prefix names a namespace at most: "<resource>/<namespace>/". A later page's key
    // (after its prefix) is not part of the subject.
    if (!cluster_scoped && !tail.empty()) out.namespace_ = tail[0];
    return out;
  }
  if (truncated) return out;
  if (cluster_scoped || (!known && tail.size() == 1)) {
    if (tail.size() == 1) out.name = tail[0];
  } else if (tail.size() == 2) {
    out.namespace_ = tail[0];
    out.name = tail[1];
  } else if (tail.size() == 1 && open_end) {
    out.namespace_ = tail[0];
  }
  return out;
}

std::string EtcdResourceLabel(const EtcdKey& key) {
  if (!key.registry || key.resource.empty()) return "other";
  // Anyone with etcd credentials writes any key: what could not be an API resource (not even
  // UTF-8, which fails a Prometheus scrape) is "other".
  MetricLabels api;  // the labels a request for it would have
  api.group = key.group;
  api.version = "v1";
  api.resource = key.resource;
  if (!CouldBeServedApi(api)) return "other";
  // As kube-apiserver's storage names its group-resource (schema.GroupResource.String()).
  return key.group.empty() ? key.resource : key.resource + "." + key.group;
}

}  // namespace stormwatch
