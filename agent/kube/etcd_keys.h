// etcd keys in kube-apiserver's terms. kube-apiserver stores every object under
// <prefix>/<resource prefix>/[<namespace>/]<name> (prefix "/registry" unless --etcd-prefix says
// otherwise). The resource prefix is the resource's name for most built-in types, whatever
// their group (deployments: /registry/deployments/...), a few older names (nodes: minions,
// services: services/specs, endpoints: services/endpoints, replicationcontrollers:
// controllers, ingresses: ingress), and <group>/<resource> for custom resources and the
// aggregator's and apiextensions' own types (/registry/example.com/widgets/...,
// /registry/apiregistration.k8s.io/apiservices/...). A LIST reads a prefix: key "<p>/" with
// range end "<p>0" (the prefix's last byte plus one); a later page starts after the last key
// read, with the same range end.
#pragma once

#include <string_view>

#include "agent/core/etcd_request.h"

namespace stormwatch {

// Decodes a Range/Put/DeleteRange/Txn key and its range end ("" for a single key).
// `truncated`: the key was cut (only its start is known): then no name is reported.
EtcdKey DecodeEtcdKey(std::string_view key, std::string_view range_end, bool truncated = false,
                      std::string_view registry_prefix = "/registry");

// The metric label of a decoded key: "pods", "deployments.apps", "widgets.example.com": the
// group-resource as kube-apiserver's etcd_request_duration_seconds labels `type`; "other"
// outside /registry. A built-in whose group is not in the table is named by resource alone.
std::string EtcdResourceLabel(const EtcdKey& key);

}  // namespace stormwatch
