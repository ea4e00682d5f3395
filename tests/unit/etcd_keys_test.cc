// etcd keys in kube-apiserver's /registry layout: table tests, including the keys of a later
// LIST page, truncated keys, and input that is not a Kubernetes key at all.
#include "agent/kube/etcd_keys.h"

#include <gtest/gtest.h>

#include <string>

namespace stormwatch {
namespace {

struct KeyCase {
  const char* name;
  std::string key, range_end;
  bool truncated;
  bool registry, prefix;
  const char* group;
  const char* resource;
  const char* ns;
  const char* object;
  const char* label;
  const char* key_prefix;
};

class EtcdKeys : public ::testing::TestWithParam<KeyCase> {};

TEST_P(EtcdKeys, DecodeAsKubeApiserverStoresThem) {
  const KeyCase& c = GetParam();
  EtcdKey k = DecodeEtcdKey(c.key, c.range_end, c.truncated);
  EXPECT_EQ(k.registry, c.registry);
  EXPECT_EQ(k.prefix, c.prefix);
  EXPECT_EQ(k.group, c.group);
  EXPECT_EQ(k.resource, c.resource);
  EXPECT_EQ(k.namespace_, c.ns);
  EXPECT_EQ(k.name, c.object);
  EXPECT_EQ(EtcdResourceLabel(k), c.label);
  EXPECT_EQ(k.key_prefix, c.key_prefix);
}

INSTANTIATE_TEST_SUITE_P(
    Table, EtcdKeys,
    ::testing::Values(
        KeyCase{"pod", "/registry/pods/default/web-0", "", false, true, false, "", "pods", "default", "web-0", "pods", "/registry/pods/"},
        // Anyone with etcd credentials writes any key: no label that is not an API name.
        KeyCase{"not_a_resource_name", "/registry/Junk\xff/ns/x", "", false, true, false, "", "Junk\xff", "ns", "x", "other", "/registry/Junk\xff/"},
        KeyCase{"all_pods", "/registry/pods/", "/registry/pods0", false, true, true, "", "pods", "", "", "pods", "/registry/pods/"},
        KeyCase{"pods_in_ns", "/registry/pods/kube-system/", "/registry/pods/kube-system0", false, true, true, "", "pods", "kube-system", "", "pods", "/registry/pods/"},
        // A later page: the key is just after the last one read, the range end the prefix's.
        KeyCase{"later_page", std::string("/registry/pods/default/web-4\0", 29), "/registry/pods0", false, true, true, "", "pods", "", "", "pods", "/registry/pods/"},
        KeyCase{"node", "/registry/minions/node-1", "", false, true, false, "", "nodes", "", "node-1", "nodes", "/registry/minions/"},
        KeyCase{"service", "/registry/services/specs/default/kubernetes", "", false, true, false, "", "services", "default", "kubernetes", "services", "/registry/services/specs/"},
        KeyCase{"endpoints", "/registry/services/endpoints/default/kubernetes", "", false, true, false, "", "endpoints", "default", "kubernetes", "endpoints", "/registry/services/endpoints/"},
        KeyCase{"deployment", "/registry/deployments/prod/api", "", false, true, false, "apps", "deployments", "prod", "api", "deployments.apps", "/registry/deployments/"},
        KeyCase{"lease", "/registry/leases/kube-node-lease/node-1", "", false, true, false, "coordination.k8s.io", "leases", "kube-node-lease", "node-1", "leases.coordination.k8s.io", "/registry/leases/"},
        KeyCase{"namespace", "/registry/namespaces/default", "", false, true, false, "", "namespaces", "", "default", "namespaces", "/registry/namespaces/"},
        KeyCase{"clusterrole", "/registry/clusterroles/admin", "", false, true, false, "rbac.authorization.k8s.io", "clusterroles", "", "admin", "clusterroles.rbac.authorization.k8s.io", "/registry/clusterroles/"},
        KeyCase{"custom_resource", "/registry/example.com/widgets/ns1/w1", "", false, true, false, "example.com", "widgets", "ns1", "w1", "widgets.example.com", "/registry/example.com/widgets/"},
        KeyCase{"custom_list", "/registry/example.com/widgets/", "/registry/example.com/widgets0", false, true, true, "example.com", "widgets", "", "", "widgets.example.com", "/registry/example.com/widgets/"},
        KeyCase{"crd", "/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.example.com", "", false, true, false, "apiextensions.k8s.io", "customresourcedefinitions", "", "widgets.example.com", "customresourcedefinitions.apiextensions.k8s.io", "/registry/apiextensions.k8s.io/customresourcedefinitions/"},
        KeyCase{"apiservice", "/registry/apiregistration.k8s.io/apiservices/v1.apps", "", false, true, false, "apiregistration.k8s.io", "apiservices", "", "v1.apps", "apiservices.apiregistration.k8s.io", "/registry/apiregistration.k8s.io/apiservices/"},
        KeyCase{"unknown_builtin", "/registry/widgetz/ns/x", "", false, true, false, "", "widgetz", "ns", "x", "widgetz", "/registry/widgetz/"},
        // A truncated key: the resource and namespace are known, the name is not.
        KeyCase{"truncated", "/registry/configmaps/default/very-long-na", "", true, true, false, "", "configmaps", "", "", "configmaps", "/registry/configmaps/"},
        // Not Kubernetes: another prefix, a bare /registry, garbage, from-key ranges.
        KeyCase{"health", "health", "", false, false, false, "", "", "", "", "other", ""},
        KeyCase{"other_prefix", "/other/pods/a/b", "", false, false, false, "", "", "", "", "other", ""},
        KeyCase{"bare_registry", "/registry/", "", false, true, false, "", "", "", "", "other", ""},
        KeyCase{"registry_no_slash", "/registry", "", false, false, false, "", "", "", "", "other", ""},
        KeyCase{"binary", std::string("\xff\x00\x01/registry/pods/", 18), "", false, false, false, "", "", "", "", "other", ""},
        KeyCase{"from_key", "/registry/pods/a/b", std::string("\0", 1), false, true, true, "", "pods", "a", "", "pods", "/registry/pods/"},
        KeyCase{"group_without_resource", "/registry/example.com", "", false, true, false, "", "", "", "", "other", ""},
        KeyCase{"slashes", "/registry//pods//", "", false, true, false, "", "", "", "", "other", ""}),
    [](const ::testing::TestParamInfo<KeyCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace stormwatch
