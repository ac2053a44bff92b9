#include "core/formats/gguf_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

void PutLE(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutString(std::string& out, const std::string& s) {
  PutLE(out, s.size(), 8);
  out += s;
}

uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// Writes the payload of a value (its type id is written by the caller).
absl::Status PutPayload(std::string& out, const GgufValue& value, const std::string& key) {
  return std::visit(
      [&](const auto& x) -> absl::Status {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          PutString(out, x);
        } else if constexpr (std::is_same_v<T, GgufArray>) {
          PutLE(out, static_cast<uint32_t>(x.element_type), 4);
          PutLE(out, x.items.size(), 8);
          for (const GgufValue& item : x.items) {
            if (item.type() != x.element_type) {
              return absl::InvalidArgumentError(absl::StrCat("metadata key '", key, "': array of ",
                                                             GgufValueTypeName(x.element_type),
                                                             " holds a ", item.type_name()));
            }
            RETURN_IF_ERROR(PutPayload(out, item, key));
          }
        } else if constexpr (std::is_same_v<T, bool>) {
          PutLE(out, x ? 1 : 0, 1);
        } else if constexpr (std::is_same_v<T, float>) {
          PutLE(out, std::bit_cast<uint32_t>(x), 4);
        } else if constexpr (std::is_same_v<T, double>) {
          PutLE(out, std::bit_cast<uint64_t>(x), 8);
        } else {
          PutLE(out, static_cast<uint64_t>(static_cast<std::make_unsigned_t<T>>(x)), sizeof(T));
        }
        return absl::OkStatus();
      },
      value.v);
}

absl::Status ErrnoStatus(const std::string& what, int err) {
  std::string msg = absl::StrCat(what, ": ", strerror(err));
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

absl::Status PwriteAll(int fd, const std::string& bytes, uint64_t offset, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n =
        pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(absl::StrCat("write ", path), errno);
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

void GgufWriter::SetAlignment(uint32_t alignment) { SetUint32("general.alignment", alignment); }

void GgufWriter::Set(const std::string& key, GgufValue value) {
  for (auto& [k, v] : metadata_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(key, std::move(value));
}

void GgufWriter::AppendDuplicate(const std::string& key, GgufValue value) {
  metadata_.emplace_back(key, std::move(value));
}

void GgufWriter::SetArray(const std::string& key, GgufValueType element_type,
                          std::vector<GgufValue> items) {
  Set(key, GgufValue::Array(element_type, std::move(items)));
}

void GgufWriter::SetStringArray(const std::string& key, const std::vector<std::string>& items) {
  std::vector<GgufValue> v;
  v.reserve(items.size());
  for (const std::string& s : items) v.emplace_back(s);
  SetArray(key, GgufValueType::kString, std::move(v));
}

void GgufWriter::SetInt32Array(const std::string& key, const std::vector<int32_t>& items) {
  std::vector<GgufValue> v;
  v.reserve(items.size());
  for (int32_t x : items) v.emplace_back(x);
  SetArray(key, GgufValueType::kInt32, std::move(v));
}

void GgufWriter::SetUint32Array(const std::string& key, const std::vector<uint32_t>& items) {
  std::vector<GgufValue> v;
  v.reserve(items.size());
  for (uint32_t x : items) v.emplace_back(x);
  SetArray(key, GgufValueType::kUint32, std::move(v));
}

void GgufWriter::SetFloat32Array(const std::string& key, const std::vector<float>& items) {
  std::vector<GgufValue> v;
  v.reserve(items.size());
  for (float x : items) v.emplace_back(x);
  SetArray(key, GgufValueType::kFloat32, std::move(v));
}

absl::Status GgufWriter::CheckTensor(const std::string& name, const std::vector<uint64_t>& dims,
                                     uint32_t type_id, uint64_t* nbytes) const {
  for (const Tensor& t : tensors_) {
    if (t.info.name == name) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate tensor name '", name, "'"));
    }
  }
  if (dims.size() > 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' has ", dims.size(), " dimensions; at most 4"));
  }
  const GgmlType* type = FindGgmlType(type_id);
  if (type == nullptr || type->removed) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': ggml type id ", type_id, " cannot be written"));
  }
  uint64_t elements = 1;
  for (uint64_t d : dims) {
    if (d != 0 && elements > UINT64_MAX / d) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': too many elements"));
    }
    elements *= d;
  }
  const uint64_t row = dims.empty() ? 1 : dims[0];
  if (row % type->block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': row length ", row,
                                                   " is not a multiple of the ", type->name,
                                                   " block size ", type->block_size));
  }
  ASSIGN_OR_RETURN(*nbytes, GgmlTensorBytes(*type, elements));
  return absl::OkStatus();
}

absl::Status GgufWriter::AddTensor(const std::string& name, std::vector<uint64_t> dims,
                                   uint32_t type_id, std::string data) {
  uint64_t nbytes = 0;
  RETURN_IF_ERROR(CheckTensor(name, dims, type_id, &nbytes));
  if (data.size() != nbytes) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': ", data.size(),
                                                   " bytes of data, the shape needs ", nbytes));
  }
  tensors_.push_back(
      {RawTensor{name, std::move(dims), type_id, nbytes, std::nullopt}, std::move(data), nullptr});
  return absl::OkStatus();
}

