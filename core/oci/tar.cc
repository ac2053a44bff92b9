#include "core/oci/tar.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/oci/path_safety.h"
#include "core/oci/tar_layout.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

using namespace tar_layout;  // NOLINT: the block's field offsets

constexpr uint64_t kMaxOctal11 = (1ull << 33) - 1;  // 11 octal digits

absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// ---- writer ------------------------------------------------------------------------------

void PutOctal(std::string& block, size_t off, size_t len, uint64_t v) {
  // len-1 zero-padded digits and a NUL.
  for (size_t i = len - 1; i-- > 0;) {
    block[off + i] = static_cast<char>('0' + (v & 7));
    v >>= 3;
  }
  block[off + len - 1] = '\0';
}

void PutNumber(std::string& block, size_t off, size_t len, uint64_t v) {
  if (len == kSizeLen && v > kMaxOctal11) {
    // GNU base-256: high bit set, big-endian value.
    block[off] = static_cast<char>(0x80);
    for (size_t i = len - 1; i >= 1; --i) {
      block[off + i] = static_cast<char>(v & 0xff);
      v >>= 8;
    }
    return;
  }
  PutOctal(block, off, len, v);
}

void PutString(std::string& block, size_t off, size_t len, std::string_view s) {
  memcpy(block.data() + off, s.data(), std::min(len, s.size()));
}

std::string MakeBlock(std::string_view name, std::string_view prefix, char typeflag, uint64_t size,
                      uint32_t mode, std::string_view linkname, bool gnu) {
  std::string b(kTarBlockSize, '\0');
  PutString(b, kNameOff, kNameLen, name);
  PutOctal(b, kModeOff, kModeLen, mode & 07777);
  PutOctal(b, kUidOff, kIdLen, 0);
  PutOctal(b, kGidOff, kIdLen, 0);
  PutNumber(b, kSizeOff, kSizeLen, size);
  PutOctal(b, kMtimeOff, kMtimeLen, 0);
  b[kTypeOff] = typeflag;
  PutString(b, kLinkOff, kLinkLen, linkname);
  PutString(b, kMagicOff, 8, gnu ? kGnuMagic : kUstarMagic);
  if (!gnu) PutString(b, kPrefixOff, kPrefixLen, prefix);
  memset(b.data() + kChksumOff, ' ', kChksumLen);
  uint32_t sum = 0;
  for (char c : b) sum += static_cast<uint8_t>(c);
  PutOctal(b, kChksumOff, 7, sum);  // six digits and a NUL, then the space already there
  return b;
}

std::string PadTo512(std::string s) {
  s.append(TarPadding(s.size()), '\0');
  return s;
}

std::string PaxRecord(std::string_view key, std::string_view value) {
  // "<len> key=value\n" where len counts itself.
  const size_t body = key.size() + value.size() + 3;  // ' ', '=', '\n'
  size_t len = body + 1;
  while (std::to_string(len).size() + body != len) len = std::to_string(len).size() + body;
  return absl::StrCat(len, " ", AV(key), "=", AV(value), "\n");
}

// Splits name into (prefix, name) for ustar, or returns false.
bool SplitUstar(std::string_view full, std::string_view* prefix, std::string_view* name) {
  if (full.size() <= kNameLen) {
    *prefix = {};
    *name = full;
    return true;
  }
  if (full.size() > kPrefixLen + 1 + kNameLen) return false;
  for (size_t i = full.size() - kNameLen - 1; i < full.size() && i <= kPrefixLen; ++i) {
    if (full[i] == '/' && i > 0 && i + 1 < full.size()) {
      *prefix = full.substr(0, i);
      *name = full.substr(i + 1);
      return true;
    }
  }
  return false;
}

// ---- reader ------------------------------------------------------------------------------

// Reads windows of the tar, growing while the scan is sequential (small files packed
// together) and falling back to a small window after skipping a large file's data.
class BlockSource {
 public:
  static constexpr uint64_t kMinWindow = 64 << 10;
  static constexpr uint64_t kMaxWindow = 8 << 20;

  BlockSource(RangeReader& reader, uint64_t size) : reader_(reader), size_(size) {}

