// SafetensorsWriter (safetensors.h): lays tensors out in the reference's order and writes the
// header byte for byte as the reference serializer does, then the file, atomically.
#include "core/formats/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/formats/safetensors_dtypes.h"
#include "core/status/status_macros.h"
#include "core/text/escape.h"
#include "core/text/utf8.h"

namespace modelfs {
namespace {

using safetensors_internal::ComputeSize;
using safetensors_internal::DtypeRank;
using safetensors_internal::ShapeString;
using safetensors_internal::SizeResult;

absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string ErrnoMessage(int err) { return std::strerror(err); }

absl::Status IoError(int err, std::string_view what, const std::string& path) {
  std::string msg = absl::StrCat(AV(what), " ", path, ": ", ErrnoMessage(err));
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  if (err == ENOENT) return absl::NotFoundError(msg);
  return absl::InternalError(msg);
}

absl::Status WriteAll(int fd, std::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError(errno, "write", path);
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

constexpr uint64_t kCallbackPiece = 1 << 20;

}  // namespace

absl::StatusOr<SafetensorsWriter::Entry> SafetensorsWriter::MakeEntry(
    std::string name, std::string dtype, std::vector<uint64_t> shape) const {
  if (name.empty()) return absl::InvalidArgumentError("tensor name is empty");
  if (name == "__metadata__") {
    return absl::InvalidArgumentError("tensor name \"__metadata__\" is reserved");
  }
  if (FindInvalidUtf8(name) != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("tensor name '", name, "' is not UTF-8"));
  }
  if (entries_.count(name)) {
    return absl::AlreadyExistsError(absl::StrCat("tensor '", name, "' was already added"));
  }
  std::optional<uint32_t> bits = SafetensorsDtypeBits(dtype);
  if (!bits) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': unknown dtype \"", dtype, "\""));
  }
  SizeResult size = ComputeSize(shape, *bits);
  if (size.kind == SizeResult::kOverflow) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': shape ", ShapeString(shape), " overflows"));
  }
  if (size.kind == SizeResult::kPartialByte) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': ", size.elements,
                                                   " elements of ", dtype,
                                                   " are not a whole number of bytes"));
  }
  Entry e;
  e.name = std::move(name);
  e.dtype = std::move(dtype);
  e.shape = std::move(shape);
  e.rank = DtypeRank(e.dtype);
  e.elements = size.elements;
  e.size = size.bytes;
  return e;
}

absl::Status SafetensorsWriter::Insert(Entry entry) {
  std::string key = entry.name;
  entries_.emplace(std::move(key), std::move(entry));
  return absl::OkStatus();
}

absl::Status SafetensorsWriter::AddTensor(std::string name, std::string dtype,
                                          std::vector<uint64_t> shape, std::string bytes) {
  ASSIGN_OR_RETURN(Entry e, MakeEntry(std::move(name), std::move(dtype), std::move(shape)));
  if (bytes.size() != e.size) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", e.name, "' (", e.dtype, " ",
                                                   ShapeString(e.shape), ") needs ", e.size,
                                                   " bytes but got ", bytes.size()));
  }
  e.bytes = std::move(bytes);
  return Insert(std::move(e));
}

absl::Status SafetensorsWriter::AddTensorFromCallback(std::string name, std::string dtype,
                                                      std::vector<uint64_t> shape, DataFn data) {
  if (!data) return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': no callback"));
  ASSIGN_OR_RETURN(Entry e, MakeEntry(std::move(name), std::move(dtype), std::move(shape)));
  e.data = std::move(data);
  return Insert(std::move(e));
}

absl::Status SafetensorsWriter::AddSparseTensor(std::string name, std::string dtype,
                                                std::vector<uint64_t> shape) {
  ASSIGN_OR_RETURN(Entry e, MakeEntry(std::move(name), std::move(dtype), std::move(shape)));
  e.sparse = true;
  return Insert(std::move(e));
}

void SafetensorsWriter::SetMetadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

std::vector<const SafetensorsWriter::Entry*> SafetensorsWriter::Ordered() const {
  std::vector<const Entry*> out;
  out.reserve(entries_.size());
  for (const auto& [name, e] : entries_) out.push_back(&e);
  // entries_ is already in name order; a stable sort by descending rank keeps it within a rank.
  std::stable_sort(out.begin(), out.end(),
                   [](const Entry* a, const Entry* b) { return a->rank > b->rank; });
  return out;
}