absl::Status GgufWriter::AddSparseTensor(const std::string& name, std::vector<uint64_t> dims,
                                         uint32_t type_id) {
  uint64_t nbytes = 0;
  RETURN_IF_ERROR(CheckTensor(name, dims, type_id, &nbytes));
  tensors_.push_back(
      {RawTensor{name, std::move(dims), type_id, nbytes, std::nullopt}, std::string(), nullptr});
  return absl::OkStatus();
}

absl::Status GgufWriter::AddGeneratedTensor(const std::string& name, std::vector<uint64_t> dims,
                                            uint32_t type_id, Generator generate) {
  uint64_t nbytes = 0;
  RETURN_IF_ERROR(CheckTensor(name, dims, type_id, &nbytes));
  tensors_.push_back({RawTensor{name, std::move(dims), type_id, nbytes, std::nullopt},
                      std::string(), std::move(generate)});
  return absl::OkStatus();
}

void GgufWriter::AddRawTensor(RawTensor tensor) {
  tensors_.push_back({std::move(tensor), std::string(), nullptr});
}

uint64_t GgufWriter::LayoutAlignment() const {
  for (const auto& [k, v] : metadata_) {
    if (k != "general.alignment") continue;
    const uint32_t* a = std::get_if<uint32_t>(&v.v);
    if (a != nullptr && *a != 0 && (*a & (*a - 1)) == 0) return *a;
    break;
  }
  return 32;
}

absl::StatusOr<GgufWriter::Layout> GgufWriter::BuildLayout() const {
  Layout layout;
  const uint64_t alignment = LayoutAlignment();
  std::string& h = layout.header;
  h = "GGUF";
  PutLE(h, version_, 4);
  PutLE(h, tensors_.size(), 8);
  PutLE(h, metadata_.size(), 8);
  for (const auto& [key, value] : metadata_) {
    PutString(h, key);
    PutLE(h, static_cast<uint32_t>(value.type()), 4);
    RETURN_IF_ERROR(PutPayload(h, value, key));
  }
  uint64_t cursor = 0;
  for (const Tensor& t : tensors_) {
    const uint64_t off = t.info.offset.value_or(cursor);
    layout.rel_offsets.push_back(off);
    cursor = std::max(cursor, AlignUp(off + t.info.nbytes, alignment));
    PutString(h, t.info.name);
    PutLE(h, t.info.dims.size(), 4);
    for (uint64_t d : t.info.dims) PutLE(h, d, 8);
    PutLE(h, t.info.type_id, 4);
    PutLE(h, off, 8);
  }
  h.resize(AlignUp(h.size(), alignment), '\0');
  layout.data_size = cursor;
  return layout;
}

absl::StatusOr<std::string> GgufWriter::TensorBytes(const Tensor& t) {
  if (!t.generate) return t.data;
  ASSIGN_OR_RETURN(std::string bytes, t.generate());
  if (bytes.size() != t.info.nbytes) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", t.info.name, "': generator gave ",
                                                   bytes.size(), " bytes, the shape needs ",
                                                   t.info.nbytes));
  }
  return bytes;
}

absl::StatusOr<uint64_t> GgufWriter::HeaderSize() const {
  ASSIGN_OR_RETURN(Layout layout, BuildLayout());
  return layout.header.size();
}

absl::StatusOr<uint64_t> GgufWriter::FileSize() const {
  ASSIGN_OR_RETURN(Layout layout, BuildLayout());
  return layout.header.size() + layout.data_size;
}

absl::StatusOr<std::string> GgufWriter::Serialize() const {
  ASSIGN_OR_RETURN(Layout layout, BuildLayout());
  std::string out = std::move(layout.header);
  const uint64_t base = out.size();
  out.resize(base + layout.data_size, '\0');
  for (size_t i = 0; i < tensors_.size(); ++i) {
    ASSIGN_OR_RETURN(std::string bytes, TensorBytes(tensors_[i]));
    std::memcpy(out.data() + base + layout.rel_offsets[i], bytes.data(),
                std::min<uint64_t>(bytes.size(), tensors_[i].info.nbytes));
  }
  return out;
}

absl::Status GgufWriter::WriteFile(const std::string& path) const {
  ASSIGN_OR_RETURN(Layout layout, BuildLayout());
  const std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(absl::StrCat("create ", tmp), errno);
  auto fail = [&](absl::Status s) {
    close(fd);
    unlink(tmp.c_str());
    return s;
  };
  absl::Status s = PwriteAll(fd, layout.header, 0, tmp);
  if (!s.ok()) return fail(s);
  const uint64_t base = layout.header.size();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    if (t.data.empty() && !t.generate) continue;  // sparse: a hole
    auto bytes = TensorBytes(t);
    if (!bytes.ok()) return fail(bytes.status());
    s = PwriteAll(fd, *bytes, base + layout.rel_offsets[i], tmp);
    if (!s.ok()) return fail(s);
  }
  if (ftruncate(fd, static_cast<off_t>(base + layout.data_size)) != 0) {
    return fail(ErrnoStatus(absl::StrCat("truncate ", tmp), errno));
  }
  if (close(fd) != 0) {
    unlink(tmp.c_str());
    return ErrnoStatus(absl::StrCat("close ", tmp), errno);
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    unlink(tmp.c_str());
    return ErrnoStatus(absl::StrCat("rename ", tmp, " to ", path), err);
  }
  return absl::OkStatus();
}

}  // namespace modelfs
