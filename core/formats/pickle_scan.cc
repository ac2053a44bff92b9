#include "core/formats/pickle_scan.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status/status_macros.h"
#include "core/text/base_name.h"
#include "core/text/escape.h"

namespace modelfs {
namespace {

absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Bounds on a scan of a file, far above any real checkpoint's, so that a hostile file costs
// memory and reads in proportion to its own size at most.
constexpr size_t kMaxStreams = 64;  // consecutive pickles at the start of a raw file
constexpr uint64_t kInitialWindow = 16ull << 20;
constexpr uint64_t kMaxWindow = 1ull << 30;
constexpr uint64_t kMaxZipEntry = 1ull << 30;

bool IsTorchDtypeName(std::string_view n) {
  static const auto* kNames = new std::set<std::string, std::less<>>{"float16",
                                                                     "float32",
                                                                     "float64",
                                                                     "bfloat16",
                                                                     "half",
                                                                     "float",
                                                                     "double",
                                                                     "int8",
                                                                     "int16",
                                                                     "int32",
                                                                     "int64",
                                                                     "uint8",
                                                                     "uint16",
                                                                     "uint32",
                                                                     "uint64",
                                                                     "bool",
                                                                     "complex64",
                                                                     "complex128",
                                                                     "cfloat",
                                                                     "cdouble",
                                                                     "qint8",
                                                                     "quint8",
                                                                     "qint32",
                                                                     "quint4x2",
                                                                     "quint2x4",
                                                                     "float8_e4m3fn",
                                                                     "float8_e5m2",
                                                                     "float8_e4m3fnuz",
                                                                     "float8_e5m2fnuz",
                                                                     "long",
                                                                     "int",
                                                                     "short",
                                                                     "chalf"};
  return kNames->count(n) > 0;
}

bool IsDangerousModule(std::string_view module, std::string_view name) {
  static const auto* kModules = new std::set<std::string, std::less<>>{
      "os",         "posix",    "nt",        "subprocess", "sys",
      "socket",     "shutil",   "runpy",     "pty",        "importlib",
      "ctypes",     "marshal",  "pickle",    "_pickle",    "webbrowser",
      "code",       "pdb",      "commands",  "platform",   "multiprocessing",
      "asyncio",    "timeit",   "requests",  "urllib",     "httplib",
      "http",       "ftplib",   "telnetlib", "smtplib",    "signal",
      "threading",  "tempfile", "glob",      "zipimport",  "torch.hub",
      "torch.load", "__main__"};
  const std::string_view root = module.substr(0, module.find('.'));
  if (kModules->count(module) || kModules->count(root)) return true;
  if (module == "builtins" || module == "__builtin__") {
    static const auto* kNames = new std::set<std::string, std::less<>>{
        "eval",       "exec",  "execfile", "compile",    "open",    "getattr", "setattr", "delattr",
        "__import__", "apply", "input",    "breakpoint", "globals", "locals",  "vars",    "file"};
    return kNames->count(name) > 0;
  }
  return module == "torch" && (name == "load" || name == "_load_from_bytes");
}

uint32_t Le32(std::string_view b, size_t off) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(b[off + i]);
  return v;
}
uint16_t Le16(std::string_view b, size_t off) {
  return static_cast<uint16_t>(static_cast<uint8_t>(b[off]) |
                               (static_cast<uint8_t>(b[off + 1]) << 8));
}
uint64_t Le64(std::string_view b, size_t off) {
  return static_cast<uint64_t>(Le32(b, off)) | (static_cast<uint64_t>(Le32(b, off + 4)) << 32);
}

void Flag(PickleScan& scan, const std::string& what) {
  if (std::find(scan.flagged.begin(), scan.flagged.end(), what) == scan.flagged.end()) {
    scan.flagged.push_back(what);
  }
}

void Collect(PickleScan& scan) {
  for (const PickleStream& s : scan.streams) {
    for (const PickleImport& i : s.imports) {
      if (!i.allowed) Flag(scan, i.Qualified());
    }
    if (!s.error.empty()) Flag(scan, absl::StrCat(s.name, ": not fully scanned"));
  }
}

struct ZipEntry {
  std::string name;
  uint16_t method = 0;
  uint64_t compressed = 0;
  uint64_t local_offset = 0;
};

// The central directory of a zip (zip64 included). `tail` is the last bytes of the file,
// starting at `tail_start`.
absl::StatusOr<std::vector<ZipEntry>> ReadZipDirectory(RangeReader& reader, uint64_t size,
                                                       const std::string& where) {
  const uint64_t tail_len = std::min<uint64_t>(size, 65535 + 22);
  const uint64_t tail_start = size - tail_len;
  ASSIGN_OR_RETURN(std::string tail, reader.ReadAt(tail_start, tail_len));
  size_t eocd = std::string::npos;
  for (size_t i = tail.size() >= 22 ? tail.size() - 22 + 1 : 0; i-- > 0;) {
    if (Le32(tail, i) == 0x06054b50) {
      eocd = i;
      break;
    }
  }
  if (eocd == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": a zip archive without an end of central directory record"));
  }
  uint64_t count = Le16(tail, eocd + 10);
  uint64_t cd_size = Le32(tail, eocd + 12);
  uint64_t cd_offset = Le32(tail, eocd + 16);
  if (count == 0xffff || cd_size == 0xffffffff || cd_offset == 0xffffffff) {
    // zip64: the locator sits just before the EOCD and points at the zip64 EOCD record.
    if (eocd < 20 || Le32(tail, eocd - 20) != 0x07064b50) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": zip64 locator missing"));
    }
    const uint64_t rec = Le64(tail, eocd - 20 + 8);
    if (rec > size || size - rec < 56) {
      return absl::OutOfRangeError(
          absl::StrCat(where, ": zip64 record at ", rec, " is past the end"));
    }
    ASSIGN_OR_RETURN(std::string z, reader.ReadAt(rec, 56));
    if (Le32(z, 0) != 0x06064b50) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": bad zip64 record at byte ", rec));
    }
    count = Le64(z, 32);
    cd_size = Le64(z, 40);
    cd_offset = Le64(z, 48);
  }
  if (cd_offset > size || cd_size > size - cd_offset || cd_size > (256ull << 20)) {
    return absl::OutOfRangeError(absl::StrCat(where, ": central directory (", cd_size, " bytes at ",
                                              cd_offset, ") is past the end"));
  }
  ASSIGN_OR_RETURN(std::string cd, reader.ReadAt(cd_offset, cd_size));
  std::vector<ZipEntry> out;
  size_t p = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (cd.size() - p < 46 || Le32(cd, p) != 0x02014b50) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": zip central directory entry ", i, " is malformed"));
    }
    ZipEntry e;
    e.method = Le16(cd, p + 10);
    e.compressed = Le32(cd, p + 20);
    uint64_t uncompressed = Le32(cd, p + 24);
    const size_t name_len = Le16(cd, p + 28), extra_len = Le16(cd, p + 30),
                 comment_len = Le16(cd, p + 32);
    e.local_offset = Le32(cd, p + 42);
    if (cd.size() - p - 46 < name_len + extra_len + comment_len) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": zip central directory entry ", i, " runs past the directory"));
    }
    e.name = cd.substr(p + 46, name_len);
    // zip64 extra field: the 64-bit values replace the 0xffffffff ones, in this order.
    std::string_view extra = std::string_view(cd).substr(p + 46 + name_len, extra_len);
    for (size_t x = 0; x + 4 <= extra.size();) {
      const uint16_t id = Le16(extra, x), len = Le16(extra, x + 2);
      if (x + 4 + len > extra.size()) break;
      if (id == 0x0001) {
        size_t q = x + 4;
        auto next = [&](uint64_t& field) {
          if (field == 0xffffffff && q + 8 <= x + 4 + len) {
            field = Le64(extra, q);
            q += 8;
          }
        };
        next(uncompressed);
        next(e.compressed);
        next(e.local_offset);
      }
      x += 4 + len;
    }
    out.push_back(std::move(e));
    p += 46 + name_len + extra_len + comment_len;
  }
  return out;
}

