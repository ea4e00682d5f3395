// Object facts from a cut-off response body: only what the prefix proves is reported.
#include "agent/kube/object_facts.h"

#include <gtest/gtest.h>

#include "tests/unit/allocation_count.h"

#include <string>
#include <vector>

namespace stormwatch {
namespace {

// A built-in type as kube-apiserver writes it: ObjectMeta in Go struct order.
const std::string kTypedPod =
    R"({"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-0","namespace":"team-a",)"
    R"("uid":"4f1c2d3e-0000-4000-8000-000000000001","resourceVersion":"123456","generation":123,)"
    R"("creationTimestamp":"2026-11-29T10:00:00Z","deletionTimestamp":"2026-11-29T11:00:00Z",)"
    R"("deletionGracePeriodSeconds":0,"labels":{"app":"web"},)"
    R"("annotations":{"note":"a long annotation value that pushes the finalizers further out"},)"
    R"("finalizers":["example.com/cleanup","foregroundDeletion"],)"
    R"("managedFields":[{"manager":"kubectl","operation":"Update","apiVersion":"v1",)"
    R"("time":"2026-11-29T10:00:00Z","fieldsType":"FieldsV1",)"
    R"("fieldsV1":{"f:metadata":{"f:finalizers":{".":{},"v:\"example.com/cleanup\"":{}}}}}]},)"
    R"("spec":{"containers":[{"name":"web","image":"nginx"}]},"status":{"phase":"Running"}})";

// A custom resource: an unstructured map, so its keys come out sorted.
const std::string kSortedDataJob =
    R"({"apiVersion":"batch.company.com/v1","kind":"DataJob","metadata":{)"
    R"("annotations":{"company.com/lastSyncTime":"2026-11-29T10:59:59Z"},)"
    R"("creationTimestamp":"2026-11-29T10:00:00Z","deletionGracePeriodSeconds":0,)"
    R"("deletionTimestamp":"2026-11-29T11:00:00Z","finalizers":["datajobs.company.com/cleanup"],)"
    R"("generation":7,"managedFields":[{"manager":"datajob-operator","operation":"Update",)"
    R"("apiVersion":"batch.company.com/v1","fieldsType":"FieldsV1","fieldsV1":{}}],)"
    R"("name":"job-1","namespace":"team-a","resourceVersion":"987",)"
    R"("uid":"4f1c2d3e-0000-4000-8000-000000000002"},"spec":{"schedule":"* * * * *"}})";

// The prefix of `full` up to (not including) the first `marker`, plus `extra` bytes.
std::string CutAt(const std::string& full, const std::string& marker, size_t extra = 0) {
  size_t at = full.find(marker);
  EXPECT_NE(at, std::string::npos) << marker;
  return full.substr(0, at + extra);
}

ResponseFacts Parse(const std::string& body) {
  ResponseFacts f;
  ParseObjectFacts(body, &f);
  return f;
}

const std::vector<std::string> kPodFinalizers = {"example.com/cleanup", "foregroundDeletion"};

TEST(ObjectFactsTest, TypedObjectInFull) {
  ResponseFacts f = Parse(kTypedPod);
  EXPECT_TRUE(f.object_seen);
  EXPECT_EQ(f.generation, 123);
  EXPECT_TRUE(f.deletion_timestamp);
  EXPECT_TRUE(f.finalizers_seen);
  EXPECT_EQ(f.finalizers, kPodFinalizers);
  EXPECT_EQ(f.resource_version, "123456");
}

TEST(ObjectFactsTest, SortedCustomResourceInFull) {
  ResponseFacts f = Parse(kSortedDataJob);
  EXPECT_TRUE(f.object_seen);
  EXPECT_EQ(f.generation, 7);
  EXPECT_TRUE(f.deletion_timestamp);
  EXPECT_TRUE(f.finalizers_seen);
  EXPECT_EQ(f.finalizers, std::vector<std::string>{"datajobs.company.com/cleanup"});
  EXPECT_EQ(f.resource_version, "987");
}

TEST(ObjectFactsTest, TypedCutInsideManagedFields) {
  ResponseFacts f = Parse(CutAt(kTypedPod, "\"fieldsType\"", 5));
  EXPECT_TRUE(f.object_seen);
  EXPECT_EQ(f.generation, 123);
  EXPECT_TRUE(f.deletion_timestamp);
  EXPECT_TRUE(f.finalizers_seen);
  EXPECT_EQ(f.finalizers, kPodFinalizers);
  EXPECT_EQ(f.resource_version, "123456");
}

