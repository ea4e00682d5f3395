// Capture files: every request record and etcd call the pipeline saw, for a post-mortem and for
// rerunning the detectors offline (`stormwatch replay`). Format: proto/capture.proto, framed as
// length-delimited protobuf messages; a FileHeader first (magic, version), then Records.
//
// What is written is what the pipeline had after identity resolution, with the secrets already
// gone: no Authorization value, no certificate, no body, no etcd key (its decoded resource and
// namespace instead). Bounded: a file is closed at max_file_bytes and the next one opened as
// FILE.1, FILE.2, ... keeping at most max_files (the oldest removed), so a recording never takes
// more than max_file_bytes * max_files of disk.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <variant>

#include "agent/core/bounded_lru.h"
#include "agent/core/etcd_request.h"
#include "agent/core/request_record.h"
#include "agent/core/result.h"

namespace stormwatch {
namespace capture::v1 {
class Record;
}


inline constexpr char kCaptureMagic[] = "stormwatch-capture";
inline constexpr uint32_t kCaptureVersion = 1;
// A record larger than this is not a record of ours: the reader stops with an error.
inline constexpr uint32_t kMaxCaptureRecordBytes = 1u << 20;

struct CaptureLimits {
  uint64_t max_file_bytes = 256ull << 20;
  uint32_t max_files = 4;  // the current file and up to max_files - 1 older ones
};

struct CaptureWriterStats {
  uint64_t records = 0;
  uint64_t bytes = 0;
  uint64_t rotations = 0;
  uint64_t write_errors = 0;
};

class CaptureWriter {
 public:
  // Opens (truncates) `path` and writes its header. `realtime_offset_ns`: CLOCK_REALTIME -
  // CLOCK_MONOTONIC, so record times can be read as wall-clock times.
  static Result<std::unique_ptr<CaptureWriter>> Open(const std::string& path, CaptureLimits limits,
                                                     int64_t realtime_offset_ns);
  ~CaptureWriter();

  void Write(const RequestRecord& r);
  void Write(const EtcdRequest& r);
  void Flush();
  const CaptureWriterStats& stats() const { return stats_; }

 private:
  CaptureWriter(std::string path, CaptureLimits limits, int64_t realtime_offset_ns)
      : path_(std::move(path)), limits_(limits), realtime_offset_ns_(realtime_offset_ns) {}
  bool OpenCurrent();
  void WriteFramed(const std::string& bytes);
  void WriteRecord(const std::string& bytes);  // a serialized Record, rotating first if full
  void Rotate();

  std::string path_;
  CaptureLimits limits_;
  int64_t realtime_offset_ns_;
  std::ofstream out_;
  uint64_t file_bytes_ = 0;
  uint32_t sequence_ = 0;
  CaptureWriterStats stats_;
  std::string scratch_;
};

struct CaptureHeader {
  uint32_t version = 0;
  std::string agent_version;
  std::string hostname;
  int64_t realtime_offset_ns = 0;
  uint32_t sequence = 0;
};

using CaptureRecord = std::variant<RequestRecord, EtcdRequest>;

class CaptureReader {
 public:
  // Opens `path` and checks its header: not a capture file, or a version this reader does not
  // know, is an error.
  static Result<std::unique_ptr<CaptureReader>> Open(const std::string& path);
  ~CaptureReader();
  const CaptureHeader& header() const { return header_; }
  // The next record; nullopt at the end. A truncated last record (a recording cut by a crash)
  // ends the file; a corrupt one (undecodable, or larger than kMaxCaptureRecordBytes) is an
  // error naming its offset.
  Result<std::optional<CaptureRecord>> Next();
  uint64_t truncated_tail_bytes() const { return truncated_tail_; }

 private:
  std::ifstream in_;
  std::string path_;
  CaptureHeader header_;
  uint64_t offset_ = 0;
  uint64_t truncated_tail_ = 0;
  std::string scratch_;
  // One decoded record, reused: its strings and sub-messages keep their memory between records.
  std::unique_ptr<capture::v1::Record> record_;
  // The requests' identities read so far: the records of one client share one identity, as
  // live records share the identity cache's, so a replay neither builds nor compares a copy
  // per record. As many as that cache holds by default (limits.max_identities).
  static constexpr size_t kSharedIdentities = 16384;
  BoundedLru<uint64_t, IdentityRef> identities_{kSharedIdentities};
};

}  // namespace stormwatch
