#include "core/oci/tar.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/oci/path_safety.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

// ustar header layout (POSIX.1-1988 + pax).
constexpr size_t kNameOff = 0, kNameLen = 100;
constexpr size_t kModeOff = 100, kModeLen = 8;
constexpr size_t kUidOff = 108, kGidOff = 116, kIdLen = 8;
constexpr size_t kSizeOff = 124, kSizeLen = 12;
constexpr size_t kMtimeOff = 136, kMtimeLen = 12;
constexpr size_t kChksumOff = 148, kChksumLen = 8;
constexpr size_t kTypeOff = 156;
constexpr size_t kLinkOff = 157, kLinkLen = 100;
constexpr size_t kMagicOff = 257;
constexpr size_t kDevMajorOff = 329, kDevMinorOff = 337, kDevLen = 8;
constexpr size_t kPrefixOff = 345, kPrefixLen = 155;
constexpr std::string_view kUstarMagic(
    "ustar\0"
    "00",
    8);
constexpr std::string_view kGnuMagic("ustar  \0", 8);
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

std::string_view CString(std::string_view field) {
  size_t nul = field.find('\0');
  return nul == std::string_view::npos ? field : field.substr(0, nul);
}

// Parses an octal or GNU base-256 number field. Returns an error description or "".
std::string ParseNumber(std::string_view field, uint64_t* out) {
  const uint8_t first = static_cast<uint8_t>(field[0]);
  if (first & 0x80) {
    if (first == 0xff) return "negative base-256 number";
    uint64_t v = first & 0x7f;
    for (size_t i = 1; i < field.size(); ++i) {
      if (v > (std::numeric_limits<uint64_t>::max() >> 8)) return "base-256 number overflows";
      v = (v << 8) | static_cast<uint8_t>(field[i]);
    }
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return "base-256 number overflows";
    }
    *out = v;
    return "";
  }
  size_t b = 0, e = field.size();
  while (b < e && (field[b] == ' ' || field[b] == '\0')) ++b;
  while (e > b && (field[e - 1] == ' ' || field[e - 1] == '\0')) --e;
  uint64_t v = 0;
  for (size_t i = b; i < e; ++i) {
    const char c = field[i];
    if (c < '0' || c > '7') return "not an octal number";
    if (v > (static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) >> 3)) {
      return "octal number overflows";
    }
    v = (v << 3) | static_cast<uint64_t>(c - '0');
  }
  *out = v;
  return "";
}

// A pax decimal record value ("uid", "gid", "size"): digits only, at most 19 of them.
std::optional<uint64_t> ParsePaxDecimal(std::string_view value) {
  if (value.empty() || value.size() > 18) return std::nullopt;
  uint64_t v = 0;
  for (char c : value) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

// A pax `mtime`: "[-]seconds[.fraction]" -> (seconds, nanoseconds), the fraction truncated
// to nine digits, as Go's archive/tar reads it.
std::optional<std::pair<int64_t, uint32_t>> ParsePaxTime(std::string_view value) {
  bool negative = false;
  if (!value.empty() && value[0] == '-') {
    negative = true;
    value.remove_prefix(1);
  }
  const size_t dot = value.find('.');
  std::optional<uint64_t> secs = ParsePaxDecimal(value.substr(0, dot));
  if (!secs) return std::nullopt;
  uint32_t nsec = 0;
  if (dot != std::string_view::npos) {
    std::string_view frac = value.substr(dot + 1);
    if (frac.empty()) return std::nullopt;
    for (size_t i = 0; i < frac.size(); ++i) {
      if (frac[i] < '0' || frac[i] > '9') return std::nullopt;
      if (i < 9) nsec = nsec * 10 + static_cast<uint32_t>(frac[i] - '0');
    }
    for (size_t i = frac.size(); i < 9; ++i) nsec *= 10;
  }
  int64_t s = static_cast<int64_t>(*secs);
  if (negative) {
    // -1.25 is 1.25 s before the epoch: seconds -2, nanoseconds 0.75e9.
    s = -s;
    if (nsec != 0) {
      s -= 1;
      nsec = 1'000'000'000 - nsec;
    }
  }
  return std::make_pair(s, nsec);
}

struct Pending {
  std::optional<std::string> path;
  std::optional<std::string> linkpath;
  std::optional<uint64_t> size;
  std::optional<uint64_t> uid;
  std::optional<uint64_t> gid;
  std::optional<std::pair<int64_t, uint32_t>> mtime;
  std::map<std::string, std::string> xattrs;
  uint64_t header_offset = 0;
  bool seen = false;  // an 'x', 'L' or 'K' header is waiting for its entry
  bool any() const { return seen; }
};

bool IsHeaderOnly(char t) {
  return t == '1' || t == '2' || t == '3' || t == '4' || t == '5' || t == '6';
}

}  // namespace

