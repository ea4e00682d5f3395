// Object facts from an `application/vnd.kubernetes.protobuf` body prefix
// (k8s.io/apimachinery/pkg/runtime/serializer/protobuf):
//
//   "k8s\0"  runtime.Unknown{ typeMeta = 1 (TypeMeta{apiVersion = 1, kind = 2}),
//                             raw = 2 (the object's own message), contentEncoding = 3,
//                             contentType = 4 }
//
// and every top-level API object's message has `ObjectMeta metadata = 1` (Lists and Status have
// ListMeta there). The messages are the generated classes of Kubernetes' own .proto files
// (proto/k8s.io), so field numbers and decoding are libprotobuf's, not ours.
//
// The capture keeps a prefix, so `raw` and metadata are usually cut off (in managedFields, the
// last member). Go's generated marshallers write fields in field-number order, so the walk
// below keeps the complete fields before the cut, hands those bytes to ObjectMeta's own parser,
// and knows a member is absent (not merely cut) once it has read the tag of a later field.
// Should a body ever come out of order, only a complete metadata gives facts.
#include "agent/kube/object_facts_protobuf.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <cstdint>
#include <string>

#include "k8s.io/apimachinery/pkg/apis/meta/v1/generated.pb.h"
#include "k8s.io/apimachinery/pkg/runtime/generated.pb.h"

namespace stormwatch {
namespace {

namespace meta = k8s::io::apimachinery::pkg::apis::meta::v1;
namespace kruntime = k8s::io::apimachinery::pkg::runtime;
using google::protobuf::io::CodedInputStream;
using Wire = google::protobuf::internal::WireFormatLite;

// One field of a message as far as the prefix holds it.
struct Field {
  int number = 0;
  Wire::WireType type = Wire::WIRETYPE_VARINT;
  std::string_view value;  // length-delimited: the bytes held (all of them when complete)
  bool complete = false;
};

// Walks the fields of one message's bytes, which may end anywhere.
class FieldWalker {
 public:
  explicit FieldWalker(std::string_view bytes)
      : bytes_(bytes), in_(reinterpret_cast<const uint8_t*>(bytes.data()), static_cast<int>(bytes.size())) {}

  // The next field; false at the end of the bytes, or on a tag that cannot be read (cut or
  // garbage: malformed() says which).
  bool Next(Field* f) {
    if (done_) return false;
    const std::string_view rest = bytes_.substr(Position());
    if (rest.empty() || IsCutVarint(rest)) return Stop(false);
    uint32_t tag = in_.ReadTagNoLastTag();
    if (tag == 0) return Stop(true);
    f->number = static_cast<int>(Wire::GetTagFieldNumber(tag));
    f->type = Wire::GetTagWireType(tag);
    f->value = {};
    f->complete = false;
    if (f->number <= 0) return Stop(true);
    if (f->number < last_number_) ascending_ = false;
    last_number_ = f->number;
    switch (f->type) {
      case Wire::WIRETYPE_LENGTH_DELIMITED: {
        uint32_t len = 0;
        if (!in_.ReadVarint32(&len)) return Cut(f);
        const size_t start = Position();
        const size_t held = bytes_.size() - start;
        if (len > held) {  // cut inside the value: what there is of it
          f->value = bytes_.substr(start);
          return Cut(f);
        }
        f->value = bytes_.substr(start, len);
        in_.Skip(static_cast<int>(len));
        break;
      }
      case Wire::WIRETYPE_VARINT: {
        uint64_t v;
        if (!in_.ReadVarint64(&v)) return Cut(f);
        break;
      }
      case Wire::WIRETYPE_FIXED64:
        if (!in_.Skip(8)) return Cut(f);
        break;
      case Wire::WIRETYPE_FIXED32:
        if (!in_.Skip(4)) return Cut(f);
        break;
      default:  // groups: no Kubernetes message has them
        return Stop(true);
    }
    f->complete = true;
    complete_end_ = Position();
    return true;
  }

  // Bytes of the fields read completely so far: a valid message of their own.
  std::string_view CompletePrefix() const { return bytes_.substr(0, complete_end_); }
  // The highest field number whose tag was read (cut value or not).
  int last_number() const { return last_number_; }
  bool ascending() const { return ascending_; }
  bool malformed() const { return malformed_; }

