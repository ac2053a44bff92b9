#include "core/publish/tar_tensor_indexer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/formats/model_inspect.h"
#include "core/formats/safetensors.h"
#include "core/io/range_reader.h"
#include "core/oci/path_safety.h"
#include "core/oci/tar.h"
#include "core/publish/tensor_listing.h"
#include "core/status/status_macros.h"

namespace modelfs {

const uint64_t TarTensorIndexer::kMaxHeaderBytes = 8 + kSafetensorsMaxHeaderSize;

namespace {

constexpr uint64_t kFirstWant = 64 << 10;    // a header's first try; doubled until it parses
constexpr uint64_t kMaxMetaBytes = 1 << 20;  // as ScanTarHeaders (TarReadOptions)

// The member's first bytes as the whole file: a read past them is remembered (`wanted`) and
// fails, so the caller waits for more bytes and tries again.
class PrefixReader final : public RangeReader {
 public:
  PrefixReader(std::string_view head, uint64_t size, std::string name)
      : head_(head), size_(size), name_(std::move(name)) {}
  const std::string& name() const override { return name_; }
  absl::StatusOr<uint64_t> Size() override { return size_; }
  absl::StatusOr<std::string> ReadAt(uint64_t offset, uint64_t length) override {
    if (offset > size_ || length > size_ - offset) {
      return absl::OutOfRangeError(absl::StrCat(name_, ": read of ", length, " bytes at ", offset,
                                                " past the end (", size_, ")"));
    }
    if (offset + length > head_.size()) {
      wanted_ = std::max(wanted_, offset + length);
      return absl::OutOfRangeError(absl::StrCat(name_, ": not streamed yet"));
    }
    return std::string(head_.substr(offset, length));
  }
  RangeReadStats stats() const override { return {}; }
  uint64_t wanted() const { return wanted_; }

 private:
  std::string_view head_;
  uint64_t size_;
  std::string name_;
  uint64_t wanted_ = 0;
};

absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string_view CString(std::string_view field) {
  const size_t nul = field.find('\0');
  return nul == std::string_view::npos ? field : field.substr(0, nul);
}

bool IsWeightName(const std::string& path) {
  const SniffedFormat f = SniffFormat(path, "");
  return f == SniffedFormat::kSafetensors || f == SniffedFormat::kGguf;
}

}  // namespace

struct TarTensorIndexer::Member {
  std::string path;
  uint64_t data_offset = 0;
  uint64_t size = 0;
  std::string head;  // the first bytes, until the header parsed
  uint64_t want = 0;
  std::optional<TensorIndexBuilder> builder;
};

TarTensorIndexer::TarTensorIndexer(std::string name) : name_(std::move(name)) {}
TarTensorIndexer::~TarTensorIndexer() = default;
TarTensorIndexer::TarTensorIndexer(TarTensorIndexer&&) = default;
TarTensorIndexer& TarTensorIndexer::operator=(TarTensorIndexer&&) = default;

void TarTensorIndexer::Stop(std::string why) {
  stopped_ = absl::StrCat(name_, ": tar at offset ", pos_, ": ", why);
  state_ = State::kDone;
  member_.reset();
}

absl::Status TarTensorIndexer::Feed(std::string_view bytes) {
  while (!bytes.empty() && state_ != State::kDone) {
    switch (state_) {
      case State::kHeader: {
        const size_t n = std::min<size_t>(bytes.size(), kTarBlockSize - block_.size());
        block_.append(bytes.data(), n);
        bytes.remove_prefix(n);
        pos_ += n;
        if (block_.size() == kTarBlockSize) {
          RETURN_IF_ERROR(OnHeader());
          block_.clear();
        }
        break;
      }
      case State::kMeta: {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(bytes.size(), remaining_));
        meta_.append(bytes.data(), n);
        bytes.remove_prefix(n);
        pos_ += n;
        remaining_ -= n;
        if (remaining_ > 0) break;
        if (meta_type_ == 'L') {
          pending_path_ = std::string(CString(meta_));
        } else if (meta_type_ == 'x') {
          absl::Status records = ParsePaxRecords(
              meta_, [&](std::string_view key, std::string_view value) -> absl::Status {
                if (key == "path") {
                  pending_path_ = std::string(value);
                } else if (key == "size") {
                  ASSIGN_OR_RETURN(pending_size_, ParsePaxSize(value));
                } else if (key.substr(0, 11) == "GNU.sparse.") {
                  return absl::InvalidArgumentError("sparse files are not followed");
                }
                return absl::OkStatus();
              });
          if (!records.ok()) {
            Stop(std::string(records.message()));
            break;
          }
        }
        meta_.clear();
        remaining_ = padding_;
        state_ = State::kSkip;
        break;
      }
      case State::kData: {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(bytes.size(), remaining_));
        if (member_) RETURN_IF_ERROR(OnData(bytes.substr(0, n)));
        bytes.remove_prefix(n);
        pos_ += n;
        remaining_ -= n;
        if (remaining_ > 0) break;
        if (member_) RETURN_IF_ERROR(EndMember());
        remaining_ = padding_;
        state_ = State::kSkip;
        break;
      }
      case State::kSkip: {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(bytes.size(), remaining_));
        bytes.remove_prefix(n);
        pos_ += n;
        remaining_ -= n;
        if (remaining_ == 0) state_ = State::kHeader;
        break;
      }
      case State::kDone:
        break;
    }
    // Zero-length payloads and data end at once.
    while (state_ == State::kSkip && remaining_ == 0) state_ = State::kHeader;
  }
  if (state_ == State::kDone) pos_ += bytes.size();
  return absl::OkStatus();
}

