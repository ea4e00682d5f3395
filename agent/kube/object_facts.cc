#include "agent/kube/object_facts.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string.h>  // explicit_bzero
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#if defined(__x86_64__)
#define RAPIDJSON_SSE2  // strings and whitespace scanned 16 bytes at a time (x86-64's baseline)
#endif
#include <rapidjson/encodings.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>
#include <rapidjson/stream.h>

#include "agent/kube/object_facts_protobuf.h"

namespace stormwatch {
namespace {

// ObjectMeta's members in Go struct order (built-in types); others are not ranked.
constexpr std::array<std::string_view, 15> kTypedOrder = {
    "name",       "generateName",      "namespace",
    "selfLink",   "uid",               "resourceVersion",
    "generation", "creationTimestamp", "deletionTimestamp",
    "deletionGracePeriodSeconds",      "labels",
    "annotations", "ownerReferences",  "finalizers",
    "managedFields"};

constexpr int TypedRank(std::string_view key) {
  for (size_t i = 0; i < kTypedOrder.size(); ++i) {
    if (kTypedOrder[i] == key) return static_cast<int>(i);
  }
  return -1;
}

// A member and its rank, ranked by the compiler (consteval): called at run time, TypedRank's
// loop of compares ran on every metadata key (~50 instructions per request, replay_bench).
struct RankedMember {
  std::string_view name;
  int rank;
};
consteval RankedMember Ranked(std::string_view member) { return {member, TypedRank(member)}; }

// TypedRank for every metadata key a body has: by length, then one compare (two where two
// members share a length) instead of up to fifteen.
constexpr int TypedRankOfKey(std::string_view key) {
  auto is = [&](RankedMember member) { return key == member.name ? member.rank : -1; };
  if (key.empty()) return -1;
  switch (key.size()) {
    case 3: return is(Ranked("uid"));
    case 4: return is(Ranked("name"));
    case 6: return is(Ranked("labels"));
    case 8: return is(Ranked("selfLink"));
    case 9: return is(Ranked("namespace"));
    case 10: return key[0] == 'g' ? is(Ranked("generation")) : is(Ranked("finalizers"));
    case 11: return is(Ranked("annotations"));
    case 12: return is(Ranked("generateName"));
    case 13: return is(Ranked("managedFields"));
    case 15: return key[0] == 'r' ? is(Ranked("resourceVersion")) : is(Ranked("ownerReferences"));
    case 17:
      return key[0] == 'c' ? is(Ranked("creationTimestamp")) : is(Ranked("deletionTimestamp"));
    case 26: return is(Ranked("deletionGracePeriodSeconds"));
    default: return -1;
  }
}
// Checked against TypedRank for every member and for keys of a member's length that are not.
constexpr bool TypedRankOfKeyAgrees() {
  for (std::string_view member : kTypedOrder) {
    if (TypedRankOfKey(member) != TypedRank(member)) return false;
  }
  for (std::string_view other : {"", "x", "kind", "gen", "generatioN", "finalizerz", "uuid",
                                 "ownerReferencez", "creationTimestamP", "deletionTimestampx"}) {
    if (TypedRankOfKey(other) != -1) return false;
  }
  return true;
}
static_assert(TypedRankOfKeyAgrees());

// The JSON reader's stack (strings it decodes, its nesting) through operator new, so the
// allocation counters of the tests and benchmarks see it. Grown once per thread (see below).
class CountedStackAllocator {
 public:
  static constexpr bool kNeedFree = true;
  void* Malloc(size_t size) { return size ? ::operator new(size) : nullptr; }
  void* Realloc(void* old, size_t old_size, size_t new_size) {
    if (new_size == 0) {
      Free(old);
      return nullptr;
    }
    void* grown = ::operator new(new_size);
    if (old) std::memcpy(grown, old, std::min(old_size, new_size));
    Free(old);
    return grown;
  }
  static void Free(void* p) { ::operator delete(p); }
};

using JsonReader = rapidjson::GenericReader<rapidjson::UTF8<>, rapidjson::UTF8<>, CountedStackAllocator>;
// Recursive (rapidjson's fast path: its iterative parser's state machine took 12% more
// instructions per body), with nesting capped by the handler below: a hostile body of 200,000 '['
// ends the read at kMaxJsonDepth levels of recursion, not at the thread's stack's end. In situ:
// strings are decoded in the thread's copy of the body, not copied out. A handler's false stops
// the parse (kParseErrorTermination), as does the cut.
constexpr unsigned kJsonParseFlags = rapidjson::kParseInsituFlag | rapidjson::kParseStopWhenDoneFlag;

}  // namespace
}  // namespace stormwatch