std::vector<SafetensorsTensor> SafetensorsWriter::Layout() const {
  std::vector<SafetensorsTensor> out;
  out.reserve(entries_.size());
  uint64_t offset = 0;
  for (const Entry* e : Ordered()) {
    SafetensorsTensor t;
    t.name = e->name;
    t.dtype = e->dtype;
    t.shape = e->shape;
    t.begin = offset;
    t.end = offset + e->size;
    t.elements = e->elements;
    offset = t.end;
    out.push_back(std::move(t));
  }
  return out;
}

std::string SafetensorsWriter::SerializeHeader() const {
  std::string json = "{";
  bool first = true;
  if (!metadata_.empty()) {
    json += "\"__metadata__\":{";
    for (const auto& [k, v] : metadata_) {
      if (!first) json.push_back(',');
      first = false;
      AppendJsonString(json, k);
      json.push_back(':');
      AppendJsonString(json, v);
    }
    json += "}";
  }
  bool first_tensor = metadata_.empty();
  for (const SafetensorsTensor& t : Layout()) {
    if (!first_tensor) json.push_back(',');
    first_tensor = false;
    AppendJsonString(json, t.name);
    absl::StrAppend(&json, ":{\"dtype\":\"", t.dtype, "\",\"shape\":", ShapeString(t.shape),
                    ",\"data_offsets\":[", t.begin, ",", t.end, "]}");
  }
  json.push_back('}');
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  out += json;
  return out;
}

std::string SafetensorsWriter::Serialize() const {
  std::string out = SerializeHeader();
  const std::vector<SafetensorsTensor> layout = Layout();
  const std::vector<const Entry*> ordered = Ordered();
  for (size_t i = 0; i < ordered.size(); ++i) {
    const Entry& e = *ordered[i];
    if (e.data) {
      for (uint64_t off = 0; off < e.size; off += kCallbackPiece) {
        const uint64_t len = std::min(kCallbackPiece, e.size - off);
        absl::StatusOr<std::string> piece = e.data(layout[i], off, len);
        if (piece.ok() && piece->size() == len) {
          out += *piece;
        } else {
          out.append(len, '\0');
        }
      }
    } else if (e.sparse) {
      out.append(e.size, '\0');
    } else {
      out += e.bytes;
    }
  }
  return out;
}

absl::Status SafetensorsWriter::WriteFile(const std::string& path) const {
  const std::string header = SerializeHeader();
  if (header.size() - 8 > kSafetensorsMaxHeaderSize) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": safetensors header of ",
                                                   header.size() - 8, " bytes exceeds the limit ",
                                                   kSafetensorsMaxHeaderSize));
  }
  std::string tmp = path + ".tmp-XXXXXX";
  int fd = ::mkstemp(tmp.data());
  if (fd < 0) return IoError(errno, "create temporary file for", path);
  auto fail = [&](absl::Status s) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  };
  if (::fchmod(fd, 0644) != 0) return fail(IoError(errno, "chmod", tmp));
  if (absl::Status s = WriteAll(fd, header, tmp); !s.ok()) return fail(s);
  uint64_t total = header.size();
  const std::vector<SafetensorsTensor> layout = Layout();
  const std::vector<const Entry*> ordered = Ordered();
  for (size_t i = 0; i < ordered.size(); ++i) {
    const Entry& e = *ordered[i];
    if (e.data) {
      for (uint64_t off = 0; off < e.size; off += kCallbackPiece) {
        const uint64_t len = std::min(kCallbackPiece, e.size - off);
        absl::StatusOr<std::string> piece = e.data(layout[i], off, len);
        if (!piece.ok()) return fail(piece.status());
        if (piece->size() != len) {
          return fail(absl::InvalidArgumentError(
              absl::StrCat(path, ": tensor '", e.name, "': callback returned ", piece->size(),
                           " bytes at offset ", off, ", wanted ", len)));
        }
        if (absl::Status s = WriteAll(fd, *piece, tmp); !s.ok()) return fail(s);
      }
    } else if (e.sparse) {
      if (::lseek(fd, static_cast<off_t>(e.size), SEEK_CUR) < 0) {
        return fail(IoError(errno, "seek in", tmp));
      }
    } else {
      if (absl::Status s = WriteAll(fd, e.bytes, tmp); !s.ok()) return fail(s);
    }
    total += e.size;
  }
  // A trailing sparse tensor leaves the file short; extend it with a hole.
  if (::ftruncate(fd, static_cast<off_t>(total)) != 0) return fail(IoError(errno, "truncate", tmp));
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return IoError(err, "close", tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return IoError(err, "rename into place", path);
  }
  return absl::OkStatus();
}

}  // namespace modelfs
