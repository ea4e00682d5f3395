// Object facts from a Kubernetes protobuf body (`application/vnd.kubernetes.protobuf`): the
// "k8s\0" envelope, runtime.Unknown, the object's ObjectMeta, decoded by libprotobuf with the
// classes protoc generates from Kubernetes' own .proto files (proto/k8s.io). Same facts, same
// rules for a prefix cut off anywhere as the JSON reader (agent/kube/object_facts.h). Pure.
#pragma once

#include <string_view>

#include "agent/core/request_record.h"
#include "agent/kube/object_facts.h"

namespace stormwatch {

inline constexpr std::string_view kKubernetesProtobufMagic{"k8s\0", 4};

bool IsKubernetesProtobuf(std::string_view body);

// Fills object_seen, generation, deletion_timestamp, finalizers, finalizers_seen and
// resource_version of `facts` where the body establishes them; the caller has reset them.
BodyFactsResult ParseProtobufObjectFacts(std::string_view body_prefix, ResponseFacts* facts);

}  // namespace stormwatch