TEST(ObjectFactsTest, SortedCutInsideManagedFieldsKnowsFinalizersNotResourceVersion) {
  ResponseFacts f = Parse(CutAt(kSortedDataJob, "\"fieldsType\"", 3));
  EXPECT_TRUE(f.object_seen);
  EXPECT_EQ(f.generation, 7);
  EXPECT_TRUE(f.deletion_timestamp);
  EXPECT_TRUE(f.finalizers_seen);
  EXPECT_EQ(f.finalizers, std::vector<std::string>{"datajobs.company.com/cleanup"});
  EXPECT_EQ(f.resource_version, "");  // sorted after managedFields: never reached
}

TEST(ObjectFactsTest, TypedCutBeforeFinalizersLeavesThemUnknown) {
  ResponseFacts f = Parse(CutAt(kTypedPod, "a long annotation", 6));
  EXPECT_TRUE(f.object_seen);  // annotations come after deletionTimestamp
  EXPECT_TRUE(f.deletion_timestamp);
  EXPECT_FALSE(f.finalizers_seen);
  EXPECT_TRUE(f.finalizers.empty());
  EXPECT_EQ(f.generation, 123);
}

TEST(ObjectFactsTest, CutInsideTheFinalizersArrayLeavesThemUnknown) {
  ResponseFacts f = Parse(CutAt(kTypedPod, "\"foregroundDeletion\"", 4));
  EXPECT_TRUE(f.object_seen);
  EXPECT_FALSE(f.finalizers_seen);
  EXPECT_TRUE(f.finalizers.empty());  // one of two read: not a fact
}

TEST(ObjectFactsTest, TypedCutBeforeDeletionTimestampClaimsNoObject) {
  ResponseFacts f = Parse(CutAt(kTypedPod, "\"creationTimestamp\"", 25));
  EXPECT_FALSE(f.object_seen);
  EXPECT_FALSE(f.deletion_timestamp);
  EXPECT_FALSE(f.finalizers_seen);
  EXPECT_EQ(f.generation, 123);  // complete: a later member started
  EXPECT_EQ(f.resource_version, "123456");
}

TEST(ObjectFactsTest, SortedCutInsideAnnotationsClaimsNothing) {
  ResponseFacts f = Parse(CutAt(kSortedDataJob, "lastSyncTime", 4));
  EXPECT_FALSE(f.object_seen);
  EXPECT_FALSE(f.finalizers_seen);
  EXPECT_EQ(f.generation, -1);
}

TEST(ObjectFactsTest, NumberAtTheCutIsNotTrusted) {
  // "generation":123 cut after "12": the lexer would happily report 12.
  ResponseFacts cut = Parse(CutAt(kTypedPod, "3,\"creationTimestamp\""));
  EXPECT_EQ(cut.generation, -1);
  // Complete once the next member's name has been read.
  ResponseFacts whole = Parse(CutAt(kTypedPod, "\"creationTimestamp\"", 19));
  EXPECT_EQ(whole.generation, 123);
  EXPECT_FALSE(whole.object_seen);
}

TEST(ObjectFactsTest, ObjectWithoutDeletionOrFinalizers) {
  const std::string body =
      R"({"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm","namespace":"a",)"
      R"("uid":"u","resourceVersion":"42","creationTimestamp":"2026-11-29T10:00:00Z"},)"
      R"("data":{"k":"v"}})";
  ResponseFacts f = Parse(body);
  EXPECT_TRUE(f.object_seen);
  EXPECT_FALSE(f.deletion_timestamp);
  EXPECT_TRUE(f.finalizers_seen);
  EXPECT_TRUE(f.finalizers.empty());
  EXPECT_EQ(f.generation, -1);
  EXPECT_EQ(f.resource_version, "42");
}

TEST(ObjectFactsTest, NestedMetadataIsNotTheObjects) {
  const std::string body =
      R"({"kind":"Deployment","apiVersion":"apps/v1","spec":{"template":{"metadata":)"
      R"({"name":"x","deletionTimestamp":"t","finalizers":["nested"]}}},)"
      R"("metadata":{"name":"d","namespace":"a","resourceVersion":"9","generation":2,)"
      R"("labels":{"finalizers":"no"}}})";
  ResponseFacts f = Parse(body);
  EXPECT_TRUE(f.object_seen);
  EXPECT_FALSE(f.deletion_timestamp);
  EXPECT_TRUE(f.finalizers.empty());
  EXPECT_TRUE(f.finalizers_seen);
  EXPECT_EQ(f.generation, 2);
  EXPECT_EQ(f.resource_version, "9");
}