absl::Status ScanZip(RangeReader& reader, PickleScan& scan) {
  ASSIGN_OR_RETURN(std::vector<ZipEntry> entries,
                   ReadZipDirectory(reader, scan.file_size, scan.location));
  for (const ZipEntry& e : entries) {
    if (!absl::EndsWith(e.name, ".pkl")) continue;
    PickleStream s;
    s.name = e.name;
    if (e.local_offset > scan.file_size || scan.file_size - e.local_offset < 30) {
      s.error = absl::StrCat("local header at byte ", e.local_offset, " is past the end");
      scan.streams.push_back(std::move(s));
      continue;
    }
    ASSIGN_OR_RETURN(std::string lh, reader.ReadAt(e.local_offset, 30));
    if (Le32(lh, 0) != 0x04034b50) {
      s.error = absl::StrCat("no local header at byte ", e.local_offset);
      scan.streams.push_back(std::move(s));
      continue;
    }
    const uint64_t data = e.local_offset + 30 + Le16(lh, 26) + Le16(lh, 28);
    s.offset = data;
    if (e.method != 0) {
      s.error = absl::StrCat("compressed entry (method ", e.method, ") not scanned");
    } else if (data > scan.file_size || e.compressed > scan.file_size - data) {
      s.error = "entry runs past the end of the file";
    } else if (e.compressed > kMaxZipEntry) {
      s.error = absl::StrCat("entry of ", e.compressed, " bytes is too large to scan");
    } else {
      ASSIGN_OR_RETURN(std::string bytes, reader.ReadAt(data, e.compressed));
      PickleStream scanned = ScanPickleStream(bytes);
      scanned.name = s.name;
      scanned.offset = data;
      for (PickleImport& i : scanned.imports) i.offset += data;
      for (PickleCall& c : scanned.calls) c.offset += data;
      s = std::move(scanned);
    }
    scan.streams.push_back(std::move(s));
  }
  if (scan.streams.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        scan.location, ": a zip archive with no .pkl entry (not a PyTorch checkpoint)"));
  }
  return absl::OkStatus();
}