absl::StatusOr<TarHeaderBlock> ParseTarHeaderBlock(std::string_view block) {
  TarHeaderBlock h;
  if (block.size() != kTarBlockSize) {
    return absl::InvalidArgumentError(absl::StrCat("header block of ", block.size(), " bytes"));
  }
  if (std::all_of(block.begin(), block.end(), [](char c) { return c == '\0'; })) {
    h.end = true;
    return h;
  }
  uint64_t stored_sum = 0;
  if (std::string e = ParseNumber(block.substr(kChksumOff, kChksumLen), &stored_sum); !e.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("checksum field: ", e));
  }
  uint64_t usum = 0;
  int64_t ssum = 0;
  for (size_t i = 0; i < kTarBlockSize; ++i) {
    const char c = (i >= kChksumOff && i < kChksumOff + kChksumLen) ? ' ' : block[i];
    usum += static_cast<uint8_t>(c);
    ssum += static_cast<signed char>(c);
  }
  if (stored_sum != usum && static_cast<int64_t>(stored_sum) != ssum) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad checksum (stored ", stored_sum, ", computed ", usum, ")"));
  }
  h.typeflag = block[kTypeOff];
  if (std::string e = ParseNumber(block.substr(kSizeOff, kSizeLen), &h.size); !e.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("size field: ", e));
  }
  uint64_t mode = 0;
  if (std::string e = ParseNumber(block.substr(kModeOff, kModeLen), &mode); !e.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("mode field: ", e));
  }
  h.mode = static_cast<uint32_t>(mode & 07777);
  return h;
}

