#include "core/oci/tensor_index.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/oci/index_fields.h"
#include "core/status/status_macros.h"
#include "core/text/utf8.h"

namespace modelfs {
namespace {

using index_fields::GetDigest;
using index_fields::GetLE;
using index_fields::PutDigest;
using index_fields::PutU16;
using index_fields::PutU32;
using index_fields::PutU64;
using index_fields::PutU8;

constexpr std::string_view kMagic("MFSTIDX\0", 8);
// name length 2, dtype length 1, rank 1, offset 8, length 8, hash 32: an entry's least size.
constexpr uint64_t kMinEntrySize = 2 + 1 + 1 + 8 + 8 + 32;

bool PrintableAscii(std::string_view s) {
  for (char c : s) {
    if (c <= 0x20 || c >= 0x7f) return false;
  }
  return true;
}

}  // namespace

std::string_view TensorFileFormatName(TensorFileFormat format) {
  return format == TensorFileFormat::kGguf ? "gguf" : "safetensors";
}

std::string TensorHashHex(const ChunkHash& hash) {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(hash.data()), hash.size()));
}

std::string SerializeTensorIndex(const TensorIndex& index) {
  std::string out(kMagic);
  PutU32(out, TensorIndex::kVersion);
  PutU32(out, static_cast<uint32_t>(index.format));
  PutDigest(out, index.layer_digest);
  PutU64(out, index.layer_size);
  PutU64(out, index.file_offset);
  PutU64(out, index.file_size);
  PutU32(out, static_cast<uint32_t>(ChunkDigestAlgorithm::kBlake3));
  PutU32(out, 0);  // reserved
  PutU64(out, index.tensors.size());
  for (const TensorEntry& t : index.tensors) {
    PutU16(out, static_cast<uint16_t>(t.name.size()));
    out.append(t.name);
    PutU8(out, static_cast<uint8_t>(t.dtype.size()));
    out.append(t.dtype);
    PutU8(out, static_cast<uint8_t>(t.shape.size()));
    for (uint64_t d : t.shape) PutU64(out, d);
    PutU64(out, t.offset);
    PutU64(out, t.length);
    out.append(reinterpret_cast<const char*>(t.hash.data()), t.hash.size());
  }
  return out;
}

absl::StatusOr<TensorIndex> ParseTensorIndex(std::string_view b) {
  RETURN_IF_ERROR(index_fields::ReadHeader(b, kMagic, "tensor index", TensorIndex::kVersion,
                                           TensorIndex::kHeaderSize));
  TensorIndex index;
  const uint64_t format = GetLE(b, 12, 4);
  if (format != 1 && format != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor index: format ", format, " is not 1 (safetensors) or 2 (gguf)"));
  }
  index.format = static_cast<TensorFileFormat>(format);
  index.layer_digest = GetDigest(b, 16);
  index.layer_size = GetLE(b, 48, 8);
  index.file_offset = GetLE(b, 56, 8);
  index.file_size = GetLE(b, 64, 8);
  const std::string where = absl::StrCat("tensor index of ", index.layer_digest.str());
  const uint64_t algorithm = GetLE(b, 72, 4);
  const uint64_t reserved = GetLE(b, 76, 4);
  if (algorithm != static_cast<uint32_t>(ChunkDigestAlgorithm::kBlake3) || reserved != 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": algorithm ", algorithm,
                                                   " is not 2 (blake3) or reserved ", reserved,
                                                   " is not 0"));
  }
  if (index.file_offset > index.layer_size ||
      index.file_size > index.layer_size - index.file_offset) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": file of ", index.file_size,
                                                   " bytes at ", index.file_offset,
                                                   " is outside the layer of ", index.layer_size));
  }
  const uint64_t count = GetLE(b, 80, 8);
  const uint64_t body = b.size() - TensorIndex::kHeaderSize;
  if (count > TensorIndex::kMaxTensors) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": count ", count, " is over ", TensorIndex::kMaxTensors));
  }
  if (count > body / kMinEntrySize) {
    return absl::OutOfRangeError(absl::StrCat(where, ": truncated: ", count,
                                              " tensors need at least ", count * kMinEntrySize,
                                              " bytes, have ", body));
  }
  index.tensors.reserve(count);
  std::set<std::string_view> names;
  size_t at = TensorIndex::kHeaderSize;
  auto need = [&](uint64_t n, uint64_t i) -> absl::Status {
    if (b.size() - at < n) {
      return absl::OutOfRangeError(
          absl::StrCat(where, ": truncated in tensor ", i, " at offset ", at));
    }
    return absl::OkStatus();
  };
  for (uint64_t i = 0; i < count; ++i) {
    TensorEntry t;
    RETURN_IF_ERROR(need(2, i));
    const uint64_t name_len = GetLE(b, at, 2);
    at += 2;
    RETURN_IF_ERROR(need(name_len + 1, i));
    const std::string_view name = b.substr(at, name_len);
    if (name.empty() || FindInvalidUtf8(name) != std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": tensor ", i, " at offset ", at, ": name is empty or not UTF-8"));
    }
    if (!names.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": tensor ", i, ": name \"",
          absl::CEscape(absl::string_view(name.data(), name.size())), "\" seen twice"));
    }
    t.name = std::string(name);
    at += name_len;
    const uint64_t dtype_len = GetLE(b, at, 1);
    at += 1;
    RETURN_IF_ERROR(need(dtype_len + 1, i));
    t.dtype = std::string(b.substr(at, dtype_len));
    if (t.dtype.empty() || !PrintableAscii(t.dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": tensor ", t.name, ": dtype is empty or not printable ASCII"));
    }
    at += dtype_len;
    const uint64_t rank = GetLE(b, at, 1);
    at += 1;
    if (rank > TensorIndex::kMaxRank) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": tensor ", t.name, ": rank ", rank, " is over 8"));
    }
    RETURN_IF_ERROR(need(rank * 8 + 48, i));
    for (uint64_t d = 0; d < rank; ++d) t.shape.push_back(GetLE(b, at + 8 * d, 8));
    at += rank * 8;
    t.offset = GetLE(b, at, 8);
    t.length = GetLE(b, at + 8, 8);
    at += 16;
    if (t.offset > index.file_size || t.length > index.file_size - t.offset) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": tensor ", t.name, ": range [", t.offset, ", +", t.length,
                       ") is outside the file of ", index.file_size, " bytes"));
    }
    std::copy(b.data() + at, b.data() + at + 32, reinterpret_cast<char*>(t.hash.data()));
    at += 32;
    index.tensors.push_back(std::move(t));
  }
  if (at != b.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", b.size() - at, " trailing bytes after ", count, " tensors"));
  }
  return index;
}

