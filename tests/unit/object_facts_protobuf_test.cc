// Object facts from Kubernetes protobuf bodies ("k8s\0" + runtime.Unknown), built here with the
// same generated classes the agent reads them with, cut at every byte: what a prefix reports is
// either unknown or the whole body's fact, never a wrong one, and it becomes known at exactly
// the byte where the member (or a later one) has been read.
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "agent/kube/object_facts.h"
#include "agent/kube/object_facts_protobuf.h"
#include "k8s.io/apimachinery/pkg/apis/meta/v1/generated.pb.h"
#include "k8s.io/apimachinery/pkg/runtime/generated.pb.h"

namespace stormwatch {
namespace {

namespace meta = k8s::io::apimachinery::pkg::apis::meta::v1;
namespace kruntime = k8s::io::apimachinery::pkg::runtime;

meta::ObjectMeta TerminatingPodMeta() {
  meta::ObjectMeta m;
  m.set_name("web-0");
  m.set_namespace_("team-a");
  m.set_uid("4f1c2d3e-0000-4000-8000-000000000001");
  m.set_resourceversion("123456");
  m.set_generation(123);
  m.mutable_creationtimestamp()->set_seconds(1796119200);
  m.mutable_deletiontimestamp()->set_seconds(1796122800);
  m.set_deletiongraceperiodseconds(0);
  (*m.mutable_labels())["app"] = "web";
  (*m.mutable_annotations())["note"] = "a long annotation value that pushes the finalizers further out";
  m.add_finalizers("example.com/cleanup");
  m.add_finalizers("foregroundDeletion");
  meta::ManagedFieldsEntry* mf = m.add_managedfields();
  mf->set_manager("kubectl");
  mf->set_operation("Update");
  mf->set_apiversion("v1");
  mf->set_fieldstype("FieldsV1");
  mf->mutable_fieldsv1()->set_raw(std::string(600, 'f'));
  return m;
}

// An object's message: metadata = 1, then a spec = 2 of `spec_bytes` bytes.
std::string ObjectBytes(const meta::ObjectMeta& m, size_t spec_bytes = 200) {
  meta::PartialObjectMetadata object;  // exactly `ObjectMeta metadata = 1`
  *object.mutable_metadata() = m;
  std::string out = object.SerializeAsString();
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.WriteTag(google::protobuf::internal::WireFormatLite::MakeTag(
      2, google::protobuf::internal::WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
  coded.WriteVarint32(static_cast<uint32_t>(spec_bytes));
  coded.WriteString(std::string(spec_bytes, 's'));
  coded.Trim();
  return out;
}

// The body kube-apiserver's protobuf serializer writes.
std::string Body(const std::string& kind, const std::string& raw) {
  kruntime::Unknown u;
  u.mutable_typemeta()->set_apiversion("v1");
  u.mutable_typemeta()->set_kind(kind);
  u.set_raw(raw);
  u.set_contentencoding("");
  u.set_contenttype("");
  return std::string(kKubernetesProtobufMagic) + u.SerializeAsString();
}

// Where, in `body`, the metadata's serialization up to and including field `last` ends.
size_t EndOfMembersUpTo(const std::string& body, const meta::ObjectMeta& m, int last) {
  const std::string whole = m.SerializeAsString();
  const size_t at = body.find(whole);
  EXPECT_NE(at, std::string::npos);
  meta::ObjectMeta upto = m;
  const google::protobuf::Descriptor* d = upto.GetDescriptor();
  const google::protobuf::Reflection* r = upto.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    if (d->field(i)->number() > last) r->ClearField(&upto, d->field(i));
  }
  return at + upto.SerializeAsString().size();
}

struct Read {
  BodyFacts body;
  ResponseFacts facts;
};

Read Parse(std::string_view body) {
  Read r;
  r.body = ParseObjectFacts(body, &r.facts);
  return r;
}

const std::vector<std::string> kFinalizers = {"example.com/cleanup", "foregroundDeletion"};

TEST(ObjectFactsProtobufTest, WholeBodyGivesTheFactsJsonGives) {
  const Read r = Parse(Body("Pod", ObjectBytes(TerminatingPodMeta())));
  EXPECT_EQ(r.body.encoding, BodyEncoding::kProtobuf);
  EXPECT_EQ(r.body.result, BodyFactsResult::kObject);
  EXPECT_TRUE(r.facts.object_seen);
  EXPECT_EQ(r.facts.generation, 123);
  EXPECT_TRUE(r.facts.deletion_timestamp);
  EXPECT_TRUE(r.facts.finalizers_seen);
  EXPECT_EQ(r.facts.finalizers, kFinalizers);
  EXPECT_EQ(r.facts.resource_version, "123456");
}

// Every prefix of a terminating object: unknown until the deletionTimestamp is read whole, then
// exactly the whole body's facts, with the finalizers known once a member after them is read.
TEST(ObjectFactsProtobufTest, EveryCutOfATerminatingObject) {
  const meta::ObjectMeta m = TerminatingPodMeta();
  const std::string body = Body("Pod", ObjectBytes(m));
  const size_t deletion_read = EndOfMembersUpTo(body, m, meta::ObjectMeta::kDeletionTimestampFieldNumber);
  const size_t finalizers_read = EndOfMembersUpTo(body, m, meta::ObjectMeta::kFinalizersFieldNumber);
  ASSERT_LT(deletion_read, finalizers_read);
  ASSERT_LT(finalizers_read + 100, body.size());
  size_t objects = 0;
  for (size_t n = 0; n <= body.size(); ++n) {
    const Read r = Parse(std::string_view(body).substr(0, n));
    SCOPED_TRACE(n);
    EXPECT_EQ(r.facts.object_seen, n >= deletion_read);
    EXPECT_EQ(r.body.result == BodyFactsResult::kObject, n >= deletion_read);
    if (n >= kKubernetesProtobufMagic.size() && n < deletion_read) {
      EXPECT_EQ(r.body.result, BodyFactsResult::kPartial);
    }
    if (!r.facts.object_seen) {
      EXPECT_EQ(r.facts.generation, -1);
      EXPECT_FALSE(r.facts.finalizers_seen);
      continue;
    }
    ++objects;
    EXPECT_TRUE(r.facts.deletion_timestamp);
    EXPECT_EQ(r.facts.generation, 123);
    EXPECT_EQ(r.facts.resource_version, "123456");
    // Known once the tag of managedFields (17, after 14) is read: two bytes (17 << 3 | 2 = 138
    // is a two-byte varint) past the finalizers.
    EXPECT_EQ(r.facts.finalizers_seen, n >= finalizers_read + 2);
    EXPECT_EQ(r.facts.finalizers, r.facts.finalizers_seen ? kFinalizers : std::vector<std::string>{});
  }
  EXPECT_EQ(objects, body.size() - deletion_read + 1);
}

// Not terminating: "no deletionTimestamp" is a fact once a later member's tag is read.
TEST(ObjectFactsProtobufTest, EveryCutOfALiveObject) {
  meta::ObjectMeta m = TerminatingPodMeta();
  m.clear_deletiontimestamp();
  m.clear_deletiongraceperiodseconds();
  const std::string body = Body("Pod", ObjectBytes(m));
  const size_t before_labels = EndOfMembersUpTo(body, m, meta::ObjectMeta::kDeletionTimestampFieldNumber);
  for (size_t n = 0; n <= body.size(); ++n) {
    const Read r = Parse(std::string_view(body).substr(0, n));
    SCOPED_TRACE(n);
    EXPECT_EQ(r.facts.object_seen, n > before_labels);  // labels' tag (11) read
    EXPECT_FALSE(r.facts.deletion_timestamp);
    if (r.facts.object_seen) {
      EXPECT_EQ(r.facts.generation, 123);
    }
  }
}

TEST(ObjectFactsProtobufTest, GenerationZeroIsAbsentAsInJson) {
  meta::ObjectMeta m = TerminatingPodMeta();
  m.set_generation(0);  // Go always writes it; JSON omits it
  const Read r = Parse(Body("ConfigMap", ObjectBytes(m)));
  EXPECT_TRUE(r.facts.object_seen);
  EXPECT_EQ(r.facts.generation, -1);
}

TEST(ObjectFactsProtobufTest, ListsAndStatusAreNotObjects) {
  for (const char* kind : {"Status", "PodList", "CustomResourceDefinitionList"}) {
    const Read r = Parse(Body(kind, ObjectBytes(TerminatingPodMeta())));
    EXPECT_EQ(r.body.result, BodyFactsResult::kNotObject) << kind;
    EXPECT_FALSE(r.facts.object_seen) << kind;
    EXPECT_FALSE(r.facts.deletion_timestamp) << kind;
  }
}

// Members out of field-number order (no Go encoder writes them so): a cut one proves nothing
// about absent members; a whole metadata still does.
TEST(ObjectFactsProtobufTest, OutOfOrderMembersOnlyCountWhenWhole) {
  meta::ObjectMeta late;  // finalizers, then generation and a long name after them
  late.add_finalizers("example.com/cleanup");
  meta::ObjectMeta early;
  early.set_generation(4);
  early.set_name(std::string(300, 'n'));
  const std::string metadata = late.SerializeAsString() + early.SerializeAsString();
  std::string raw;
  {
    google::protobuf::io::StringOutputStream stream(&raw);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.WriteTag(google::protobuf::internal::WireFormatLite::MakeTag(
        1, google::protobuf::internal::WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
    coded.WriteVarint32(static_cast<uint32_t>(metadata.size()));
    coded.WriteString(metadata);
  }
  const std::string body = Body("Pod", raw);
  const Read whole = Parse(body);
  EXPECT_TRUE(whole.facts.object_seen);
  EXPECT_EQ(whole.facts.generation, 4);
  EXPECT_EQ(whole.facts.finalizers, std::vector<std::string>{"example.com/cleanup"});
  const Read cut = Parse(std::string_view(body).substr(0, body.size() - 10));
  EXPECT_FALSE(cut.facts.object_seen);
  EXPECT_EQ(cut.body.result, BodyFactsResult::kPartial);
}

// Hostile bytes after the magic: never a crash, never half-filled facts.
TEST(ObjectFactsProtobufTest, GarbageIsUnreadableAndResetsEverything) {
  const std::string good = Body("Pod", ObjectBytes(TerminatingPodMeta()));
  std::vector<std::string> bodies = {
      std::string(kKubernetesProtobufMagic),
      std::string(kKubernetesProtobufMagic) + std::string("\x00\x00\x00", 3),
      std::string(kKubernetesProtobufMagic) + "\x0b\x0c",  // a group: no Kubernetes message has one
      std::string(kKubernetesProtobufMagic) + "\x0a\xff\xff\xff\xff\x0f",  // typeMeta longer than 4 GiB
      std::string(kKubernetesProtobufMagic) + "\x12\x02\x0a\x7f",  // raw before typeMeta: no kind
  };
  for (size_t i = 0; i + 8 < good.size(); i += 7) {  // one flipped byte at a time
    std::string b = good;
    b[i + 4] = static_cast<char>(b[i + 4] ^ 0xa5);
    bodies.push_back(b);
  }
  size_t unreadable = 0;
  for (const std::string& body : bodies) {
    ResponseFacts f;
    f.object_seen = true;
    f.generation = 9;
    f.finalizers = {"stale"};
    f.priority_level = "exempt";
    const BodyFacts b = ParseObjectFacts(body, &f);
    EXPECT_EQ(b.encoding, BodyEncoding::kProtobuf);
    EXPECT_EQ(f.priority_level, "exempt");
    if (b.result != BodyFactsResult::kObject) {
      EXPECT_FALSE(f.object_seen);
      EXPECT_EQ(f.generation, -1);
      EXPECT_TRUE(f.finalizers.empty());
    }
    unreadable += b.result == BodyFactsResult::kUnreadable;
  }
  EXPECT_GE(unreadable, 5u);
}

TEST(ObjectFactsProtobufTest, EncodingsAndResultsOfJsonAndOthers) {
  EXPECT_EQ(Parse(R"({"kind":"Pod","metadata":{"name":"a","resourceVersion":"1"}})").body.result,
            BodyFactsResult::kObject);
  EXPECT_EQ(Parse(R"({"kind":"PodList","metadata":{},"items":[]})").body.result,
            BodyFactsResult::kNotObject);
  EXPECT_EQ(Parse(R"({"kind":"Pod","metadata":{"name":"a",)").body.result, BodyFactsResult::kPartial);
  EXPECT_EQ(Parse(R"({"kind":"Pod","metadata":{"name":"a",)").body.encoding, BodyEncoding::kJson);
  const Read cbor = Parse("\xd9\xd9\xf7\xa1");  // self-described CBOR (Kubernetes 1.32+)
  EXPECT_EQ(cbor.body.encoding, BodyEncoding::kOther);
  EXPECT_EQ(cbor.body.result, BodyFactsResult::kUnreadable);
  EXPECT_EQ(BodyEncodingName(BodyEncoding::kProtobuf), "protobuf");
  EXPECT_EQ(BodyFactsResultName(BodyFactsResult::kNotObject), "not_object");
}

}  // namespace
}  // namespace stormwatch