absl::Status ParsePaxRecords(
    std::string_view records,
    const std::function<absl::Status(std::string_view key, std::string_view value)>& fn) {
  std::string_view rec = records;
  while (!rec.empty()) {
    const size_t sp = rec.find(' ');
    if (sp == std::string_view::npos || sp == 0 || sp > 20) {
      return absl::InvalidArgumentError("pax record without a length");
    }
    uint64_t len = 0;
    for (size_t i = 0; i < sp; ++i) {
      if (rec[i] < '0' || rec[i] > '9') {
        return absl::InvalidArgumentError("pax record length is not decimal");
      }
      len = len * 10 + static_cast<uint64_t>(rec[i] - '0');
    }
    if (len < sp + 3 || len > rec.size() || rec[len - 1] != '\n') {
      return absl::InvalidArgumentError("pax record length does not match its record");
    }
    std::string_view kv = rec.substr(sp + 1, len - sp - 2);
    rec.remove_prefix(len);
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      return absl::InvalidArgumentError("pax record without a key");
    }
    RETURN_IF_ERROR(fn(kv.substr(0, eq), kv.substr(eq + 1)));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ParsePaxSize(std::string_view value) {
  if (value.empty() || value.size() > 19)
    return absl::InvalidArgumentError("pax size is not a number");
  uint64_t v = 0;
  for (char c : value) {
    if (c < '0' || c > '9') return absl::InvalidArgumentError("pax size is not a number");
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError("pax size overflows");
  }
  return v;
}

namespace {}  // namespace

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

absl::Status ScanTarHeaders(RangeReader& reader,
                            const std::function<absl::Status(const TarEntry&)>& fn,
                            const TarReadOptions& options) {
  ASSIGN_OR_RETURN(const uint64_t total, reader.Size());
  BlockSource src(reader, total);
  const std::string& rname = reader.name();
  uint64_t off = 0;
  uint64_t entries = 0;
  Pending pending;

  auto bad = [&](uint64_t at, std::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(rname, ": tar header at offset ", at, ": ", AV(why)));
  };
  // Offset after `data` bytes of payload that start at `start`, or nullopt if past the end.
  auto after = [&](uint64_t start, uint64_t data) -> std::optional<uint64_t> {
    if (start > total || data > total - start) return std::nullopt;
    return start + data + TarPadding(data);
  };

  while (true) {
    if (off >= total) {
      if (pending.any()) {
        return absl::OutOfRangeError(
            absl::StrCat(rname, ": tar truncated: extended header at offset ",
                         pending.header_offset, " is not followed by an entry"));
      }
      return absl::OkStatus();
    }
    if (total - off < kTarBlockSize) {
      return absl::OutOfRangeError(absl::StrCat(rname, ": tar truncated: partial header at offset ",
                                                off, " (", total - off, " bytes)"));
    }
    ASSIGN_OR_RETURN(std::string_view block, src.Read(off, kTarBlockSize));
    if (options.on_bytes_used) options.on_bytes_used(off, kTarBlockSize);
    absl::StatusOr<TarHeaderBlock> header = ParseTarHeaderBlock(block);
    if (!header.ok()) return bad(off, std::string(header.status().message()));
    if (header->end) {
      if (pending.any()) return bad(off, "end-of-archive block after an extended header");
      return absl::OkStatus();
    }
    const char typeflag = header->typeflag;
    uint64_t size = header->size;
    if (!pending.any()) pending.header_offset = off;
    const uint64_t data_start = off + kTarBlockSize;

    if (typeflag == 'x' || typeflag == 'g' || typeflag == 'L' || typeflag == 'K') {
      if (size > options.max_meta_bytes) {
        return bad(off, absl::StrCat("extended header of ", size, " bytes exceeds the limit of ",
                                     options.max_meta_bytes));
      }
      std::optional<uint64_t> next = after(data_start, size);
      if (!next) {
        return absl::OutOfRangeError(absl::StrCat(rname, ": tar truncated: extended header at ",
                                                  off, " wants ", size, " bytes"));
      }
      ASSIGN_OR_RETURN(std::string_view payload, src.Read(data_start, size));
      if (options.on_bytes_used) options.on_bytes_used(data_start, size);
      if (typeflag != 'g') pending.seen = true;
      if (typeflag == 'L') {
        pending.path = std::string(CString(payload));
      } else if (typeflag == 'K') {
        pending.linkpath = std::string(CString(payload));
      } else if (typeflag == 'x') {
        absl::Status records = ParsePaxRecords(payload, [&](std::string_view key,
                                                            std::string_view value) {
          if (key == "path") {
            pending.path = std::string(value);
          } else if (key == "linkpath") {
            pending.linkpath = std::string(value);
          } else if (key == "size") {
            ASSIGN_OR_RETURN(pending.size, ParsePaxSize(value));
          } else if (key == "uid" || key == "gid") {
            std::optional<uint64_t> v = ParsePaxDecimal(value);
            if (!v) {
              return absl::InvalidArgumentError(absl::StrCat("pax ", AV(key), " is not a number"));
            }
            (key == "uid" ? pending.uid : pending.gid) = *v;
          } else if (key == "mtime") {
            pending.mtime = ParsePaxTime(value);
            if (!pending.mtime) return absl::InvalidArgumentError("pax mtime is not a time");
          } else if (key.substr(0, 13) == "SCHILY.xattr.") {
            if (key.size() == 13) {
              return absl::InvalidArgumentError("pax xattr record without a name");
            }
            pending.xattrs[std::string(key.substr(13))] = std::string(value);
          } else if (key.substr(0, 11) == "GNU.sparse.") {
            return absl::InvalidArgumentError("sparse files are not supported");
          }
          return absl::OkStatus();
        });
        if (!records.ok()) return bad(off, std::string(records.message()));
      }
      // 'g' (global) records hold defaults we do not use (mtime, uname, ...): skipped.
      off = *next;
      continue;
    }
    if (typeflag == 'S' || typeflag == 'M' || typeflag == 'D') {
      return bad(off, absl::StrCat("unsupported GNU entry type '", std::string(1, typeflag), "'"));
    }

    TarEntry entry;
    entry.typeflag = typeflag;
    entry.header_offset = pending.header_offset;
    entry.mode = header->mode;
    uint64_t uid = 0, gid = 0, mtime = 0;
    if (std::string e = ParseNumber(block.substr(kUidOff, kIdLen), &uid); !e.empty()) {
      return bad(off, absl::StrCat("uid field: ", e));
    }
    if (std::string e = ParseNumber(block.substr(kGidOff, kIdLen), &gid); !e.empty()) {
      return bad(off, absl::StrCat("gid field: ", e));
    }
    if (std::string e = ParseNumber(block.substr(kMtimeOff, kMtimeLen), &mtime); !e.empty()) {
      return bad(off, absl::StrCat("mtime field: ", e));
    }
    entry.uid = pending.uid.value_or(uid);
    entry.gid = pending.gid.value_or(gid);
    entry.mtime = pending.mtime ? pending.mtime->first : static_cast<int64_t>(mtime);
    entry.mtime_nsec = pending.mtime ? pending.mtime->second : 0;
    entry.xattrs = std::move(pending.xattrs);
    if (typeflag == '3' || typeflag == '4') {
      if (std::string e = ParseNumber(block.substr(kDevMajorOff, kDevLen), &entry.devmajor);
          !e.empty()) {
        return bad(off, absl::StrCat("devmajor field: ", e));
      }
      if (std::string e = ParseNumber(block.substr(kDevMinorOff, kDevLen), &entry.devminor);
          !e.empty()) {
        return bad(off, absl::StrCat("devminor field: ", e));
      }
    }
    switch (typeflag) {
      case '0':
      case '\0':
      case '7':
        entry.type = TarEntryType::kFile;
        break;
      case '1':
        entry.type = TarEntryType::kHardLink;
        break;
      case '2':
        entry.type = TarEntryType::kSymlink;
        break;
      case '5':
        entry.type = TarEntryType::kDirectory;
        break;
      default:
        entry.type = TarEntryType::kOther;
        break;
    }
    if (pending.path) {
      entry.path = *pending.path;
    } else {
      std::string_view name = CString(block.substr(kNameOff, kNameLen));
      std::string_view prefix;
      if (block.substr(kMagicOff, 6) == std::string_view("ustar\0", 6)) {
        prefix = CString(block.substr(kPrefixOff, kPrefixLen));
      }
      entry.path = prefix.empty() ? std::string(name) : absl::StrCat(AV(prefix), "/", AV(name));
    }
    entry.linkname = pending.linkpath ? *pending.linkpath
                                      : std::string(CString(block.substr(kLinkOff, kLinkLen)));
    if (pending.size) size = *pending.size;
    entry.size = IsHeaderOnly(typeflag) ? 0 : size;
    entry.data_offset = data_start;
    std::optional<uint64_t> next = after(data_start, entry.size);
    if (!next) {
      return absl::OutOfRangeError(
          absl::StrCat(rname, ": tar truncated: entry '", entry.path.substr(0, 256), "' at offset ",
                       off, " has ", entry.size, " data bytes but the blob ends at ", total));
    }
    pending = Pending();
    off = *next;

    if (options.check_paths) {
      if (entry.type == TarEntryType::kDirectory && IsRootPath(entry.path)) continue;
      absl::StatusOr<std::string> norm = NormalizeRelativePath(entry.path);
      if (!norm.ok()) {
        return absl::PermissionDeniedError(absl::StrCat(
            rname, ": tar entry at offset ", entry.header_offset, ": ", norm.status().message()));
      }
      entry.path = *std::move(norm);
      if (entry.type == TarEntryType::kHardLink) {
        absl::StatusOr<std::string> link = NormalizeRelativePath(entry.linkname);
        if (!link.ok()) {
          return absl::PermissionDeniedError(absl::StrCat(rname, ": hard link '", entry.path,
                                                          "' target: ", link.status().message()));
        }
        entry.linkname = *std::move(link);
      }
    }
    if (++entries > options.max_entries) {
      return absl::ResourceExhaustedError(
          absl::StrCat(rname, ": tar has more than ", options.max_entries, " entries"));
    }
    RETURN_IF_ERROR(fn(entry));
  }
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