#if defined(RAPIDJSON_SSE2)
// rapidjson's SSE2 scan of a string in place first walks byte by byte up to a 16-byte boundary
// (an unaligned load near a buffer's end could touch an unmapped page), and metadata's strings
// are short: that walk was most of the scan, ~350 instructions per request in replay_bench.
// This reader only ever parses ParseObjectFacts' copy of a body, which has 16 readable bytes
// past the '\0' that ends it; every scan stops at that '\0' (a control character) at the
// latest, so 16-byte loads from any byte of a string stay inside the copy. For this reader
// alone, the scan loads 16 bytes at a time from the string's first byte.
template <>
void rapidjson::GenericReader<rapidjson::UTF8<>, rapidjson::UTF8<>,
                              stormwatch::CountedStackAllocator>::
    ScanCopyUnescapedString(rapidjson::InsituStringStream& is, rapidjson::InsituStringStream& os) {
  (void)os;  // the same stream: is.dst_ trails is.src_ once an escape was decoded
  char* p = is.src_;
  char* q = is.dst_;
  const __m128i quote = _mm_set1_epi8('"');
  const __m128i backslash = _mm_set1_epi8('\\');
  const __m128i space = _mm_set1_epi8(0x19);
  for (;; p += 16, q += 16) {
    const __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i stop = _mm_or_si128(
        _mm_or_si128(_mm_cmpeq_epi8(s, quote), _mm_cmpeq_epi8(s, backslash)),
        _mm_cmpeq_epi8(_mm_max_epu8(s, space), space));  // s < 0x20: max(s, 0x19) == 0x19
    const unsigned found = static_cast<unsigned>(_mm_movemask_epi8(stop));
    if (found != 0) {
      const size_t length = static_cast<size_t>(__builtin_ctz(found));
      if (p != q) std::memmove(q, p, length);
      p += length;
      q += length;
      break;
    }
    if (p != q) _mm_storeu_si128(reinterpret_cast<__m128i*>(q), s);
  }
  is.src_ = p;
  is.dst_ = q;
}
#endif

namespace stormwatch {
namespace {
// Deeper than anything read (metadata's members are at depth 3) and than managedFields' fieldsV1
// of real objects (as deep as the object's own fields), which a read may have to pass.
constexpr int kMaxJsonDepth = 128;

// Strings that are kept (resourceVersion, finalizers: they become alert text and label values)
// must be UTF-8. Only they are checked: checking every string in the parse would cost the SIMD
// scan of the others.
bool IsUtf8(std::string_view s) {
  if (std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
    return true;
  }
  rapidjson::MemoryStream is(s.data(), s.size());
  while (is.Tell() < s.size()) {
    unsigned codepoint = 0;
    if (!rapidjson::UTF8<>::Decode(is, &codepoint)) return false;
  }
  return true;
}

// Which top-level and metadata members matter, decided once per key.
enum class TopKey { kOther, kKind, kMetadata };
enum class MetaKey { kOther, kResourceVersion, kGeneration, kDeletionTimestamp, kFinalizers };

// The members read, as ranks in kTypedOrder: a metadata key is ranked once (TypedRank), and
// both what it is and whether the read has passed a member follow from its rank.
constexpr int kResourceVersionRank = TypedRank("resourceVersion");
constexpr int kGenerationRank = TypedRank("generation");
constexpr int kDeletionTimestampRank = TypedRank("deletionTimestamp");
constexpr int kFinalizersRank = TypedRank("finalizers");
static_assert(kFinalizersRank > kResourceVersionRank && kFinalizersRank > kGenerationRank &&
                  kFinalizersRank > kDeletionTimestampRank,
              "finalizers comes last of the members read in the typed order");
// The last of them in the sorted order (keys sorted by bytes).
constexpr std::string_view kLastSortedMemberRead = "resourceVersion";
static_assert(kLastSortedMemberRead > "generation" && kLastSortedMemberRead > "deletionTimestamp" &&
              kLastSortedMemberRead > "finalizers");

MetaKey MetaKeyOfRank(int rank) {
  switch (rank) {
    case kResourceVersionRank: return MetaKey::kResourceVersion;
    case kGenerationRank: return MetaKey::kGeneration;
    case kDeletionTimestampRank: return MetaKey::kDeletionTimestamp;
    case kFinalizersRank: return MetaKey::kFinalizers;
    default: return MetaKey::kOther;
  }
}

// SAX events up to the first error (the cut): only the top-level kind and metadata matter.
// One per thread, reset per body: its strings keep their buffers, so a body allocates nothing.
class MetadataReader {
 public:
  void Reset() {
    depth_ = 0;
    top_is_object_ = false;
    top_key_ = TopKey::kOther;
    kind_is_not_object_ = false;
    metadata_started_ = in_metadata_ = metadata_ended_ = false;
    meta_key_ = MetaKey::kOther;
    order_ = Order::kUnknown;
    max_typed_rank_ = -1;
    max_sorted_key_size_ = 0;
    pending_generation_.reset();
    generation_.reset();
    resource_version_.clear();
    deletion_timestamp_ = false;
    in_finalizers_ = false;
    finalizers_read_ = 0;
    finalizers_complete_ = false;
  }