// block_ holds the header block that ends at pos_.
absl::Status TarTensorIndexer::OnHeader() {
  const uint64_t at = pos_ - kTarBlockSize;
  absl::StatusOr<TarHeaderBlock> h = ParseTarHeaderBlock(block_);
  if (!h.ok()) {
    Stop(std::string(h.status().message()));
    return absl::OkStatus();
  }
  if (h->end) {
    state_ = State::kDone;  // as ScanTarHeaders, the first all-zero block ends the tar
    return absl::OkStatus();
  }
  uint64_t size = h->size;
  switch (h->typeflag) {
    case 'x':
    case 'g':
    case 'L':
    case 'K':
      if (size > kMaxMetaBytes) {
        Stop(absl::StrCat("an extended header of ", size, " bytes"));
        return absl::OkStatus();
      }
      // 'g' and 'K' are read past like the others; only 'x' and 'L' name the next entry.
      meta_type_ = h->typeflag == 'g' || h->typeflag == 'K' ? 0 : h->typeflag;
      meta_.clear();
      remaining_ = size;
      padding_ = TarPadding(size);
      state_ = State::kMeta;
      if (size == 0) {
        remaining_ = padding_;
        state_ = State::kSkip;
      }
      return absl::OkStatus();
    case 'S':
    case 'M':
    case 'D':
      Stop(absl::StrCat("a member of type '", std::string(1, h->typeflag), "'"));
      return absl::OkStatus();
    default:
      break;
  }
  if (pending_size_) size = *pending_size_;
  if (h->typeflag >= '1' && h->typeflag <= '6') size = 0;  // header only
  std::string path;
  if (pending_path_) {
    path = *pending_path_;
  } else {
    const std::string_view name = CString(std::string_view(block_).substr(0, 100));
    std::string_view prefix;
    if (std::string_view(block_).substr(257, 6) == std::string_view("ustar\0", 6)) {
      prefix = CString(std::string_view(block_).substr(345, 155));
    }
    path = prefix.empty() ? std::string(name) : absl::StrCat(AV(prefix), "/", AV(name));
  }
  pending_path_.reset();
  pending_size_.reset();
  const bool regular = h->typeflag == '0' || h->typeflag == '\0' || h->typeflag == '7';
  if (regular && IsWeightName(path)) {
    absl::StatusOr<std::string> norm = NormalizeRelativePath(path);
    if (!norm.ok()) {
      return absl::PermissionDeniedError(
          absl::StrCat(name_, ": tar entry at offset ", at, ": ", norm.status().message()));
    }
    member_ = std::make_unique<Member>();
    member_->path = *std::move(norm);
    member_->data_offset = pos_;
    member_->size = size;
    member_->want = std::min(size, kFirstWant);
  }
  remaining_ = size;
  padding_ = TarPadding(size);
  state_ = State::kData;
  if (size == 0) {
    if (member_) RETURN_IF_ERROR(EndMember());
    remaining_ = 0;
    state_ = State::kSkip;
  }
  return absl::OkStatus();
}

