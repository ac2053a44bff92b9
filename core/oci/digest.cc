#include "core/oci/digest.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <string.h>
#include <unistd.h>

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace modelfs {

absl::StatusOr<Digest> Digest::Parse(std::string_view s) {
  constexpr std::string_view kPrefix = "sha256:";
  bool ok = s.size() == kPrefix.size() + 64 && s.substr(0, kPrefix.size()) == kPrefix;
  for (size_t i = kPrefix.size(); ok && i < s.size(); ++i) {
    char c = s[i];
    ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid digest '", std::string(s.substr(0, 100)),
                     "': want sha256: followed by 64 lowercase hex digits"));
  }
  Digest d;
  d.str_ = std::string(s);
  return d;
}

Digest Digest::FromRaw(const std::array<uint8_t, 32>& raw) {
  Digest d;
  d.str_ = absl::StrCat("sha256:", absl::BytesToHexString(std::string(
                                       reinterpret_cast<const char*>(raw.data()), raw.size())));
  return d;
}

std::array<uint8_t, 32> Digest::raw() const {
  std::array<uint8_t, 32> out{};
  if (str_.empty()) return out;
  std::string bytes = absl::HexStringToBytes(std::string(hex()));
  memcpy(out.data(), bytes.data(), out.size());
  return out;
}

Digest Digest::Of(std::string_view bytes) {
  Sha256 h;
  h.Update(bytes);
  return h.Finish();
}

struct Sha256::Ctx {
  EVP_MD_CTX* md = nullptr;
  ~Ctx() { EVP_MD_CTX_free(md); }
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {
  ctx_->md = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr);
}
Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::Update(std::string_view bytes) { Update(bytes.data(), bytes.size()); }
void Sha256::Update(const void* data, size_t n) { EVP_DigestUpdate(ctx_->md, data, n); }

Digest Sha256::Finish() {
  std::array<uint8_t, 32> raw{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx_->md, raw.data(), &len);
  return Digest::FromRaw(raw);
}

absl::StatusOr<Digest> DigestFile(const std::string& path, uint64_t* size_out) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    std::string msg = absl::StrCat(path, ": ", strerror(errno));
    return errno == ENOENT ? absl::NotFoundError(msg) : absl::InvalidArgumentError(msg);
  }
  posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::vector<char> buf(4 << 20);
  Sha256 h;
  uint64_t total = 0;
  for (;;) {
    ssize_t n = read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      std::string msg = absl::StrCat(path, ": read: ", strerror(errno));
      close(fd);
      return absl::InternalError(msg);
    }
    if (n == 0) break;
    h.Update(buf.data(), static_cast<size_t>(n));
    total += static_cast<uint64_t>(n);
  }
  close(fd);
  if (size_out) *size_out = total;
  return h.Finish();
}

}  // namespace modelfs