absl::Status ScanRaw(RangeReader& reader, PickleScan& scan) {
  uint64_t window = std::min(scan.file_size, kInitialWindow);
  while (true) {
    ASSIGN_OR_RETURN(std::string bytes, reader.ReadAt(0, window));
    scan.streams.clear();
    uint64_t pos = 0;
    bool grow = false;
    while (pos < bytes.size() && scan.streams.size() < kMaxStreams) {
      if (pos > 0 && static_cast<uint8_t>(bytes[pos]) != 0x80) break;  // data, not a pickle
      PickleStream s = ScanPickleStream(std::string_view(bytes).substr(pos));
      s.name = scan.streams.empty()
                   ? "pickle"
                   : absl::StrCat("pickle ", scan.streams.size() + 1, " at byte ", pos);
      s.offset = pos;
      if (absl::StartsWith(s.error, "truncated") && window < scan.file_size) {
        grow = true;
        break;
      }
      pos += s.size;
      // Offsets in a stream count from its start; report them from the file's start.
      for (PickleImport& i : s.imports) i.offset += s.offset;
      for (PickleCall& c : s.calls) c.offset += s.offset;
      const bool stop = !s.error.empty();
      scan.streams.push_back(std::move(s));
      if (stop) break;
    }
    if (!grow || window >= kMaxWindow) return absl::OkStatus();
    window = std::min({scan.file_size, window * 4, kMaxWindow});
  }
}

}  // namespace

