// TarFollower (tar_follower.h): the tar's header blocks, extended headers and entries, from
// bytes fed in pieces or read header by header; and the block and pax record parsers.
#include "core/oci/tar_follower.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/oci/tar_layout.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

using namespace tar_layout;  // NOLINT: the block's field offsets

absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

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

bool IsHeaderOnly(char t) {
  return t == '1' || t == '2' || t == '3' || t == '4' || t == '5' || t == '6';
}

}  // namespace

// ---- header blocks and pax records ---------------------------------------------------------

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

// ---- the follower --------------------------------------------------------------------------

absl::Status TarFollower::Listener::OnHeaderBlock(uint64_t, std::string_view) {
  return absl::OkStatus();
}
absl::Status TarFollower::Listener::OnMetaPayload(uint64_t, char, std::string_view) {
  return absl::OkStatus();
}
absl::Status TarFollower::Listener::OnEntry(const TarEntry&) { return absl::OkStatus(); }
absl::Status TarFollower::Listener::OnData(const TarEntry&, uint64_t, std::string_view) {
  return absl::OkStatus();
}

TarFollower::TarFollower() : TarFollower(Options()) {}
TarFollower::TarFollower(Options options) : options_(std::move(options)) {}

absl::Status TarFollower::Refuse(absl::Status why) {
  status_ = std::move(why);
  state_ = State::kStopped;
  return absl::OkStatus();
}

absl::Status TarFollower::Bad(uint64_t at, absl::string_view why) {
  return Refuse(absl::InvalidArgumentError(
      absl::StrCat(options_.name, ": tar header at offset ", at, ": ", why)));
}

absl::Status TarFollower::Truncated(absl::string_view why) {
  return Refuse(absl::OutOfRangeError(absl::StrCat(options_.name, ": tar truncated: ", why)));
}

absl::Status TarFollower::Feed(std::string_view bytes, Listener& listener) {
  const uint64_t end = pos_ + bytes.size();
  absl::Status heard;  // the listener's error
  while (!bytes.empty() && heard.ok() && following()) {
    const size_t n = state_ == State::kHeader
                         ? std::min<size_t>(bytes.size(), kTarBlockSize - block_.size())
                         : static_cast<size_t>(std::min<uint64_t>(bytes.size(), remaining_));
    const std::string_view run = bytes.substr(0, n);
    bytes.remove_prefix(n);
    switch (state_) {
      case State::kHeader:
        block_.append(run);
        pos_ += n;
        if (block_.size() == kTarBlockSize) {
          heard = OnBlock(listener);
          block_.clear();
        }
        break;
      case State::kMeta:
        meta_.append(run);
        pos_ += n;
        remaining_ -= n;
        if (remaining_ == 0) heard = OnPayload(listener);
        break;
      case State::kData:
        heard = listener.OnData(entry_, pos_, run);
        pos_ += n;
        remaining_ -= n;
        if (remaining_ == 0) StartPadding(padding_);
        break;
      case State::kPadding:
        pos_ += n;
        remaining_ -= n;
        if (remaining_ == 0) state_ = State::kHeader;
        break;
      case State::kEnded:
      case State::kStopped:
        break;
    }
  }
  pos_ = end;  // the rest, past the end or once stopped, is only counted
  if (!heard.ok()) {
    status_ = heard;
    state_ = State::kStopped;
  }
  return heard;
}

TarFollower::Want TarFollower::wanted() const {
  switch (state_) {
    case State::kHeader:
      return {pos_, kTarBlockSize - block_.size()};
    case State::kMeta:
      return {pos_, remaining_};
    case State::kData:
      return {pos_ + remaining_ + padding_, kTarBlockSize};
    case State::kPadding:
      return {pos_ + remaining_, kTarBlockSize};
    case State::kEnded:
    case State::kStopped:
      break;
  }
  return {pos_, 0};
}

void TarFollower::SkipTo(uint64_t offset) {
  while (pos_ < offset && (state_ == State::kData || state_ == State::kPadding)) {
    const uint64_t n = std::min(offset - pos_, remaining_);
    pos_ += n;
    remaining_ -= n;
    if (remaining_ > 0) break;
    if (state_ == State::kData) {
      StartPadding(padding_);
    } else {
      state_ = State::kHeader;
    }
  }
}