  absl::StatusOr<std::string_view> Read(uint64_t off, uint64_t n) {
    if (off > size_ || n > size_ - off) {
      return absl::OutOfRangeError(absl::StrCat(reader_.name(), ": tar truncated: wants ", n,
                                                " bytes at offset ", off, " but the blob has ",
                                                size_));
    }
    if (off >= buf_start_ && off + n <= buf_start_ + buf_.size()) {
      return std::string_view(buf_).substr(off - buf_start_, n);
    }
    const uint64_t buf_end = buf_start_ + buf_.size();
    if (!buf_.empty() && off >= buf_end && off - buf_end < window_) {
      window_ = std::min(window_ * 2, kMaxWindow);
    } else {
      window_ = kMinWindow;
    }
    const uint64_t want = std::min(std::max(n, window_), size_ - off);
    ASSIGN_OR_RETURN(buf_, reader_.ReadAt(off, want));
    if (buf_.size() != want) {
      return absl::OutOfRangeError(absl::StrCat(reader_.name(), ": short read at offset ", off));
    }
    buf_start_ = off;
    return std::string_view(buf_).substr(0, n);
  }

 private:
  RangeReader& reader_;
  uint64_t size_;
  std::string buf_;
  uint64_t buf_start_ = 0;
  uint64_t window_ = kMinWindow;
};

}  // namespace

// ---- writer API ----------------------------------------------------------------------------

absl::StatusOr<std::string> EncodeTarHeader(std::string_view path, char typeflag, uint64_t size,
                                            uint32_t mode, std::string_view linkname,
                                            TarWriter::LongNames long_names) {
  if (typeflag != '0' && typeflag != '1' && typeflag != '2' && typeflag != '5') {
    return absl::InvalidArgumentError(absl::StrCat(
        "tar writer: unsupported typeflag '", std::string(1, typeflag), "' for '", AV(path), "'"));
  }
  RETURN_IF_ERROR(CheckRelativePath(path));
  if (typeflag == '1') RETURN_IF_ERROR(CheckRelativePath(linkname));
  if (typeflag == '2' && (linkname.empty() || linkname.find('\0') != std::string_view::npos)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tar writer: symlink '", AV(path), "' has an empty or NUL-bearing target"));
  }
  if (typeflag != '0') size = 0;
  const std::string full = typeflag == '5' ? absl::StrCat(AV(path), "/") : std::string(path);

  std::string_view prefix, name;
  const bool name_fits = SplitUstar(full, &prefix, &name);
  const bool link_fits = linkname.size() <= kLinkLen;
  const bool size_fits = size <= kMaxOctal11;
  std::string out;
  if (long_names == TarWriter::LongNames::kGnu) {
    if (!link_fits) {
      out += MakeBlock("././@LongLink", "", 'K', linkname.size() + 1, 0644, "", true);
      out += PadTo512(absl::StrCat(AV(linkname), std::string(1, '\0')));
    }
    if (full.size() > kNameLen) {
      out += MakeBlock("././@LongLink", "", 'L', full.size() + 1, 0644, "", true);
      out += PadTo512(absl::StrCat(full, std::string(1, '\0')));
    }
    out += MakeBlock(std::string_view(full).substr(0, kNameLen), "", typeflag, size, mode,
                     linkname.substr(0, kLinkLen), true);
    return out;
  }
  if (!name_fits || !link_fits || !size_fits) {
    std::string records;
    if (!name_fits) records += PaxRecord("path", full);
    if (!link_fits) records += PaxRecord("linkpath", linkname);
    if (!size_fits) records += PaxRecord("size", std::to_string(size));
    std::string_view base =
        path.substr(path.rfind('/') == std::string_view::npos ? 0 : path.rfind('/') + 1);
    const std::string pax_name = absl::StrCat("PaxHeaders.0/", AV(base.substr(0, 80)));
    out += MakeBlock(pax_name, "", 'x', records.size(), 0644, "", false);
    out += PadTo512(std::move(records));
    if (!name_fits) {
      prefix = {};
      name = std::string_view(full).substr(0, kNameLen);
    }
  }
  out += MakeBlock(name, prefix, typeflag, size, mode, linkname.substr(0, kLinkLen), false);
  return out;
}

absl::Status TarWriter::AddEntry(std::string_view path, char typeflag, std::string_view content,
                                 uint32_t mode, std::string_view linkname) {
  ASSIGN_OR_RETURN(std::string header,
                   EncodeTarHeader(path, typeflag, content.size(), mode, linkname, long_names_));
  out_ += header;
  out_.append(content);
  out_.append(TarPadding(content.size()), '\0');
  return absl::OkStatus();
}

