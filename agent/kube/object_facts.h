// Facts about an object from the first bytes of a response body, JSON or Kubernetes protobuf:
// the capture keeps only a prefix (typically 1-4 KiB) of a write's response, so the body is
// usually cut off, often inside metadata.managedFields. Pure; never throws.
//
// Only members of the top-level "metadata" object that were complete in the prefix are
// trusted (a number at the very end may be cut short: "generation":12 of 123). Whether a
// member is absent or merely cut off is decided by where the prefix stopped, in one of the two
// orders kube-apiserver writes ObjectMeta in:
//   built-in types (Go struct order): name, generateName, namespace, selfLink, uid,
//     resourceVersion, generation, creationTimestamp, deletionTimestamp,
//     deletionGracePeriodSeconds, labels, annotations, ownerReferences, finalizers, managedFields
//   custom resources (unstructured maps, keys sorted): annotations, creationTimestamp, ...
#pragma once

#include <string_view>

#include "agent/core/request_record.h"

namespace stormwatch {


// Label values of stormwatch_response_bodies_total.
std::string_view BodyEncodingName(BodyEncoding e);
std::string_view BodyFactsResultName(BodyFactsResult r);

// Fills the object members of `facts` (object_seen, generation, deletion_timestamp,
// finalizers, finalizers_seen, resource_version) and resets those it could not establish;
// APF members are left alone.
//  - object_seen: an object (not a Status, not a List) whose metadata reached at least the
//    place of deletionTimestamp, so `deletion_timestamp` is a fact either way;
//  - finalizers_seen: metadata reached past finalizers, so an empty list means none.
// A body starting with "k8s\0" is read as Kubernetes protobuf (agent/kube/object_facts_protobuf.h),
// one starting with '{' as JSON; others (CBOR, YAML) are not read.
BodyFacts ParseObjectFacts(std::string_view body_prefix, ResponseFacts* facts);

}  // namespace stormwatch
