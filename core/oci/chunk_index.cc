#include "core/oci/chunk_index.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace modelfs {
namespace {

constexpr std::string_view kMagic("MFSCIDX\0", 8);

void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t GetLE(std::string_view b, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i)
    v |= static_cast<uint64_t>(static_cast<uint8_t>(b[at + i])) << (8 * i);
  return v;
}

std::array<uint8_t, 32> RawOf(Sha256& h) { return h.Finish().raw(); }

}  // namespace

bool ChunkIndex::ValidChunkSize(uint64_t chunk_size) {
  return chunk_size >= kMinChunkSize && chunk_size <= kMaxChunkSize &&
         (chunk_size & (chunk_size - 1)) == 0;
}

uint64_t ChunkIndex::ChunkLength(uint64_t i) const {
  if (i >= chunks.size()) return 0;
  uint64_t start = i * chunk_size;
  return std::min(chunk_size, blob_size - start);
}

absl::Status ChunkIndex::VerifyChunk(uint64_t i, std::string_view bytes) const {
  if (i >= chunks.size()) {
    return absl::OutOfRangeError(absl::StrCat("chunk ", i, " of ", blob_digest.str(),
                                              " is past the last chunk (", chunks.size(), ")"));
  }
  const uint64_t want = ChunkLength(i);
  if (bytes.size() != want) {
    return absl::DataLossError(absl::StrCat("chunk ", i, " of ", blob_digest.str(), " at offset ",
                                            ChunkOffset(i), ": got ", bytes.size(), " bytes, want ",
                                            want));
  }
  Digest got = Digest::Of(bytes);
  if (got.raw() != chunks[i]) {
    return absl::DataLossError(
        absl::StrCat("chunk ", i, " of ", blob_digest.str(), " at offset ", ChunkOffset(i),
                     ": sha256 mismatch (got ", std::string(got.short_hex()), ", want ",
                     std::string(Digest::FromRaw(chunks[i]).short_hex()), ")"));
  }
  return absl::OkStatus();
}

ChunkIndexBuilder::ChunkIndexBuilder(uint64_t chunk_size)
    : chunk_size_(ChunkIndex::ValidChunkSize(chunk_size) ? chunk_size
                                                         : ChunkIndex::kDefaultChunkSize) {}

void ChunkIndexBuilder::Update(std::string_view bytes) {
  whole_.Update(bytes);
  total_ += bytes.size();
  while (!bytes.empty()) {
    const uint64_t take = std::min<uint64_t>(bytes.size(), chunk_size_ - in_chunk_);
    chunk_.Update(bytes.substr(0, take));
    in_chunk_ += take;
    bytes.remove_prefix(take);
    if (in_chunk_ == chunk_size_) {
      chunks_.push_back(RawOf(chunk_));
      chunk_ = Sha256();
      in_chunk_ = 0;
    }
  }
}

ChunkIndex ChunkIndexBuilder::Finish() {
  if (in_chunk_ > 0) {
    chunks_.push_back(RawOf(chunk_));
    in_chunk_ = 0;
  }
  ChunkIndex index;
  index.blob_digest = whole_.Finish();
  index.blob_size = total_;
  index.chunk_size = chunk_size_;
  index.chunks = std::move(chunks_);
  return index;
}

ChunkIndex BuildChunkIndex(std::string_view blob, uint64_t chunk_size) {
  ChunkIndexBuilder b(chunk_size);
  b.Update(blob);
  return b.Finish();
}

std::string SerializeChunkIndex(const ChunkIndex& index) {
  std::string out;
  out.reserve(ChunkIndex::kHeaderSize + 32 * index.chunks.size());
  out.append(kMagic);
  PutU32(out, ChunkIndex::kVersion);
  PutU64(out, index.chunk_size);
  PutU64(out, index.blob_size);
  const std::array<uint8_t, 32> raw = index.blob_digest.raw();
  out.append(reinterpret_cast<const char*>(raw.data()), raw.size());
  PutU64(out, index.chunks.size());
  for (const auto& c : index.chunks) out.append(reinterpret_cast<const char*>(c.data()), c.size());
  return out;
}

absl::StatusOr<ChunkIndex> ParseChunkIndex(std::string_view bytes) {
  if (bytes.size() < ChunkIndex::kHeaderSize) {
    return absl::OutOfRangeError(
        absl::StrCat("chunk index: truncated: ", bytes.size(), " bytes, the header alone is 68"));
  }
  if (bytes.substr(0, 8) != kMagic) {
    return absl::InvalidArgumentError("chunk index: bad magic (want \"MFSCIDX\\0\")");
  }
  const uint64_t version = GetLE(bytes, 8, 4);
  if (version != ChunkIndex::kVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk index: version is ", version, ", this build reads version 1"));
  }
  ChunkIndex index;
  index.chunk_size = GetLE(bytes, 12, 8);
  index.blob_size = GetLE(bytes, 20, 8);
  std::array<uint8_t, 32> raw;
  memcpy(raw.data(), bytes.data() + 28, 32);
  index.blob_digest = Digest::FromRaw(raw);
  const uint64_t count = GetLE(bytes, 60, 8);
  if (!ChunkIndex::ValidChunkSize(index.chunk_size)) {
    return absl::InvalidArgumentError(absl::StrCat("chunk index for ", index.blob_digest.str(),
                                                   ": chunk_size ", index.chunk_size,
                                                   " is not a power of two in 64 KiB..64 MiB"));
  }
  const uint64_t want_count =
      index.blob_size / index.chunk_size + (index.blob_size % index.chunk_size ? 1 : 0);
  if (count != want_count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk index for ", index.blob_digest.str(), ": count is ", count, " but blob_size ",
        index.blob_size, " / chunk_size ", index.chunk_size, " needs ", want_count));
  }
  const uint64_t body = bytes.size() - ChunkIndex::kHeaderSize;
  if (body / 32 < count) {
    return absl::OutOfRangeError(absl::StrCat("chunk index for ", index.blob_digest.str(),
                                              ": truncated: ", count, " hashes need ", count * 32,
                                              " bytes after the header, have ", body));
  }
  if (body != count * 32) {
    return absl::InvalidArgumentError(absl::StrCat("chunk index for ", index.blob_digest.str(),
                                                   ": ", body - count * 32,
                                                   " trailing bytes after ", count, " hashes"));
  }
  index.chunks.resize(count);
  for (uint64_t i = 0; i < count; ++i) {
    memcpy(index.chunks[i].data(), bytes.data() + ChunkIndex::kHeaderSize + 32 * i, 32);
  }
  return index;
}

}  // namespace modelfs