  // rapidjson's handler concept.
  bool Null() { return true; }
  bool Bool(bool) { return true; }
  bool Int(int v) { return Number(v); }
  bool Uint(unsigned v) { return Number(v); }
  bool Int64(int64_t v) { return Number(v); }
  bool Uint64(uint64_t v) {
    return Number(v > static_cast<uint64_t>(INT64_MAX) ? -1 : static_cast<int64_t>(v));
  }
  bool Double(double) { return true; }
  bool RawNumber(const char*, rapidjson::SizeType, bool) { return true; }

  bool String(const char* data, rapidjson::SizeType size, bool) {
    const std::string_view v(data, size);
    if (depth_ == 1 && top_key_ == TopKey::kKind) {
      kind_is_not_object_ = v == "Status" || (v.size() >= 4 && v.substr(v.size() - 4) == "List");
    }
    if (in_metadata_ && depth_ == 2) {
      if (meta_key_ == MetaKey::kResourceVersion) {
        if (!IsUtf8(v)) return false;  // garbage: the read ends here
        resource_version_.assign(v);
      }
      if (meta_key_ == MetaKey::kDeletionTimestamp && !v.empty()) deletion_timestamp_ = true;
    }
    if (in_finalizers_ && depth_ == 3) {
      if (!IsUtf8(v)) return false;
      AddFinalizer(v);
    }
    return true;
  }

  bool StartObject() {
    if (++depth_ > kMaxJsonDepth) return false;  // the cap: stops the parse
    if (depth_ == 1) top_is_object_ = true;
    if (depth_ == 2 && top_key_ == TopKey::kMetadata && !metadata_started_) {
      metadata_started_ = true;
      in_metadata_ = true;
    }
    return true;
  }

  bool EndObject(rapidjson::SizeType) {
    if (in_metadata_ && depth_ == 2) {
      CommitPending();
      in_metadata_ = false;
      metadata_ended_ = true;
      return false;  // all that is read is known (kind comes before metadata): stops the parse
    }
    --depth_;
    return true;
  }

  bool StartArray() {
    if (++depth_ > kMaxJsonDepth) return false;
    if (depth_ == 1) return false;  // not an object
    if (in_metadata_ && depth_ == 3 && meta_key_ == MetaKey::kFinalizers) in_finalizers_ = true;
    return true;
  }

  bool EndArray(rapidjson::SizeType) {
    if (in_finalizers_ && depth_ == 3) {
      in_finalizers_ = false;
      finalizers_complete_ = true;
    }
    --depth_;
    return true;
  }

  bool Key(const char* data, rapidjson::SizeType size, bool) {
    const std::string_view k(data, size);
    if (depth_ == 1) {
      top_key_ = k == "kind" ? TopKey::kKind : k == "metadata" ? TopKey::kMetadata : TopKey::kOther;
    }
    if (in_metadata_ && depth_ == 2) {
      CommitPending();  // a new member: the previous value was complete
      const int rank = TypedRankOfKey(k);
      NoteMetadataKey(k, rank);
      meta_key_ = MetaKeyOfRank(rank);
      // Past every member read (managedFields, often kilobytes, comes after them in the typed
      // order; spec and status after metadata): the rest would change nothing. Stops the parse.
      if (PassedEveryMemberRead()) return false;
    }
    return true;
  }

  BodyFactsResult Fill(ResponseFacts* f) const {
    if (!top_is_object_) return BodyFactsResult::kUnreadable;
    if (kind_is_not_object_) return BodyFactsResult::kNotObject;
    if (!metadata_started_) return BodyFactsResult::kPartial;
    f->deletion_timestamp = deletion_timestamp_;
    f->object_seen = deletion_timestamp_ || Passed(kDeletionTimestampRank, "deletionTimestamp");
    f->generation = generation_.value_or(-1);
    f->resource_version.assign(resource_version_);
    f->finalizers_seen = finalizers_complete_ || Passed(kFinalizersRank, "finalizers");
    if (finalizers_complete_) {
      for (size_t i = 0; i < finalizers_read_; ++i) f->AddFinalizer(finalizers_[i]);
    }
    return f->object_seen ? BodyFactsResult::kObject : BodyFactsResult::kPartial;
  }

