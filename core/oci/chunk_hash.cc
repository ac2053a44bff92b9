#include "core/oci/chunk_hash.h"

#include <openssl/evp.h>

#include "absl/strings/str_cat.h"
#include "blake3.h"

namespace modelfs {

struct ChunkHasher::State {
  EVP_MD_CTX* md = nullptr;  // SHA-256
  blake3_hasher blake3;      // BLAKE3
  ~State() { EVP_MD_CTX_free(md); }
};

std::string_view ChunkDigestName(ChunkDigestAlgorithm algorithm) {
  return algorithm == ChunkDigestAlgorithm::kBlake3 ? "blake3" : "sha256";
}

absl::StatusOr<ChunkDigestAlgorithm> ParseChunkDigestName(std::string_view name) {
  if (name == "blake3") return ChunkDigestAlgorithm::kBlake3;
  if (name == "sha256") return ChunkDigestAlgorithm::kSha256;
  return absl::InvalidArgumentError(
      absl::StrCat("chunk digest \"", std::string(name), "\" is not one of: blake3, sha256"));
}

bool KnownChunkDigestAlgorithm(uint32_t value) {
  return value == static_cast<uint32_t>(ChunkDigestAlgorithm::kSha256) ||
         value == static_cast<uint32_t>(ChunkDigestAlgorithm::kBlake3);
}

ChunkHasher::ChunkHasher(ChunkDigestAlgorithm algorithm)
    : algorithm_(algorithm), state_(std::make_unique<State>()) {
  if (algorithm_ == ChunkDigestAlgorithm::kBlake3) {
    blake3_hasher_init(&state_->blake3);
  } else {
    state_->md = EVP_MD_CTX_new();
    EVP_DigestInit_ex(state_->md, EVP_sha256(), nullptr);
  }
}

ChunkHasher::~ChunkHasher() = default;
ChunkHasher::ChunkHasher(ChunkHasher&&) noexcept = default;
ChunkHasher& ChunkHasher::operator=(ChunkHasher&&) noexcept = default;

void ChunkHasher::Update(const void* data, size_t n) {
  if (algorithm_ == ChunkDigestAlgorithm::kBlake3) {
    blake3_hasher_update(&state_->blake3, data, n);
  } else {
    EVP_DigestUpdate(state_->md, data, n);
  }
}

ChunkHash ChunkHasher::Finish() {
  ChunkHash out{};
  if (algorithm_ == ChunkDigestAlgorithm::kBlake3) {
    blake3_hasher_finalize(&state_->blake3, out.data(), out.size());
    blake3_hasher_init(&state_->blake3);
  } else {
    unsigned int n = 0;
    EVP_DigestFinal_ex(state_->md, out.data(), &n);
    EVP_DigestInit_ex(state_->md, EVP_sha256(), nullptr);
  }
  return out;
}

ChunkHash HashChunkBytes(ChunkDigestAlgorithm algorithm, std::string_view bytes) {
  ChunkHasher h(algorithm);
  h.Update(bytes);
  return h.Finish();
}

}  // namespace modelfs