std::string PickleGlobalAlias(std::string_view module, std::string_view name) {
  if (module == "posix" || module == "nt") return absl::StrCat("os.", AV(name));
  if (module == "__builtin__") return absl::StrCat("builtins.", AV(name));
  return "";
}

bool IsPickleFileName(std::string_view path) {
  const std::string base = absl::AsciiStrToLower(BaseName(path));
  for (const char* ext : {".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt"}) {
    if (absl::EndsWith(base, ext)) return true;
  }
  return false;
}

bool IsAllowedPickleGlobal(std::string_view module, std::string_view name) {
  if (module == "torch._utils") {
    static const auto* kNames =
        new std::set<std::string, std::less<>>{"_rebuild_tensor",
                                               "_rebuild_tensor_v2",
                                               "_rebuild_tensor_v3",
                                               "_rebuild_parameter",
                                               "_rebuild_parameter_with_state",
                                               "_rebuild_qtensor",
                                               "_rebuild_meta_tensor_no_storage"};
    return kNames->count(name) > 0;
  }
  if (module == "torch") {
    if (name == "Size" || name == "device" || IsTorchDtypeName(name)) return true;
    if (name.size() > 7 && absl::EndsWith(AV(name), "Storage")) {
      return std::all_of(name.begin(), name.end(),
                         [](char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)); });
    }
    return false;
  }
  if (module == "torch.storage") return name == "UntypedStorage" || name == "TypedStorage";
  if (module == "collections") return name == "OrderedDict";
  if (module == "numpy.core.multiarray" || module == "numpy._core.multiarray") {
    return name == "_reconstruct" || name == "scalar";
  }
  if (module == "numpy") return name == "dtype" || name == "ndarray";
  if (module == "_codecs") return name == "encode";
  if (module == "builtins" || module == "__builtin__") {
    return name == "set" || name == "frozenset" || name == "bytearray" || name == "slice" ||
           name == "complex";
  }
  return false;
}

bool LooksLikePickleCheckpoint(std::string_view first) {
  if (first.size() >= 4 && first.substr(0, 4) == std::string_view("PK\x03\x04", 4)) return true;
  return first.size() >= 2 && static_cast<uint8_t>(first[0]) == 0x80 &&
         static_cast<uint8_t>(first[1]) <= 5;
}

absl::StatusOr<PickleScan> ScanPickleFile(RangeReader& reader) {
  PickleScan scan;
  scan.location = reader.name();
  ASSIGN_OR_RETURN(scan.file_size, reader.Size());
  if (scan.file_size == 0) {
    return absl::InvalidArgumentError(absl::StrCat(scan.location, ": empty file, not a pickle"));
  }
  ASSIGN_OR_RETURN(std::string first, reader.ReadAt(0, std::min<uint64_t>(scan.file_size, 4)));
  if (first.size() == 4 && first == std::string_view("PK\x03\x04", 4)) {
    scan.kind = "zip";
    RETURN_IF_ERROR(ScanZip(reader, scan));
  } else {
    scan.kind = "pickle";
    RETURN_IF_ERROR(ScanRaw(reader, scan));
    // A first stream that stops before STOP without importing anything was never a pickle (a
    // text file, a GGML .bin): nothing in it could run, and it is not a checkpoint either.
    if (!scan.streams.empty() && !scan.streams[0].error.empty() &&
        scan.streams[0].imports.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          scan.location, ": neither a zip archive nor a pickle (", scan.streams[0].error, ")"));
    }
  }
  for (PickleStream& s : scan.streams) {
    for (PickleImport& i : s.imports)
      i.dangerous = !i.allowed && IsDangerousModule(i.module, i.name);
  }
  Collect(scan);
  return scan;
}

absl::StatusOr<PickleScan> ScanPickleBytes(std::string_view bytes, std::string_view name) {
  std::unique_ptr<RangeReader> r = MakeMemoryRangeReaderView(std::string(name), bytes);
  return ScanPickleFile(*r);
}

}  // namespace modelfs
