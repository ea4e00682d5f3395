#include "agent/kube/object_facts.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/kube/object_facts_protobuf.h"

namespace stormwatch {
namespace {

using Json = nlohmann::json;

// ObjectMeta's members in Go struct order (built-in types); others are not ranked.
constexpr std::array<std::string_view, 15> kTypedOrder = {
    "name",       "generateName",      "namespace",
    "selfLink",   "uid",               "resourceVersion",
    "generation", "creationTimestamp", "deletionTimestamp",
    "deletionGracePeriodSeconds",      "labels",
    "annotations", "ownerReferences",  "finalizers",
    "managedFields"};

int TypedRank(std::string_view key) {
  for (size_t i = 0; i < kTypedOrder.size(); ++i) {
    if (kTypedOrder[i] == key) return static_cast<int>(i);
  }
  return -1;
}

// SAX events up to the first error (the cut): only the top-level kind and metadata matter.
class MetadataReader final : public nlohmann::json_sax<Json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t v) override { return Number(v); }
  bool number_unsigned(number_unsigned_t v) override {
    return Number(v > static_cast<uint64_t>(INT64_MAX) ? -1 : static_cast<int64_t>(v));
  }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }

  bool string(string_t& v) override {
    if (depth_ == 1 && top_key_ == "kind") kind_ = v;
    if (in_metadata_ && depth_ == 2) {
      if (meta_key_ == "resourceVersion") resource_version_ = v;
      if (meta_key_ == "deletionTimestamp" && !v.empty()) deletion_timestamp_ = true;
    }
    if (in_finalizers_ && depth_ == 3) finalizers_partial_.push_back(v);
    return true;
  }

  bool start_object(std::size_t) override {
    ++depth_;
    if (depth_ == 1) top_is_object_ = true;
    if (depth_ == 2 && top_key_ == "metadata" && !metadata_started_) {
      metadata_started_ = true;
      in_metadata_ = true;
    }
    return true;
  }

  bool end_object() override {
    if (in_metadata_ && depth_ == 2) {
      CommitPending();
      in_metadata_ = false;
      metadata_ended_ = true;
      return false;  // all that is read is known (kind comes before metadata): stops the parse
    }
    --depth_;
    return true;
  }

  bool start_array(std::size_t) override {
    ++depth_;
    if (depth_ == 1) return false;  // not an object
    if (in_metadata_ && depth_ == 3 && meta_key_ == "finalizers") in_finalizers_ = true;
    return true;
  }

  bool end_array() override {
    if (in_finalizers_ && depth_ == 3) {
      in_finalizers_ = false;
      finalizers_ = std::move(finalizers_partial_);
      finalizers_complete_ = true;
    }
    --depth_;
    return true;
  }

  bool key(string_t& k) override {
    if (depth_ == 1) top_key_ = k;
    if (in_metadata_ && depth_ == 2) {
      CommitPending();  // a new member: the previous value was complete
      NoteMetadataKey(k);
      meta_key_ = k;
      // Past every member read (managedFields, often kilobytes, comes after them in the typed
      // order; spec and status after metadata): the rest would change nothing. Stops the parse.
      if (Passed("resourceVersion") && Passed("generation") && Passed("deletionTimestamp") &&
          Passed("finalizers")) {
        return false;
      }
    }
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;  // the cut (or garbage): keep what was complete
  }

  BodyFactsResult Fill(ResponseFacts* f) const {
    if (!top_is_object_) return BodyFactsResult::kUnreadable;
    if (kind_ == "Status" || (kind_.size() >= 4 && kind_.compare(kind_.size() - 4, 4, "List") == 0)) {
      return BodyFactsResult::kNotObject;
    }
    if (!metadata_started_) return BodyFactsResult::kPartial;
    f->deletion_timestamp = deletion_timestamp_;
    f->object_seen = deletion_timestamp_ || Passed("deletionTimestamp");
    f->generation = generation_.value_or(-1);
    f->resource_version = resource_version_;
    f->finalizers_seen = finalizers_complete_ || Passed("finalizers");
    if (finalizers_complete_) f->finalizers = finalizers_;
    return f->object_seen ? BodyFactsResult::kObject : BodyFactsResult::kPartial;
  }

 private:
  enum class Order { kUnknown, kTyped, kSorted };

  bool Number(int64_t v) {
    if (in_metadata_ && depth_ == 2 && meta_key_ == "generation") pending_generation_ = v;
    return true;
  }

  void CommitPending() {
    if (pending_generation_) generation_ = std::exchange(pending_generation_, std::nullopt);
  }

  // Stored objects always have a name, written first by the typed encoder; sorted maps start
  // with annotations or creationTimestamp.
  void NoteMetadataKey(const std::string& k) {
    if (order_ == Order::kUnknown) {
      order_ = (k == "name" || k == "generateName") ? Order::kTyped : Order::kSorted;
    }
    if (order_ == Order::kTyped) {
      max_typed_rank_ = std::max(max_typed_rank_, TypedRank(k));
    } else if (k > max_sorted_key_) {
      max_sorted_key_ = k;
    }
  }

  // True when the prefix went past where `member` would be: absent means absent.
  bool Passed(std::string_view member) const {
    if (metadata_ended_) return true;
    if (order_ == Order::kTyped) return max_typed_rank_ > TypedRank(member);
    if (order_ == Order::kSorted) return max_sorted_key_ > member;
    return false;
  }

  int depth_ = 0;
  bool top_is_object_ = false;
  std::string top_key_;
  std::string kind_;
  bool metadata_started_ = false;
  bool in_metadata_ = false;
  bool metadata_ended_ = false;
  std::string meta_key_;
  Order order_ = Order::kUnknown;
  int max_typed_rank_ = -1;
  std::string max_sorted_key_;

  std::optional<int64_t> pending_generation_;
  std::optional<int64_t> generation_;
  std::string resource_version_;
  bool deletion_timestamp_ = false;
  bool in_finalizers_ = false;
  std::vector<std::string> finalizers_partial_;
  std::vector<std::string> finalizers_;
  bool finalizers_complete_ = false;
};