TEST(ObjectFactsTest, StatusObjectsAreNotObjects) {
  for (const std::string& body : {
           std::string(R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",)"
                       R"("message":"pods \"web-0\" not found","reason":"NotFound","code":404})"),
           std::string(R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success",)"
                       R"("details":{"name":"web-0","kind":"pods","uid":"u"}})"),
           std::string(R"({"kind":"Status","apiVersion":"v1","metadata":{"resourceVersion":"5"},)"
                       R"("status":"Failure","reason":"Conflict","code":409})"),
       }) {
    ResponseFacts f = Parse(body);
    EXPECT_FALSE(f.object_seen) << body;
    EXPECT_FALSE(f.finalizers_seen) << body;
    EXPECT_EQ(f.resource_version, "") << body;
  }
}

TEST(ObjectFactsTest, ListsAreNotObjects) {
  ResponseFacts f = Parse(
      R"({"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[]})");
  EXPECT_FALSE(f.object_seen);
  EXPECT_FALSE(f.finalizers_seen);
}

TEST(ObjectFactsTest, GarbageAndEmptyResetEverythingButApf) {
  for (const std::string& body :
       {std::string(""), std::string("not json"), std::string("\x00\xff\xfe", 3),
        std::string("[1,2,3]"), std::string(R"({"metadata":5})"), std::string("{"),
        std::string("null"), std::string(R"({"kind":"Pod","metadata":{"name":"x",)")}) {
    ResponseFacts f;
    f.priority_level = "exempt";
    f.retry_after_s = 3;
    f.object_seen = true;
    f.generation = 9;
    f.deletion_timestamp = true;
    f.finalizers = {"stale"};
    f.finalizers_seen = true;
    f.resource_version = "1";
    ParseObjectFacts(body, &f);
    EXPECT_FALSE(f.object_seen) << body;
    EXPECT_EQ(f.generation, -1) << body;
    EXPECT_FALSE(f.deletion_timestamp) << body;
    EXPECT_TRUE(f.finalizers.empty()) << body;
    EXPECT_FALSE(f.finalizers_seen) << body;
    EXPECT_EQ(f.resource_version, "") << body;
    EXPECT_EQ(f.priority_level, "exempt");
    EXPECT_EQ(f.retry_after_s, 3);
  }
}

// The reader is the thread's, reused: once it has read a body, another of the same shape
// allocates nothing (the API server's answers to writes are read on every one of them), however
// long the finalizer names: the facts keep their strings' buffers as spares.
TEST(ObjectFactsTest, ABodyAllocatesNothingOnceTheReaderIsWarm) {
  const std::string typed = CutAt(kTypedPod, R"("finalizers")") +
                            R"("finalizers":["kubernetes"],"managedFields":[)";
  const std::string sorted =
      CutAt(kSortedDataJob, R"("finalizers")") +
      R"("finalizers":["batch.example.com/datajob-cleanup"],"generation":7,"managedFields":[)";
  ResponseFacts f;
  ParseObjectFacts(typed, &f);
  ParseObjectFacts(sorted, &f);
  EXPECT_EQ(stormwatch::testing::AllocationsDuring([&] {
              ParseObjectFacts(typed, &f);
              ParseObjectFacts(sorted, &f);
            }),
            0u);
  EXPECT_TRUE(f.object_seen);
  EXPECT_EQ(f.generation, 7);
  EXPECT_EQ(f.finalizers, std::vector<std::string>{"batch.example.com/datajob-cleanup"});
  ParseObjectFacts(typed, &f);
  EXPECT_EQ(f.generation, 123);
  EXPECT_EQ(f.resource_version, "123456");
  EXPECT_EQ(f.finalizers, std::vector<std::string>{"kubernetes"});
}

// A hostile body nests as deep as its bytes allow: the read ends at 128 levels (the reader
// recurses, so nesting is capped, not followed), and what came before the nesting is kept.
TEST(ObjectFactsTest, DeepNestingEndsTheReadAtTheCap) {
  const std::string head = CutAt(kTypedPod, R"("labels")") + R"("labels":)";
  for (const std::string& open : {std::string("["), std::string(R"({"a":)")}) {
    std::string body = head;
    for (int i = 0; i < 200000; ++i) body += open;
    ResponseFacts f;
    EXPECT_EQ(ParseObjectFacts(body, &f).result, BodyFactsResult::kObject);
    EXPECT_EQ(f.generation, 123);
    EXPECT_TRUE(f.deletion_timestamp);
    EXPECT_FALSE(f.finalizers_seen);
  }
}