absl::Status TarTensorIndexer::OnData(std::string_view bytes) {
  Member& m = *member_;
  while (!bytes.empty()) {
    if (m.builder) {
      m.builder->Update(bytes);
      return absl::OkStatus();
    }
    const size_t n = static_cast<size_t>(std::min<uint64_t>(bytes.size(), m.want - m.head.size()));
    m.head.append(bytes.data(), n);
    bytes.remove_prefix(n);
    if (m.head.size() == m.want) RETURN_IF_ERROR(TryParse());
  }
  return absl::OkStatus();
}

absl::Status TarTensorIndexer::TryParse() {
  Member& m = *member_;
  const std::string where = absl::StrCat(name_, ": ", m.path);
  PrefixReader reader(m.head, m.size, where);
  absl::StatusOr<std::optional<TensorSkeleton>> s =
      ReadTensorSkeleton(reader, m.path, Digest(), m.size, 0);
  if (!s.ok() && reader.wanted() > m.head.size() && m.head.size() < m.size) {
    // Not all of the header has passed yet: keep more of the file and try again.
    const uint64_t want = std::min(m.size, std::max(reader.wanted(), 2 * m.want));
    if (want > kMaxHeaderBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " (tar offset ", m.data_offset, "): its header needs more than ", kMaxHeaderBytes,
          " bytes (", reader.wanted(), " read so far), over the safetensors header limit"));
    }
    m.want = want;
    return absl::OkStatus();
  }
  if (!s.ok()) {
    return absl::Status(s.status().code(), absl::StrCat(s.status().message(), " (tar offset ",
                                                        m.data_offset, " in ", name_, ")"));
  }
  if (!s->has_value()) {
    return absl::InternalError(absl::StrCat(where, ": not a weight file after all"));
  }
  ASSIGN_OR_RETURN(TensorIndexBuilder b,
                   TensorIndexBuilder::Create(std::move((*s)->index), std::move((*s)->header)));
  m.builder.emplace(std::move(b));
  m.builder->Update(m.head);
  std::string().swap(m.head);
  return absl::OkStatus();
}

absl::Status TarTensorIndexer::EndMember() {
  std::unique_ptr<Member> m = std::move(member_);
  if (!m->builder) {
    // The whole file passed and its header still wanted more (or it is empty): parse it as it
    // is, which reports the truncation by name.
    member_ = std::move(m);
    member_->want = member_->size;
    RETURN_IF_ERROR(TryParse());
    m = std::move(member_);
    if (!m->builder) {
      return absl::OutOfRangeError(absl::StrCat(name_, ": ", m->path, ": truncated header"));
    }
  }
  absl::StatusOr<TensorIndex> index = m->builder->Finish();
  if (!index.ok()) {
    return absl::Status(index.status().code(),
                        absl::StrCat(name_, ": ", m->path, ": ", index.status().message()));
  }
  index->file_offset = m->data_offset;
  // A later member of the same path replaces the earlier one.
  done_.erase(std::remove_if(done_.begin(), done_.end(),
                             [&](const TarTensorIndex& t) { return t.file == m->path; }),
              done_.end());
  done_.push_back(TarTensorIndex{m->path, *std::move(index)});
  return absl::OkStatus();
}

std::optional<TarTensorIndexes> TarTensorIndexer::Finish(const Digest& tar_digest) {
  // A tar ends with its all-zero block, or (as ScanTarHeaders accepts) on a block boundary.
  if (!stopped_.empty() ||
      (state_ != State::kDone && (state_ != State::kHeader || !block_.empty()))) {
    // Cut short, or not followed to its end: no index rather than one of a part of the tar.
    if (stopped_.empty()) stopped_ = absl::StrCat(name_, ": the tar ends inside an entry");
    return std::nullopt;
  }
  TarTensorIndexes out;
  out.tar_digest = tar_digest;
  out.tar_size = pos_;
  out.files = std::move(done_);
  done_.clear();
  for (TarTensorIndex& t : out.files) {
    t.index.layer_digest = tar_digest;
    t.index.layer_size = pos_;
  }
  return out;
}

}  // namespace modelfs
