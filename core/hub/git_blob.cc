#include "core/hub/git_blob.h"

#include <openssl/evp.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace modelfs {

struct GitBlobHasher::Ctx {
  EVP_MD_CTX* md = nullptr;
  ~Ctx() { EVP_MD_CTX_free(md); }
};

GitBlobHasher::GitBlobHasher(uint64_t size) : ctx_(std::make_unique<Ctx>()) {
  ctx_->md = EVP_MD_CTX_new();
  // An allocation failure here is not recoverable input; OpenSSL only fails on OOM.
  EVP_DigestInit_ex(ctx_->md, EVP_sha1(), nullptr);
  const std::string header = absl::StrCat("blob ", size);
  EVP_DigestUpdate(ctx_->md, header.data(), header.size() + 1);  // with the NUL
}

GitBlobHasher::~GitBlobHasher() = default;
GitBlobHasher::GitBlobHasher(GitBlobHasher&&) noexcept = default;
GitBlobHasher& GitBlobHasher::operator=(GitBlobHasher&&) noexcept = default;

void GitBlobHasher::Update(std::string_view bytes) {
  EVP_DigestUpdate(ctx_->md, bytes.data(), bytes.size());
}

std::string GitBlobHasher::FinishHex() {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx_->md, out, &n);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(out), static_cast<size_t>(n)));
}

std::string GitBlobSha1Hex(std::string_view bytes) {
  GitBlobHasher h(bytes.size());
  h.Update(bytes);
  return h.FinishHex();
}

}  // namespace modelfs
