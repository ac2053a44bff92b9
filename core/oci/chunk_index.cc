#include "core/oci/chunk_index.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/oci/index_fields.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

constexpr std::string_view kMagic("MFSCIDX\0", 8);

using index_fields::GetDigest;
using index_fields::GetLE;
using index_fields::PutDigest;
using index_fields::PutU32;
using index_fields::PutU64;

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
  const ChunkHash got = HashChunkBytes(algorithm, bytes);
  if (got != chunks[i]) {
    return absl::DataLossError(
        absl::StrCat("chunk ", i, " of ", blob_digest.str(), " at offset ", ChunkOffset(i), ": ",
                     std::string(ChunkDigestName(algorithm)), " mismatch (got ",
                     std::string(Digest::FromRaw(got).short_hex()), ", want ",
                     std::string(Digest::FromRaw(chunks[i]).short_hex()), ")"));
  }
  return absl::OkStatus();
}

ChunkIndexBuilder::ChunkIndexBuilder(uint64_t chunk_size, ChunkDigestAlgorithm algorithm)
    : chunk_size_(ChunkIndex::ValidChunkSize(chunk_size) ? chunk_size
                                                         : ChunkIndex::kDefaultChunkSize),
      chunk_(algorithm) {}

void ChunkIndexBuilder::Update(std::string_view bytes) {
  whole_.Update(bytes);
  total_ += bytes.size();
  while (!bytes.empty()) {
    const uint64_t take = std::min<uint64_t>(bytes.size(), chunk_size_ - in_chunk_);
    chunk_.Update(bytes.substr(0, take));
    in_chunk_ += take;
    bytes.remove_prefix(take);
    if (in_chunk_ == chunk_size_) {
      chunks_.push_back(chunk_.Finish());
      in_chunk_ = 0;
    }
  }
}

ChunkIndex ChunkIndexBuilder::Finish() {
  if (in_chunk_ > 0) {
    chunks_.push_back(chunk_.Finish());
    in_chunk_ = 0;
  }
  ChunkIndex index;
  index.algorithm = chunk_.algorithm();
  index.blob_digest = whole_.Finish();
  index.blob_size = total_;
  index.chunk_size = chunk_size_;
  index.chunks = std::move(chunks_);
  return index;
}

ChunkIndex BuildChunkIndex(std::string_view blob, uint64_t chunk_size,
                           ChunkDigestAlgorithm algorithm) {
  ChunkIndexBuilder b(chunk_size, algorithm);
  b.Update(blob);
  return b.Finish();
}

namespace {
bool WrittenAsV1(const ChunkIndex& index) {
  return index.algorithm == ChunkDigestAlgorithm::kSha256 &&
         index.content == ChunkIndex::Content::kStored;
}
}  // namespace

uint64_t SerializedChunkIndexSize(uint64_t blob_size, uint64_t chunk_size,
                                  ChunkDigestAlgorithm algorithm) {
  const uint64_t count = chunk_size == 0 ? 0 : (blob_size + chunk_size - 1) / chunk_size;
  return (algorithm == ChunkDigestAlgorithm::kSha256 ? ChunkIndex::kHeaderSizeV1
                                                     : ChunkIndex::kHeaderSizeV2) +
         32 * count;
}

std::string SerializeChunkIndex(const ChunkIndex& index) {
  const bool v1 = WrittenAsV1(index);
  std::string out;
  out.reserve((v1 ? ChunkIndex::kHeaderSizeV1 : ChunkIndex::kHeaderSizeV2) +
              32 * index.chunks.size());
  out.append(kMagic);
  if (v1) {
    PutU32(out, ChunkIndex::kVersion1);
  } else {
    PutU32(out, ChunkIndex::kVersion2);
    PutU32(out, static_cast<uint32_t>(index.algorithm));
    PutU32(out, static_cast<uint32_t>(index.content));
    PutU32(out, 0);  // reserved
  }
  PutU64(out, index.chunk_size);
  PutU64(out, index.blob_size);
  PutDigest(out, index.blob_digest);
  PutU64(out, index.chunks.size());
  for (const auto& c : index.chunks) out.append(reinterpret_cast<const char*>(c.data()), c.size());
  return out;
}

absl::StatusOr<ChunkIndex> ParseChunkIndex(std::string_view bytes) {
  ASSIGN_OR_RETURN(const uint64_t version, index_fields::ReadVersion(bytes, kMagic, "chunk index"));
  if (version != ChunkIndex::kVersion1 && version != ChunkIndex::kVersion2) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk index: version is ", version, ", this build reads versions 1 and 2"));
  }
  const size_t header =
      version == ChunkIndex::kVersion1 ? ChunkIndex::kHeaderSizeV1 : ChunkIndex::kHeaderSizeV2;
  if (bytes.size() < header) {
    return absl::OutOfRangeError(absl::StrCat("chunk index: truncated: ", bytes.size(),
                                              " bytes, the version ", version, " header alone is ",
                                              header));
  }
  ChunkIndex index;
  size_t at = 12;
  if (version == ChunkIndex::kVersion2) {
    const uint64_t algorithm = GetLE(bytes, 12, 4);
    if (!KnownChunkDigestAlgorithm(static_cast<uint32_t>(algorithm))) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk index: hash algorithm ", algorithm,
                       " is not one this build knows (1 sha256, 2 blake3)"));
    }
    index.algorithm = static_cast<ChunkDigestAlgorithm>(algorithm);
    const uint64_t content = GetLE(bytes, 16, 4);
    const uint64_t reserved = GetLE(bytes, 20, 4);
    if (content > 1 || reserved != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chunk index: content ", content, " is not 0 (stored bytes) or 1 (uncompressed bytes)",
          " or reserved ", reserved, " is not 0"));
    }
    index.content = static_cast<ChunkIndex::Content>(content);
    if (index.algorithm == ChunkDigestAlgorithm::kSha256 &&
        index.content == ChunkIndex::Content::kStored) {
      // One form per index: SHA-256 of stored bytes is written as version 1.
      return absl::InvalidArgumentError(
          "chunk index: version 2 names sha256 of stored bytes, which is written as version 1");
    }
    at = 24;
  }
  index.chunk_size = GetLE(bytes, at, 8);
  index.blob_size = GetLE(bytes, at + 8, 8);
  index.blob_digest = GetDigest(bytes, at + 16);
  const uint64_t count = GetLE(bytes, at + 48, 8);
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
  const uint64_t body = bytes.size() - header;
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
    memcpy(index.chunks[i].data(), bytes.data() + header + 32 * i, 32);
  }
  return index;
}

}  // namespace modelfs
