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

constexpr uint64_t kFirstWant = 64 << 10;  // a header's first try; doubled until it parses

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

TarTensorIndexer::TarTensorIndexer(std::string name)
    : name_(std::move(name)), follower_(TarFollower::Options{name_}) {}
TarTensorIndexer::~TarTensorIndexer() = default;
TarTensorIndexer::TarTensorIndexer(TarTensorIndexer&&) = default;
TarTensorIndexer& TarTensorIndexer::operator=(TarTensorIndexer&&) = default;

void TarTensorIndexer::Stop() {
  stopped_ = std::string(follower_.status().message());
  member_.reset();
}

absl::Status TarTensorIndexer::Feed(std::string_view bytes) {
  RETURN_IF_ERROR(follower_.Feed(bytes, *this));
  if (!follower_.status().ok() && stopped_.empty()) Stop();
  return absl::OkStatus();
}

// A regular member named like a weight file: its bytes are kept until its header parses.
absl::Status TarTensorIndexer::OnEntry(const TarEntry& entry) {
  if (entry.type != TarEntryType::kFile || !IsWeightName(entry.path)) return absl::OkStatus();
  absl::StatusOr<std::string> norm = NormalizeRelativePath(entry.path);
  if (!norm.ok()) {
    return absl::PermissionDeniedError(absl::StrCat(name_, ": tar entry at offset ",
                                                    entry.data_offset - kTarBlockSize, ": ",
                                                    norm.status().message()));
  }
  member_ = std::make_unique<Member>();
  member_->path = *std::move(norm);
  member_->data_offset = entry.data_offset;
  member_->size = entry.size;
  member_->want = std::min(entry.size, kFirstWant);
  if (entry.size == 0) return EndMember();
  return absl::OkStatus();
}

absl::Status TarTensorIndexer::OnData(const TarEntry& entry, uint64_t offset,
                                      std::string_view bytes) {
  if (!member_) return absl::OkStatus();
  Member& m = *member_;
  for (std::string_view rest = bytes; !rest.empty();) {
    if (m.builder) {
      m.builder->Update(rest);
      break;
    }
    const size_t n = static_cast<size_t>(std::min<uint64_t>(rest.size(), m.want - m.head.size()));
    m.head.append(rest.data(), n);
    rest.remove_prefix(n);
    if (m.head.size() == m.want) RETURN_IF_ERROR(TryParse());
  }
  if (offset + bytes.size() == entry.data_offset + entry.size) return EndMember();
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
  // Cut short, or not followed to its end: no index rather than one of a part of the tar.
  if (!follower_.Finish().ok()) {
    if (stopped_.empty()) Stop();
    return std::nullopt;
  }
  const uint64_t size = follower_.position();
  TarTensorIndexes out;
  out.tar_digest = tar_digest;
  out.tar_size = size;
  out.files = std::move(done_);
  done_.clear();
  for (TarTensorIndex& t : out.files) {
    t.index.layer_digest = tar_digest;
    t.index.layer_size = size;
  }
  return out;
}

}  // namespace modelfs