void ClearObjectFacts(ResponseFacts* facts) {
  facts->object_seen = false;
  facts->generation = -1;
  facts->deletion_timestamp = false;
  facts->finalizers.clear();
  facts->finalizers_seen = false;
  facts->resource_version.clear();
}

}  // namespace

std::string_view BodyEncodingName(BodyEncoding e) {
  switch (e) {
    case BodyEncoding::kJson: return "json";
    case BodyEncoding::kProtobuf: return "protobuf";
    case BodyEncoding::kOther: break;
  }
  return "other";
}

std::string_view BodyFactsResultName(BodyFactsResult r) {
  switch (r) {
    case BodyFactsResult::kObject: return "object";
    case BodyFactsResult::kPartial: return "partial";
    case BodyFactsResult::kNotObject: return "not_object";
    case BodyFactsResult::kUnreadable: break;
  }
  return "unreadable";
}

BodyFacts ParseObjectFacts(std::string_view body_prefix, ResponseFacts* facts) {
  ClearObjectFacts(facts);
  if (IsKubernetesProtobuf(body_prefix)) {
    BodyFacts out{BodyEncoding::kProtobuf, ParseProtobufObjectFacts(body_prefix, facts)};
    if (out.result != BodyFactsResult::kObject) ClearObjectFacts(facts);  // nothing half-filled
    return out;
  }
  const size_t first = body_prefix.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos || body_prefix[first] != '{') {
    return {BodyEncoding::kOther, BodyFactsResult::kUnreadable};
  }
  MetadataReader reader;
  try {
    Json::sax_parse(body_prefix.begin(), body_prefix.end(), &reader);
  } catch (const Json::exception&) {
    // Garbage the reader did not stop on: keep what it saw before.
  }
  return {BodyEncoding::kJson, reader.Fill(facts)};
}

}  // namespace stormwatch