 private:
  size_t Position() const { return static_cast<size_t>(in_.CurrentPosition()); }
  // The last bytes are the start of a tag's varint (every byte says "more follows"): the cut.
  static bool IsCutVarint(std::string_view rest) {
    if (rest.size() >= 5) return false;
    for (char c : rest) {
      if ((static_cast<uint8_t>(c) & 0x80) == 0) return false;
    }
    return true;
  }
  bool Stop(bool malformed) {
    done_ = true;
    malformed_ = malformed;
    return false;
  }
  bool Cut(Field* f) {
    done_ = true;
    f->complete = false;
    return true;  // the caller sees the cut field once
  }

  std::string_view bytes_;
  CodedInputStream in_;
  size_t complete_end_ = 0;
  int last_number_ = 0;
  bool ascending_ = true;
  bool done_ = false;
  bool malformed_ = false;
};

bool IsListOrStatus(const std::string& kind) {
  return kind == "Status" || (kind.size() >= 4 && kind.compare(kind.size() - 4, 4, "List") == 0);
}

template <typename Message>
bool ParseComplete(std::string_view bytes, Message* m) {
  return m->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
}

}  // namespace

bool IsKubernetesProtobuf(std::string_view body) {
  return body.size() >= kKubernetesProtobufMagic.size() &&
         body.compare(0, kKubernetesProtobufMagic.size(), kKubernetesProtobufMagic) == 0;
}

BodyFactsResult ParseProtobufObjectFacts(std::string_view body_prefix, ResponseFacts* facts) {
  if (!IsKubernetesProtobuf(body_prefix)) return BodyFactsResult::kUnreadable;
  // The envelope: TypeMeta, then the object's bytes.
  FieldWalker envelope(body_prefix.substr(kKubernetesProtobufMagic.size()));
  std::string kind;
  bool have_type = false;
  std::string_view raw;
  bool have_raw = false;
  Field f;
  while (envelope.Next(&f)) {
    if (f.number == kruntime::Unknown::kTypeMetaFieldNumber &&
        f.type == Wire::WIRETYPE_LENGTH_DELIMITED && f.complete) {
      kruntime::TypeMeta type;
      if (!ParseComplete(f.value, &type)) return BodyFactsResult::kUnreadable;
      kind = type.kind();
      have_type = true;
    } else if (f.number == kruntime::Unknown::kRawFieldNumber &&
               f.type == Wire::WIRETYPE_LENGTH_DELIMITED) {
      if (!have_type) return BodyFactsResult::kUnreadable;  // the serializer writes the kind first
      raw = f.value;
      have_raw = true;
      break;  // contentEncoding and contentType follow, empty
    }
  }
  if (envelope.malformed()) return BodyFactsResult::kUnreadable;
  if (!have_type) return BodyFactsResult::kPartial;  // cut inside the envelope's first bytes
  if (IsListOrStatus(kind)) return BodyFactsResult::kNotObject;
  if (!have_raw) return BodyFactsResult::kPartial;

  // The object: metadata first.
  FieldWalker object(raw);
  if (!object.Next(&f)) return object.malformed() ? BodyFactsResult::kUnreadable : BodyFactsResult::kPartial;
  if (f.number != 1 || f.type != Wire::WIRETYPE_LENGTH_DELIMITED) return BodyFactsResult::kNotObject;

  meta::ObjectMeta m;
  bool whole = f.complete;
  int passed_up_to = 0;  // every member with a number below this was seen or is absent
  if (whole) {
    if (!ParseComplete(f.value, &m)) return BodyFactsResult::kUnreadable;
  } else {
    FieldWalker members(f.value);
    Field member;
    while (members.Next(&member)) {
    }
    if (members.malformed()) return BodyFactsResult::kUnreadable;
    if (!m.ParsePartialFromArray(members.CompletePrefix().data(),
                                 static_cast<int>(members.CompletePrefix().size()))) {
      return BodyFactsResult::kUnreadable;
    }
    if (members.ascending()) passed_up_to = members.last_number();
  }
  auto passed = [&](int number) { return whole || passed_up_to > number; };

  facts->deletion_timestamp = m.has_deletiontimestamp();
  facts->object_seen = facts->deletion_timestamp || passed(meta::ObjectMeta::kDeletionTimestampFieldNumber);
  if (!facts->object_seen) return BodyFactsResult::kPartial;
  // Go writes generation always; 0 is what JSON omits (a resource that does not count them).
  if (m.has_generation() && m.generation() != 0) facts->generation = m.generation();
  facts->resource_version = m.resourceversion();
  facts->finalizers_seen = passed(meta::ObjectMeta::kFinalizersFieldNumber);
  if (facts->finalizers_seen) {
    for (const std::string& name : m.finalizers()) facts->AddFinalizer(name);
  }
  return BodyFactsResult::kObject;
}

}  // namespace stormwatch