void TarFollower::StartPadding(uint64_t n) {
  remaining_ = n;
  state_ = n > 0 ? State::kPadding : State::kHeader;
}

// block_ holds the header block that ends at pos_.
absl::Status TarFollower::OnBlock(Listener& listener) {
  const uint64_t at = pos_ - kTarBlockSize;
  const std::string_view block = block_;
  RETURN_IF_ERROR(listener.OnHeaderBlock(at, block));
  absl::StatusOr<TarHeaderBlock> header = ParseTarHeaderBlock(block);
  if (!header.ok()) return Bad(at, header.status().message());
  if (header->end) {
    if (pending_.seen) return Bad(at, "end-of-archive block after an extended header");
    state_ = State::kEnded;  // the first all-zero block ends the tar
    return absl::OkStatus();
  }
  const char typeflag = header->typeflag;
  uint64_t size = header->size;
  if (!pending_.seen) pending_.header_offset = at;

  if (typeflag == 'x' || typeflag == 'g' || typeflag == 'L' || typeflag == 'K') {
    if (size > options_.max_meta_bytes) {
      return Bad(at, absl::StrCat("extended header of ", size, " bytes exceeds the limit of ",
                                  options_.max_meta_bytes));
    }
    if (options_.size && (pos_ > *options_.size || size > *options_.size - pos_)) {
      return Truncated(absl::StrCat("extended header at ", at, " wants ", size, " bytes"));
    }
    meta_type_ = typeflag;
    meta_at_ = at;
    return StartPayload(size, listener);
  }
  if (typeflag == 'S' || typeflag == 'M' || typeflag == 'D') {
    return Bad(at, absl::StrCat("unsupported GNU entry type '", std::string(1, typeflag), "'"));
  }

  TarEntry entry;
  entry.typeflag = typeflag;
  entry.header_offset = pending_.header_offset;
  entry.mode = header->mode;
  uint64_t uid = 0, gid = 0, mtime = 0;
  if (std::string e = ParseNumber(block.substr(kUidOff, kIdLen), &uid); !e.empty()) {
    return Bad(at, absl::StrCat("uid field: ", e));
  }
  if (std::string e = ParseNumber(block.substr(kGidOff, kIdLen), &gid); !e.empty()) {
    return Bad(at, absl::StrCat("gid field: ", e));
  }
  if (std::string e = ParseNumber(block.substr(kMtimeOff, kMtimeLen), &mtime); !e.empty()) {
    return Bad(at, absl::StrCat("mtime field: ", e));
  }
  entry.uid = pending_.uid.value_or(uid);
  entry.gid = pending_.gid.value_or(gid);
  entry.mtime = pending_.mtime ? pending_.mtime->first : static_cast<int64_t>(mtime);
  entry.mtime_nsec = pending_.mtime ? pending_.mtime->second : 0;
  entry.xattrs = std::move(pending_.xattrs);
  if (typeflag == '3' || typeflag == '4') {
    if (std::string e = ParseNumber(block.substr(kDevMajorOff, kDevLen), &entry.devmajor);
        !e.empty()) {
      return Bad(at, absl::StrCat("devmajor field: ", e));
    }
    if (std::string e = ParseNumber(block.substr(kDevMinorOff, kDevLen), &entry.devminor);
        !e.empty()) {
      return Bad(at, absl::StrCat("devminor field: ", e));
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
  if (pending_.path) {
    entry.path = *std::move(pending_.path);
  } else {
    const std::string_view name = CString(block.substr(kNameOff, kNameLen));
    std::string_view prefix;
    if (block.substr(kMagicOff, 6) == kUstarMagic.substr(0, 6)) {
      prefix = CString(block.substr(kPrefixOff, kPrefixLen));
    }
    entry.path = prefix.empty() ? std::string(name) : absl::StrCat(AV(prefix), "/", AV(name));
  }
  entry.linkname = pending_.linkpath ? *std::move(pending_.linkpath)
                                     : std::string(CString(block.substr(kLinkOff, kLinkLen)));
  if (pending_.size) size = *pending_.size;
  entry.size = IsHeaderOnly(typeflag) ? 0 : size;
  entry.data_offset = pos_;
  if (options_.size && (pos_ > *options_.size || entry.size > *options_.size - pos_)) {
    return Truncated(absl::StrCat("entry '", entry.path.substr(0, 256), "' at offset ", at, " has ",
                                  entry.size, " data bytes but the blob ends at ", *options_.size));
  }
  if (entry.size > std::numeric_limits<uint64_t>::max() - pos_ - kTarBlockSize) {
    return Bad(at, "entry size overflows the tar's offsets");
  }
  pending_ = Pending();
  entry_ = std::move(entry);
  RETURN_IF_ERROR(listener.OnEntry(entry_));
  remaining_ = entry_.size;
  padding_ = TarPadding(entry_.size);
  state_ = State::kData;
  if (remaining_ == 0) StartPadding(padding_);
  return absl::OkStatus();
}

absl::Status TarFollower::StartPayload(uint64_t size, Listener& listener) {
  meta_.clear();
  remaining_ = size;
  padding_ = TarPadding(size);
  state_ = State::kMeta;
  if (size == 0) return OnPayload(listener);
  return absl::OkStatus();
}

// meta_ holds the whole payload of the extended header at meta_at_.
absl::Status TarFollower::OnPayload(Listener& listener) {
  RETURN_IF_ERROR(listener.OnMetaPayload(meta_at_ + kTarBlockSize, meta_type_, meta_));
  if (meta_type_ != 'g') pending_.seen = true;
  if (meta_type_ == 'L') {
    pending_.path = std::string(CString(meta_));
  } else if (meta_type_ == 'K') {
    pending_.linkpath = std::string(CString(meta_));
  } else if (meta_type_ == 'x') {
    if (absl::Status records = ParsePax(meta_); !records.ok()) {
      return Bad(meta_at_, records.message());
    }
  }
  // 'g' (global) records hold defaults we do not apply (mtime, comment, ...), as containerd.
  std::string().swap(meta_);
  StartPadding(padding_);
  return absl::OkStatus();
}

absl::Status TarFollower::ParsePax(std::string_view records) {
  return ParsePaxRecords(records, [&](std::string_view key, std::string_view value) {
    if (key == "path") {
      pending_.path = std::string(value);
    } else if (key == "linkpath") {
      pending_.linkpath = std::string(value);
    } else if (key == "size") {
      ASSIGN_OR_RETURN(pending_.size, ParsePaxSize(value));
    } else if (key == "uid" || key == "gid") {
      std::optional<uint64_t> v = ParsePaxDecimal(value);
      if (!v) return absl::InvalidArgumentError(absl::StrCat("pax ", AV(key), " is not a number"));
      (key == "uid" ? pending_.uid : pending_.gid) = *v;
    } else if (key == "mtime") {
      pending_.mtime = ParsePaxTime(value);
      if (!pending_.mtime) return absl::InvalidArgumentError("pax mtime is not a time");
    } else if (key.substr(0, 13) == "SCHILY.xattr.") {
      if (key.size() == 13) return absl::InvalidArgumentError("pax xattr record without a name");
      pending_.xattrs[std::string(key.substr(13))] = std::string(value);
    } else if (key.substr(0, 11) == "GNU.sparse.") {
      return absl::InvalidArgumentError("sparse files are not supported");
    }
    return absl::OkStatus();
  });
}

const absl::Status& TarFollower::Finish() {
  const uint64_t header_at = pos_ - block_.size();
  switch (state_) {
    case State::kHeader:
      if (!block_.empty()) {
        (void)Truncated(
            absl::StrCat("partial header at offset ", header_at, " (", block_.size(), " bytes)"));
        break;
      }
      [[fallthrough]];
    case State::kPadding:
      if (pending_.seen) {
        (void)Truncated(absl::StrCat("extended header at offset ", pending_.header_offset,
                                     " is not followed by an entry"));
        break;
      }
      state_ = State::kEnded;
      break;
    case State::kMeta:
      (void)Truncated(absl::StrCat("extended header at ", meta_at_, " wants ",
                                   meta_.size() + remaining_, " bytes"));
      break;
    case State::kData:
      (void)Truncated(absl::StrCat("entry '", entry_.path.substr(0, 256), "' at offset ",
                                   entry_.data_offset - kTarBlockSize, " has ", entry_.size,
                                   " data bytes but the blob ends at ", pos_));
      break;
    case State::kEnded:
    case State::kStopped:
      break;
  }
  return status_;
}

}  // namespace modelfs
