// RangeReader: random-access reads of a byte source (a local file, an http(s) URL, bytes in
// memory), so that format parsers read only the headers they need.
//
// Thread safety: a RangeReader is not safe for concurrent use; give each thread its own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace modelfs {

struct RangeReadStats {
  uint64_t requests = 0;  // ReadAt calls that reached the backend (HTTP requests, preads)
  uint64_t bytes = 0;     // bytes returned by the backend
};

class RangeReader {
 public:
  virtual ~RangeReader() = default;

  // The path or URL, for messages. Never contains credentials.
  virtual const std::string& name() const = 0;

  // Total size in bytes. Errors: kNotFound (no such file / HTTP 404), kUnavailable (network).
  virtual absl::StatusOr<uint64_t> Size() = 0;

  // Returns exactly `length` bytes starting at `offset`.
  // Errors: kOutOfRange when [offset, offset+length) passes the end; kInvalidArgument when an
  // HTTP server ignores Range; kUnavailable for network failures.
  virtual absl::StatusOr<std::string> ReadAt(uint64_t offset, uint64_t length) = 0;

  virtual RangeReadStats stats() const = 0;
};

// Opens a local file with pread.
absl::StatusOr<std::unique_ptr<RangeReader>> OpenFileRangeReader(const std::string& path);

// Serves bytes held in memory (tests, fuzzers, in-memory blobs).
std::unique_ptr<RangeReader> MakeMemoryRangeReader(std::string name, std::string bytes);
// The same over bytes the caller keeps alive for the reader's lifetime (no copy).
std::unique_ptr<RangeReader> MakeMemoryRangeReaderView(std::string name, std::string_view bytes);

struct HttpReaderOptions {
  long connect_timeout_ms = 10'000;
  long request_timeout_ms = 60'000;
  bool verify_tls = true;  // only false for a host explicitly configured as insecure
  std::string user_agent = "modelfs/0.1";
  std::string bearer_token;  // optional "Authorization: Bearer" value; never logged
};

// Reads an http(s) URL with Range requests through libcurl (implemented in http_range_reader.cc).
absl::StatusOr<std::unique_ptr<RangeReader>> OpenHttpRangeReader(const std::string& url,
                                                                 const HttpReaderOptions& options);

// A path or URL: "http://" and "https://" go to OpenHttpRangeReader, anything else is a file.
absl::StatusOr<std::unique_ptr<RangeReader>> OpenRangeReader(const std::string& path_or_url,
                                                             const HttpReaderOptions& options = {});

bool IsHttpUrl(const std::string& s);

}  // namespace modelfs
