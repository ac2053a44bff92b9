// The fixture the BlobCache tests share: a cache over the in-memory FakeRemote in a temporary
// directory, with helpers to add layers (chunk-indexed or whole), open the cache again, and
// reach its data files. Each test file of tests/cache drives one part of the cache through it.
#pragma once

#include "core/cache/blob_cache.h"
#include "core/cache/fs_verity.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "testsupport/fakes/fake_clock.h"
#include "testsupport/fakes/fake_remote.h"
#include "testsupport/testing/skip.h"
#include "testsupport/testing/status_matchers.h"
#include "testsupport/testing/temp_dir.h"

namespace modelfs {

using ::modelfs::testing::FakeClock;
using ::modelfs::testing::FakeRemote;
using ::modelfs::testing::IsOk;
using ::modelfs::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kChunk = 4096;

inline std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

inline ChunkIndex MakeIndex(const Digest& digest, const std::string& blob, uint64_t chunk_size,
                            ChunkDigestAlgorithm algorithm = ChunkDigestAlgorithm::kSha256) {
  ChunkIndex idx;
  idx.blob_digest = digest;
  idx.blob_size = blob.size();
  idx.chunk_size = chunk_size;
  idx.algorithm = algorithm;
  for (uint64_t off = 0; off < blob.size(); off += chunk_size) {
    idx.chunks.push_back(HashChunkBytes(algorithm, std::string_view(blob).substr(off, chunk_size)));
  }
  return idx;
}

class BlobCacheTest : public ::testing::Test {
 protected:
  CacheOptions Options() {
    CacheOptions o;
    o.dir = dir_.Join("cache").string();
    o.fetch_threads = 4;
    o.read_deadline = absl::Seconds(20);
    o.whole_chunk_size = kChunk;
    o.verify_when_idle = absl::ZeroDuration();
    o.retry.initial_backoff = absl::Milliseconds(5);
    o.retry.max_backoff = absl::Milliseconds(20);
    o.verity = verity_;
    o.log = [this](const log::Event& e) {
      absl::MutexLock lock(&log_mu_);
      log_.push_back(log::FormatLine(e, absl::UnixEpoch(), log::Format::kLogfmt));
    };
    return o;
  }

  // Caches all of `blob` (chunk mode) in a cache that is then closed: the layer is verified
  // whole and sealed on disk.
  Digest CacheWholeAndClose(const std::string& blob) {
    auto cache = Open();
    Digest d = AddChunked(*cache, blob);
    EXPECT_OK(cache->Read(d, 0, blob.size()));
    EXPECT_TRUE(Idle(*cache));
    EXPECT_TRUE(cache->GetLayerInfo(d)->whole_verified);
    return d;
  }
  // Registers `blob` again, as a model would after a restart.
  absl::Status RegisterChunked(BlobCache& cache, const Digest& d, const std::string& blob) {
    return cache.RegisterLayer(
        LayerSpec{d, blob.size(), MakeIndex(d, blob, kChunk), VerifyMode::kChunk, "m1"});
  }
  // The cache's data file of `d`.
  std::string DataPath(const Digest& d) {
    return (dir_.Join("cache") / "blobs" / "sha256" / (std::string(d.hex()) + ".data")).string();
  }
  // Writes one byte into the cache's data file of `d`, as a disk error or a person would.
  void WriteDataFile(const Digest& d, uint64_t offset, char byte) {
    std::fstream f(dir_.Join("cache") / "blobs" / "sha256" / (std::string(d.hex()) + ".data"),
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(&byte, 1);
  }

  std::unique_ptr<BlobCache> Open(CacheOptions o) {
    auto cache = BlobCache::Open(std::move(o), &remote_);
    EXPECT_THAT(cache, IsOk());
    return cache.ok() ? std::move(*cache) : nullptr;
  }
  std::unique_ptr<BlobCache> Open() { return Open(Options()); }

  // Adds a blob to the fake remote and registers it with a chunk index.
  Digest AddChunked(BlobCache& cache, const std::string& blob, const std::string& model = "m1") {
    Digest d = remote_.AddBlob(blob);
    LayerSpec spec;
    spec.digest = d;
    spec.size = blob.size();
    spec.index = MakeIndex(d, blob, kChunk);
    spec.mode = VerifyMode::kChunk;
    spec.model_ref = model;
    EXPECT_OK(cache.RegisterLayer(spec));
    return d;
  }
  Digest AddWhole(BlobCache& cache, const std::string& blob, VerifyMode mode,
                  const std::string& model = "m1") {
    Digest d = remote_.AddBlob(blob);
    LayerSpec spec;
    spec.digest = d;
    spec.size = blob.size();
    spec.mode = mode;
    spec.model_ref = model;
    EXPECT_OK(cache.RegisterLayer(spec));
    return d;
  }

  std::string Logged() {
    absl::MutexLock lock(&log_mu_);
    std::string all;
    for (const auto& l : log_) absl::StrAppend(&all, l, "\n");
    return all;
  }

  static bool Idle(BlobCache& cache) { return cache.WaitIdle(absl::Now() + absl::Seconds(20)); }

  modelfs::testing::TempDir dir_;
  VerityOps* verity_ = nullptr;  // null: the kernel's
  FakeRemote remote_;
  absl::Mutex log_mu_;
  std::vector<std::string> log_;
};

}  // namespace modelfs
