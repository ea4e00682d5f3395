// Capture files: records round-trip field for field, secrets never reach the file, rotation
// bounds the disk used, and what is not a capture (another file, another version, a corrupt or
// cut record) is an error or a clean end, never a crash.
#include "agent/record/capture_file.h"

#include <chrono>

#include "agent/kube/record_keys.h"
#include "agent/metered_pipeline.h"
#include "agent/pipeline/request_pipeline.h"
#include "agent/replay.h"
#include "record_identity.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace stormwatch {
namespace {

std::string TempPath(const std::string& name) {
  return "/tmp/stormwatch-capture-" + std::to_string(getpid()) + "-" + name;
}

RequestRecord Request(int i) {
  RequestRecord r;
  r.pid = 42;
  r.conn_id = 0xc000100 + i;
  r.stream_id = 2 * i + 1;
  r.start_ns = 1'000'000'000ull * i;
  r.end_ns = r.start_ns + 5'000'000;
  r.protocol = "HTTP/2";
  r.peer_address = ParseTcpEndpoint("10.0.0.7:40000");
  r.local_address = ParseTcpEndpoint("[fd00::2]:6443");
  r.method = "PUT";
  r.path = "/apis/batch.company.com/v1/namespaces/etl/datajobs/nightly";
  r.content_type = "application/json";
  r.status = 409;
  r.response_bytes = 321;
  r.response.priority_level = "workload-low";
  r.response.retry_after_s = -1;
  r.response.object_seen = true;
  r.response.generation = 7;
  r.response.finalizers = {"batch.company.com/cleanup"};
  r.response.finalizers_seen = true;
  r.response.resource_version = "123";
  r.response_body_prefix = "{\"kind\":\"Secret\",\"data\":{\"password\":\"aHVudGVyMg==\"}}";
  EditIdentity(r).kind = Identity::Kind::kServiceAccount;
  EditIdentity(r).user = "system:serviceaccount:etl:operator";
  EditIdentity(r).sa_namespace = "etl";
  EditIdentity(r).sa_name = "operator";
  EditIdentity(r).pod_name = "operator-7d9f";
  EditIdentity(r).groups = {"system:serviceaccounts"};
  EditIdentity(r).user_agent = "operator/v1";
  r.etcd = {1, 500, 1'000'000, 0};
  return r;
}

EtcdRequest Etcd() {
  EtcdRequest e;
  e.pid = 7;
  e.start_ns = 10;
  e.end_ns = 20;
  e.method = "/etcdserverpb.KV/Range";
  e.request = EtcdMessage::kRangeRequest;
  e.key = "/registry/secrets/kube-system/bootstrap-token-abcdef";
  e.decoded.registry = true;
  e.decoded.resource = "secrets";
  e.decoded.namespace_ = "kube-system";
  e.decoded.name = "bootstrap-token-abcdef";
  e.decoded.key_prefix = "/registry/secrets/";
  e.limit = 500;
  e.kvs = 3;
  e.kv_bytes = 999;
  e.more = true;
  e.code = 11;
  e.identity.user = "kube-apiserver-etcd-client";
  return e;
}

TEST(CaptureFile, RoundTripsWithoutSecrets) {
  const std::string path = TempPath("roundtrip");
  {
    auto w = CaptureWriter::Open(path, {}, 12345);
    ASSERT_TRUE(w.ok()) << w.error().message;
    for (int i = 0; i < 3; ++i) (*w)->Write(Request(i));
    (*w)->Write(Etcd());
    EXPECT_EQ((*w)->stats().records, 4u);
  }
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // No body, no etcd key, no object name from a key.
  EXPECT_EQ(bytes.find("aHVudGVyMg"), std::string::npos);
  EXPECT_EQ(bytes.find("bootstrap-token"), std::string::npos);

  auto r = CaptureReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ((*r)->header().version, kCaptureVersion);
  EXPECT_EQ((*r)->header().realtime_offset_ns, 12345);
  for (int i = 0; i < 3; ++i) {
    auto next = (*r)->Next();
    ASSERT_TRUE(next.ok() && next->has_value());
    const RequestRecord& got = std::get<RequestRecord>(**next);
    RequestRecord want = Request(i);
    EXPECT_EQ(got.conn_id, want.conn_id);
    EXPECT_EQ(got.stream_id, want.stream_id);
    EXPECT_EQ(got.end_ns, want.end_ns);
    EXPECT_EQ(got.path, want.path);
    EXPECT_EQ(got.status, 409);
    EXPECT_EQ(got.response.generation, 7);
    EXPECT_EQ(got.response.finalizers, want.response.finalizers);
    EXPECT_TRUE(got.response.finalizers_seen);
    EXPECT_EQ(got.response.retry_after_s, -1);
    EXPECT_EQ(got.identity->user, want.identity->user);
    EXPECT_EQ(got.identity->kind, Identity::Kind::kServiceAccount);
    EXPECT_EQ(got.identity->pod_name, "operator-7d9f");
    EXPECT_EQ(got.identity->groups, want.identity->groups);
    EXPECT_EQ(got.etcd.keys, 500);
    EXPECT_TRUE(got.response_body_prefix.empty());
  }
  auto next = (*r)->Next();
  ASSERT_TRUE(next.ok() && next->has_value());
  const EtcdRequest& e = std::get<EtcdRequest>(**next);
  EXPECT_EQ(e.method, "/etcdserverpb.KV/Range");
  EXPECT_EQ(e.request, EtcdMessage::kRangeRequest);
  EXPECT_EQ(e.decoded.resource, "secrets");
  EXPECT_EQ(e.decoded.namespace_, "kube-system");
  EXPECT_EQ(e.decoded.name, "");
  EXPECT_TRUE(e.key.empty());
  EXPECT_EQ(e.kvs, 3);
  EXPECT_EQ(e.kv_bytes, 999u);
  EXPECT_TRUE(e.more);
  EXPECT_EQ(e.code, 11);
  EXPECT_EQ(e.identity.user, "kube-apiserver-etcd-client");
  next = (*r)->Next();
  ASSERT_TRUE(next.ok());
  EXPECT_FALSE(next->has_value());
  std::filesystem::remove(path);
}

TEST(CaptureFile, RecordsOfOneClientShareTheIdentityReadBack) {
  // As live records share the identity cache's: one identity per client, not one per record;
  // a record whose identity differs in any field gets its own.
  const std::string path = TempPath("shared-identities");
  std::vector<RequestRecord> written(6, Request(0));
  EditIdentity(written[2]).user_agent = "operator/v2";  // a new user agent: a new identity
  EditIdentity(written[4]).groups = {"system:masters"};  // same user, pod and agent; groups differ
  {
    auto w = CaptureWriter::Open(path, {}, 0);
    ASSERT_TRUE(w.ok()) << w.error().message;
    for (const RequestRecord& r : written) (*w)->Write(r);
  }
  auto r = CaptureReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.error().message;
  std::vector<IdentityRef> read;
  for (size_t i = 0; i < written.size(); ++i) {
    auto next = (*r)->Next();
    ASSERT_TRUE(next.ok() && next->has_value());
    read.push_back(std::get<RequestRecord>(**next).identity);
    EXPECT_EQ(*read.back(), *ShareIdentity(*written[i].identity)) << i;  // keys included
    EXPECT_TRUE(read.back()->keys_set);
  }
  EXPECT_EQ(read[1], read[0]);
  EXPECT_NE(read[2], read[0]);
  EXPECT_EQ(read[2]->user_agent, "operator/v2");
  EXPECT_EQ(read[3], read[0]);  // the first identity again
  EXPECT_NE(read[4], read[0]);
  EXPECT_EQ(read[4]->groups, std::vector<std::string>{"system:masters"});
  EXPECT_EQ(read[5]->groups, std::vector<std::string>{"system:serviceaccounts"});
  std::filesystem::remove(path);
}

TEST(CaptureFile, RotationBoundsTheDiskUsed) {
  const std::string path = TempPath("rotate");
  const CaptureLimits limits{.max_file_bytes = 8192, .max_files = 3};
  {
    auto w = CaptureWriter::Open(path, limits, 0);
    ASSERT_TRUE(w.ok());
    for (int i = 0; i < 1000; ++i) (*w)->Write(Request(i));
    EXPECT_GT((*w)->stats().rotations, 10u);
  }
  uint64_t total = 0;
  int files = 0;
  for (const std::string& p : {path, path + ".1", path + ".2", path + ".3"}) {
    if (!std::filesystem::exists(p)) continue;
    ++files;
    EXPECT_LE(std::filesystem::file_size(p), limits.max_file_bytes);
    total += std::filesystem::file_size(p);
    // Each file stands alone: a header, then whole records.
    auto r = CaptureReader::Open(p);
    ASSERT_TRUE(r.ok()) << r.error().message;
    int n = 0;
    while (true) {
      auto next = (*r)->Next();
      ASSERT_TRUE(next.ok()) << next.error().message;
      if (!next->has_value()) break;
      ++n;
    }
    EXPECT_GT(n, 0);
    EXPECT_EQ((*r)->truncated_tail_bytes(), 0u);
    std::filesystem::remove(p);
  }
  EXPECT_EQ(files, 3);
  EXPECT_LE(total, limits.max_file_bytes * limits.max_files);
}

TEST(CaptureFile, WhatIsNotACaptureIsRefused) {
  const std::string path = TempPath("bad");
  auto write = [&](const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; };
  write("#!/bin/sh\necho not a capture\n");
  EXPECT_FALSE(CaptureReader::Open(path).ok());
  write("");
  EXPECT_FALSE(CaptureReader::Open(path).ok());
  {
    auto w = CaptureWriter::Open(path, {}, 0);
    ASSERT_TRUE(w.ok());
    (*w)->Write(Request(1));
    (*w)->Write(Request(2));
  }
  std::ifstream in(path, std::ios::binary);
  std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  // Cut in the middle of the last record (a crash): the first record stands, the end is clean.
  write(good.substr(0, good.size() - 20));
  {
    auto r = CaptureReader::Open(path);
    ASSERT_TRUE(r.ok());
    auto first = (*r)->Next();
    ASSERT_TRUE(first.ok() && first->has_value());
    auto second = (*r)->Next();
    ASSERT_TRUE(second.ok());
    EXPECT_FALSE(second->has_value());
    EXPECT_GT((*r)->truncated_tail_bytes(), 0u);
  }
  // A record size beyond any record of ours, and garbage where a record should be.
  auto header_end = [&] {
    auto r = CaptureReader::Open(path);
    return r.ok();
  };
  ASSERT_TRUE(header_end());
  std::string huge = good;
  size_t first_record = static_cast<unsigned char>(good[0]) + 1;  // header size < 128: one byte
  huge.replace(first_record, 1, "\xff\xff\xff\xff\x0f");
  write(huge);
  {
    auto r = CaptureReader::Open(path);
    ASSERT_TRUE(r.ok());
    auto next = (*r)->Next();
    EXPECT_FALSE(next.ok());
  }
  std::string garbage = good;
  for (size_t i = first_record + 1; i < first_record + 40 && i < garbage.size(); ++i) garbage[i] = '\xff';
  write(garbage);
  {
    auto r = CaptureReader::Open(path);
    ASSERT_TRUE(r.ok());
    auto next = (*r)->Next();
    EXPECT_FALSE(next.ok());
  }
  // Another version: refused with the versions named.
  std::string other = good;
  size_t version_at = other.find(std::string("\x10\x01", 2));  // field 2 (version), varint 1
  ASSERT_NE(version_at, std::string::npos);
  other[version_at + 1] = 2;
  write(other);
  auto r = CaptureReader::Open(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("version 2"), std::string::npos) << r.error().message;
  std::filesystem::remove(path);
}

// Replay of a file it did not write: a record's clock jumping by years is not ticked through
// second by second (it took hours), and a time past any monotonic clock is refused.
TEST(CaptureFile, ReplayOfClockJumpsIsBoundedAndOutOfRangeTimesRefused) {
  const std::string path = TempPath("clock");
  auto replay = [&](std::vector<uint64_t> ends, uint64_t last_start = 0) {
    {
      auto w = CaptureWriter::Open(path, {}, 0);
      EXPECT_TRUE(w.ok());
      for (size_t i = 0; i < ends.size(); ++i) {
        RequestRecord r = Request(static_cast<int>(i));
        r.start_ns = r.end_ns = ends[i];
        if (i + 1 == ends.size() && last_start != 0) r.start_ns = last_start;
        (*w)->Write(r);
      }
    }
    auto reader = CaptureReader::Open(path);
    EXPECT_TRUE(reader.ok());
    PrometheusExporter exporter;
    MeteredPipeline pipeline(&exporter, DetectorsConfig{}, [](const StormTransition&) {});
    return ReplayCapture(**reader, pipeline, false, 30);
  };
  auto start = std::chrono::steady_clock::now();
  auto jumped = replay({1'000'000'000ull, 1'000'000'000ull + (uint64_t{100} * 365 * 86400) * 1'000'000'000ull});
  ASSERT_TRUE(jumped.ok()) << jumped.error().message;
  EXPECT_EQ(jumped->requests, 2u);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  auto out_of_range = replay({1'000'000'000ull, uint64_t{1} << 63});
  EXPECT_FALSE(out_of_range.ok());
  auto start_out_of_range = replay({1'000'000'000ull, 2'000'000'000ull}, ~uint64_t{0} - 3999);
  ASSERT_FALSE(start_out_of_range.ok());
  EXPECT_NE(start_out_of_range.error().message.find("corrupt capture file"), std::string::npos);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace stormwatch

namespace stormwatch {
namespace {

// Header values may carry obs-text (bytes 0x80-0xff, RFC 9110) and a path any bytes the server
// took: a capture keeps them as they were and reads them back (proto3 `string` fields would
// refuse the record as invalid UTF-8 and make the whole file unreadable from there).
TEST(CaptureFile, BytesThatAreNotUtf8RoundTrip) {
  const std::string path = TempPath("utf8");
  RequestRecord r = Request(1);
  EditIdentity(r).user_agent = "kubectl/\xff\xfe (linux)";
  r.path = "/api/v1/namespaces/x/configmaps/\x80\xc3";
  EditIdentity(r).user = "system:serviceaccount:ns:\xe9";
  {
    auto w = CaptureWriter::Open(path, {}, 0);
    ASSERT_TRUE(w.ok());
    (*w)->Write(r);
    (*w)->Write(Request(2));
  }
  auto reader = CaptureReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  auto first = (*reader)->Next();
  ASSERT_TRUE(first.ok()) << first.error().message;
  ASSERT_TRUE(first->has_value());
  const auto& got = std::get<RequestRecord>(**first);
  EXPECT_EQ(got.identity->user_agent, r.identity->user_agent);
  EXPECT_EQ(got.path, r.path);
  EXPECT_EQ(got.identity->user, r.identity->user);
  auto second = (*reader)->Next();
  ASSERT_TRUE(second.ok()) << second.error().message;
  EXPECT_TRUE(second->has_value());
  reader->reset();

  // The header's hostname is gethostname()'s: any bytes on Linux. One that is not UTF-8 (patched
  // in place: same length) still opens the file.
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const size_t at = bytes.find(std::string("\x2a") + static_cast<char>(std::strlen(host)) + host);
  ASSERT_NE(at, std::string::npos);
  bytes[at + 2] = '\xff';
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  auto patched = CaptureReader::Open(path);
  ASSERT_TRUE(patched.ok()) << patched.error().message;
  EXPECT_EQ((*patched)->header().hostname, "\xff" + std::string(host + 1));
  auto record = (*patched)->Next();
  ASSERT_TRUE(record.ok() && record->has_value());
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace stormwatch