bool ValidTensorName(std::string_view name) {
  return !name.empty() && name.size() <= 0xffff && FindInvalidUtf8(name) == std::string_view::npos;
}

absl::StatusOr<TensorIndexBuilder> TensorIndexBuilder::Create(TensorIndex skeleton,
                                                              std::string header) {
  std::vector<size_t> order(skeleton.tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return skeleton.tensors[a].offset < skeleton.tensors[b].offset;
  });
  uint64_t end = 0;
  for (size_t i : order) {
    const TensorEntry& t = skeleton.tensors[i];
    if (t.offset < end || t.offset > skeleton.file_size ||
        t.length > skeleton.file_size - t.offset) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", t.name, " of ", skeleton.layer_digest.str(), ": range [",
                       t.offset, ", +", t.length, ") overlaps another or leaves the file"));
    }
    end = t.offset + t.length;
  }
  if (header.size() > skeleton.file_size) header.resize(skeleton.file_size);
  return TensorIndexBuilder(std::move(skeleton), std::move(header), std::move(order));
}

TensorIndexBuilder::TensorIndexBuilder(TensorIndex index, std::string header,
                                       std::vector<size_t> order)
    : index_(std::move(index)), header_(std::move(header)), order_(std::move(order)) {}

void TensorIndexBuilder::Update(std::string_view bytes) {
  const uint64_t start = pos_;
  pos_ += bytes.size();
  const uint64_t fo = index_.file_offset;
  // The header: the bytes streamed at [fo, fo + header size) must be the ones parsed.
  if (header_ok_ && start < fo + header_.size() && pos_ > fo) {
    const uint64_t lo = std::max(start, fo), hi = std::min(pos_, fo + header_.size());
    header_ok_ =
        bytes.substr(lo - start, hi - lo) == std::string_view(header_).substr(lo - fo, hi - lo);
  }
  // Tensors in offset order, each hashed while its range passes.
  while (next_ < order_.size()) {
    TensorEntry& t = index_.tensors[order_[next_]];
    const uint64_t lo = fo + t.offset, hi = lo + t.length;
    if (lo >= pos_ && t.length > 0) return;
    const uint64_t from = std::max(lo, start), to = std::min(hi, pos_);
    if (to > from) hasher_.Update(bytes.data() + (from - start), to - from);
    if (hi > pos_) return;
    t.hash = hasher_.Finish();
    ++next_;
  }
}

absl::StatusOr<TensorIndex> TensorIndexBuilder::Finish() {
  if (!header_ok_) {
    return absl::DataLossError(absl::StrCat("layer ", index_.layer_digest.str(),
                                            ": the header streamed differs from the one the "
                                            "tensor list was read from"));
  }
  if (next_ < order_.size()) {
    return absl::DataLossError(absl::StrCat("layer ", index_.layer_digest.str(), " ended at byte ",
                                            pos_, " before tensor ",
                                            index_.tensors[order_[next_]].name, " did"));
  }
  return std::move(index_);
}

absl::StatusOr<TensorIndex> BuildTensorIndex(TensorIndex skeleton, std::string_view layer_bytes) {
  ASSIGN_OR_RETURN(TensorIndexBuilder b, TensorIndexBuilder::Create(std::move(skeleton), ""));
  b.Update(layer_bytes);
  return b.Finish();
}

}  // namespace modelfs