 private:
  enum class Order { kUnknown, kTyped, kSorted };

  bool Number(int64_t v) {
    if (in_metadata_ && depth_ == 2 && meta_key_ == MetaKey::kGeneration) pending_generation_ = v;
    return true;
  }

  // Into the strings of earlier bodies first: their buffers are kept.
  void AddFinalizer(std::string_view v) {
    if (finalizers_read_ < finalizers_.size()) {
      finalizers_[finalizers_read_].assign(v);
    } else {
      finalizers_.emplace_back(v);
    }
    ++finalizers_read_;
  }

  void CommitPending() {
    if (pending_generation_) generation_ = std::exchange(pending_generation_, std::nullopt);
  }

  // Stored objects always have a name, written first by the typed encoder; sorted maps start
  // with annotations or creationTimestamp.
  // `rank`: TypedRank(k).
  void NoteMetadataKey(std::string_view k, int rank) {
    if (order_ == Order::kUnknown) {
      order_ = (k == "name" || k == "generateName") ? Order::kTyped : Order::kSorted;
    }
    if (order_ == Order::kTyped) {
      max_typed_rank_ = std::max(max_typed_rank_, rank);
    } else {
      // Only the first bytes are kept: every member compared with is shorter, and a key is
      // greater than such a member exactly when its first bytes are.
      k = k.substr(0, std::min(k.size(), max_sorted_key_.size()));
      if (k > MaxSortedKey()) {
        std::copy(k.begin(), k.end(), max_sorted_key_.begin());
        max_sorted_key_size_ = k.size();
      }
    }
  }

  std::string_view MaxSortedKey() const {
    return std::string_view(max_sorted_key_.data(), max_sorted_key_size_);
  }

  // True when the prefix went past where `member` (of rank `rank` in the typed order) would
  // be: absent means absent.
  bool Passed(int rank, std::string_view member) const {
    if (metadata_ended_) return true;
    if (order_ == Order::kTyped) return max_typed_rank_ > rank;
    if (order_ == Order::kSorted) return MaxSortedKey() > member;
    return false;
  }
  // Passed() for resourceVersion, generation, deletionTimestamp and finalizers: the last of
  // them in either order.
  bool PassedEveryMemberRead() const {
    return order_ == Order::kTyped ? Passed(kFinalizersRank, "finalizers")
                                   : Passed(-1, kLastSortedMemberRead);
  }

  int depth_ = 0;
  bool top_is_object_ = false;
  TopKey top_key_ = TopKey::kOther;
  bool kind_is_not_object_ = false;  // a Status or a List
  bool metadata_started_ = false;
  bool in_metadata_ = false;
  bool metadata_ended_ = false;
  MetaKey meta_key_ = MetaKey::kOther;
  Order order_ = Order::kUnknown;
  int max_typed_rank_ = -1;
  std::array<char, 32> max_sorted_key_{};  // longer than any member Passed() is asked about
  size_t max_sorted_key_size_ = 0;

  std::optional<int64_t> pending_generation_;
  std::optional<int64_t> generation_;
  std::string resource_version_;
  bool deletion_timestamp_ = false;
  bool in_finalizers_ = false;
  std::vector<std::string> finalizers_;  // the first finalizers_read_ are this body's
  size_t finalizers_read_ = 0;
  bool finalizers_complete_ = false;
};

void ClearObjectFacts(ResponseFacts* facts) {
  facts->object_seen = false;
  facts->generation = -1;
  facts->deletion_timestamp = false;
  facts->ClearFinalizers();
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
  // Per thread, reused: the reader's stack and the handler's strings are grown once.
  thread_local JsonReader json;
  thread_local MetadataReader reader;
  // The thread's copy of the body, which the parse decodes strings in: ended by '\0' (the
  // parse's end, as the cut) and 16 more, as the string scan (above) loads 16 bytes from any byte.
  thread_local std::vector<char> copy;
  copy.assign(body_prefix.begin(), body_prefix.end());
  copy.resize(body_prefix.size() + 1 + 16, '\0');
  reader.Reset();
  rapidjson::InsituStringStream bytes(copy.data());
  // The result is not needed: the cut, garbage or the reader's own stop all end the parse, and
  // what was complete before it is kept.
  json.Parse<kJsonParseFlags>(bytes, reader);
  const BodyFactsResult result = reader.Fill(facts);
  // The body may be a Secret's: its copy does not outlive the read (the facts are not secret).
  explicit_bzero(copy.data(), copy.size());
  return {BodyEncoding::kJson, result};
}

}  // namespace stormwatch