// Real nesting is read through up to the cap: a custom resource's managedFields (sorted before
// resourceVersion) as deep as 128 levels in all still lets resourceVersion be read; one level
// more ends the read inside managedFields, where it stands (generation read, the version not).
TEST(ObjectFactsTest, NestingUpToTheCapIsReadThrough) {
  auto body_nested = [](int levels) {
    // Depths: the object 1, metadata 2, managedFields 3, its entry 4, fieldsV1 5 and on (the
    // innermost {} at `levels`).
    std::string fields;
    for (int i = 0; i < levels - 5; ++i) fields += R"({"f:spec":)";
    fields += "{}";
    for (int i = 0; i < levels - 5; ++i) fields += "}";
    return R"({"apiVersion":"example.com/v1","kind":"Widget","metadata":{"generation":3,)"
           R"("managedFields":[{"fieldsV1":)" + fields + R"(}],"name":"w","resourceVersion":"77"},)"
           R"("spec":{}})";
  };
  ResponseFacts f;
  EXPECT_EQ(ParseObjectFacts(body_nested(128), &f).result, BodyFactsResult::kObject);
  EXPECT_EQ(f.resource_version, "77");
  EXPECT_EQ(f.generation, 3);

  EXPECT_EQ(ParseObjectFacts(body_nested(129), &f).result, BodyFactsResult::kObject);
  EXPECT_EQ(f.resource_version, "");
  EXPECT_EQ(f.generation, 3);
}

// A finalizer that is not UTF-8 (it would become a label value) ends the read there: the list
// is not known, and what came before is.
TEST(ObjectFactsTest, FinalizersThatAreNotUtf8AreNotKnown) {
  const std::string body = CutAt(kTypedPod, R"("finalizers")") +
                           "\"finalizers\":[\"ok\",\"bad\xff\"],\"managedFields\":[]}}";
  ResponseFacts f;
  EXPECT_EQ(ParseObjectFacts(body, &f).result, BodyFactsResult::kObject);
  EXPECT_EQ(f.resource_version, "123456");
  EXPECT_FALSE(f.finalizers_seen);
  EXPECT_TRUE(f.finalizers.empty());

  // Nor is a resourceVersion that is not UTF-8, nor anything after it.
  std::string bad_version = kTypedPod;
  bad_version.replace(bad_version.find("123456"), 6, "12\xc0\xaf");  // an overlong '/'
  EXPECT_EQ(ParseObjectFacts(bad_version, &f).result, BodyFactsResult::kPartial);
  EXPECT_EQ(f.resource_version, "");
  EXPECT_EQ(f.generation, -1);
}

// Strings of every length up to 40 starting at every offset from a 16-byte boundary, plain
// and with an escape at every position, and cut at every byte: the reader scans strings 16
// bytes at a time from their first byte (object_facts.cc), so a closing quote, an escape and
// the body's end must stop the scan wherever they fall in a block.
TEST(ObjectFactsTest, StringsOfEveryLengthAtEveryAlignmentDecode) {
  const std::vector<std::pair<std::string, std::string>> kEscapes = {
      {R"(\")", "\""}, {R"(\\)", "\\"}, {R"(\/)", "/"}, {R"(\u0041)", "A"}, {R"(\n)", "\n"}};
  const std::string head = R"({"kind":"ConfigMap","metadata":{"name":"x","resourceVersion":")";
  size_t bodies = 0;
  for (size_t length = 0; length <= 40; ++length) {
    std::string plain;
    for (size_t i = 0; i < length; ++i) plain += static_cast<char>('a' + i % 26);
    std::vector<std::pair<std::string, std::string>> values = {{plain, plain}};
    for (const auto& [raw_escape, decoded_escape] : kEscapes) {
      for (size_t at = 0; at <= length; ++at) {
        values.push_back({plain.substr(0, at) + raw_escape + plain.substr(at),
                          plain.substr(0, at) + decoded_escape + plain.substr(at)});
      }
    }
    for (size_t offset = 0; offset < 16; ++offset) {
      const std::string start = std::string(offset, ' ') + head;
      for (const auto& [raw, decoded] : values) {
        const std::string body = start + raw + R"(","finalizers":[")" + raw + R"(","z"]}})";
        ResponseFacts f;
        ASSERT_EQ(ParseObjectFacts(body, &f).result, BodyFactsResult::kObject) << body;
        ASSERT_EQ(f.resource_version, decoded) << body;
        ASSERT_TRUE(f.finalizers_seen) << body;
        ASSERT_EQ(f.finalizers, (std::vector<std::string>{decoded, "z"})) << body;
        ++bodies;
      }
      // Cut inside the value: the read ends there, and the value is not taken.
      const std::string& raw = values.back().first;
      for (size_t cut = 0; cut <= raw.size(); ++cut) {
        ResponseFacts f;
        ParseObjectFacts(start + raw.substr(0, cut), &f);
        ASSERT_EQ(f.resource_version, "") << start + raw.substr(0, cut);
        ++bodies;
      }
    }
  }
  EXPECT_GT(bodies, 80000u);  // every case above ran
}

}  // namespace
}  // namespace stormwatch