absl::Status TarWriter::AddFile(std::string_view path, std::string_view content, uint32_t mode) {
  return AddEntry(path, '0', content, mode, {});
}
absl::Status TarWriter::AddDirectory(std::string_view path, uint32_t mode) {
  return AddEntry(path, '5', {}, mode, {});
}
absl::Status TarWriter::AddSymlink(std::string_view path, std::string_view target) {
  return AddEntry(path, '2', {}, 0777, target);
}
absl::Status TarWriter::AddHardLink(std::string_view path, std::string_view target) {
  return AddEntry(path, '1', {}, 0644, target);
}

std::string TarWriter::Finish() {
  out_.append(2 * kTarBlockSize, '\0');
  std::string out = std::move(out_);
  out_.clear();
  return out;
}

// ---- reader API ----------------------------------------------------------------------------

namespace {

// ScanTarHeaders' side of the follower: the bytes it used, path checks, the entry limit.
class ScanListener final : public TarFollower::Listener {
 public:
  ScanListener(const std::string& name, const std::function<absl::Status(const TarEntry&)>& fn,
               const TarReadOptions& options)
      : name_(name), fn_(fn), options_(options) {}

  absl::Status OnHeaderBlock(uint64_t offset, std::string_view) override {
    if (options_.on_bytes_used) options_.on_bytes_used(offset, kTarBlockSize);
    return absl::OkStatus();
  }
  absl::Status OnMetaPayload(uint64_t offset, char, std::string_view payload) override {
    if (options_.on_bytes_used) options_.on_bytes_used(offset, payload.size());
    return absl::OkStatus();
  }
  absl::Status OnEntry(const TarEntry& raw) override {
    TarEntry entry = raw;
    if (options_.check_paths) {
      if (entry.type == TarEntryType::kDirectory && IsRootPath(entry.path)) {
        return absl::OkStatus();
      }
      absl::StatusOr<std::string> norm = NormalizeRelativePath(entry.path);
      if (!norm.ok()) {
        return absl::PermissionDeniedError(absl::StrCat(
            name_, ": tar entry at offset ", entry.header_offset, ": ", norm.status().message()));
      }
      entry.path = *std::move(norm);
      if (entry.type == TarEntryType::kHardLink) {
        absl::StatusOr<std::string> link = NormalizeRelativePath(entry.linkname);
        if (!link.ok()) {
          return absl::PermissionDeniedError(absl::StrCat(name_, ": hard link '", entry.path,
                                                          "' target: ", link.status().message()));
        }
        entry.linkname = *std::move(link);
      }
    }
    if (++entries_ > options_.max_entries) {
      return absl::ResourceExhaustedError(
          absl::StrCat(name_, ": tar has more than ", options_.max_entries, " entries"));
    }
    return fn_(entry);
  }

 private:
  const std::string& name_;
  const std::function<absl::Status(const TarEntry&)>& fn_;
  const TarReadOptions& options_;
  uint64_t entries_ = 0;
};

}  // namespace

absl::Status ScanTarHeaders(RangeReader& reader,
                            const std::function<absl::Status(const TarEntry&)>& fn,
                            const TarReadOptions& options) {
  ASSIGN_OR_RETURN(const uint64_t total, reader.Size());
  BlockSource src(reader, total);
  ScanListener listener(reader.name(), fn, options);
  TarFollower follower(TarFollower::Options{reader.name(), options.max_meta_bytes, total});
  // Only header blocks and extended-header payloads are read; data is skipped.
  for (TarFollower::Want want = follower.wanted(); follower.following() && want.offset < total;
       want = follower.wanted()) {
    follower.SkipTo(want.offset);
    ASSIGN_OR_RETURN(std::string_view bytes,
                     src.Read(want.offset, std::min(want.length, total - want.offset)));
    RETURN_IF_ERROR(follower.Feed(bytes, listener));
  }
  follower.SkipTo(total);  // the last entry's padding may pass the end
  return follower.Finish();
}

absl::StatusOr<std::vector<TarEntry>> IndexTar(RangeReader& reader, const TarReadOptions& options) {
  std::vector<TarEntry> out;
  RETURN_IF_ERROR(ScanTarHeaders(
      reader,
      [&out](const TarEntry& e) {
        out.push_back(e);
        return absl::OkStatus();
      },
      options));
  return out;
}

absl::StatusOr<std::vector<TarEntry>> IndexTarBytes(std::string_view tar,
                                                    const TarReadOptions& options) {
  std::unique_ptr<RangeReader> r = MakeMemoryRangeReaderView("tar", tar);
  return IndexTar(*r, options);
}

}  // namespace modelfs
