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
#include "core/text/escape.h"

namespace modelfs {
namespace {

absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Bounds on the symbolic machine, far above any real checkpoint's, so that a hostile stream
// costs memory in proportion to its own length at most.
constexpr size_t kMaxStack = 1 << 20;
constexpr size_t kMaxMemo = 1 << 20;
constexpr size_t kMaxCalls = 1 << 16;  // recorded; a state dict makes one per tensor
constexpr size_t kMaxStreams = 64;     // consecutive pickles at the start of a raw file
constexpr uint64_t kInitialWindow = 16ull << 20;
constexpr uint64_t kMaxWindow = 1ull << 30;
constexpr uint64_t kMaxZipEntry = 1ull << 30;

// A value on the symbolic stack: only strings and imported globals matter. The text is shared,
// so DUP and the memo copy a pointer, never the bytes.
struct Value {
  enum Kind : uint8_t { kOther, kString, kGlobal, kMark };
  Kind kind = kOther;
  std::shared_ptr<const std::string> text;  // kString: the string; kGlobal: "module.name"
  const std::string& str() const {
    static const std::string kEmpty;
    return text ? *text : kEmpty;
  }
};

// Longer strings are kept cut: no module or name is this long, and a flagged import shows
// enough of it.
constexpr size_t kMaxKeptString = 4096;

Value Str(std::string_view s) {
  return Value{Value::kString, std::make_shared<const std::string>(s.substr(0, kMaxKeptString))};
}
Value Global(std::string qualified) {
  return Value{Value::kGlobal, std::make_shared<const std::string>(std::move(qualified))};
}

class Machine {
 public:
  explicit Machine(std::string_view bytes) : in_(bytes) {}

  PickleStream Run() {
    PickleStream s;
    std::string err = Loop(s);
    s.size = pos_;
    s.error = err;
    return s;
  }

 private:
  // Returns "" at STOP, else why it stopped.
  std::string Loop(PickleStream& s) {
    while (true) {
      if (pos_ >= in_.size()) return "truncated: the stream ends before STOP";
      const uint64_t at = pos_;
      const uint8_t op = static_cast<uint8_t>(in_[pos_++]);
      std::string err = Step(op, at, s);
      if (err == "STOP") return "";
      if (!err.empty())
        return absl::StrCat(err, " (opcode 0x", absl::Hex(op, absl::kZeroPad2), " at byte ", at,
                            ")");
    }
  }

  // Argument readers: "" on success.
  bool Take(uint64_t n, std::string_view* out) {
    if (n > in_.size() - pos_) return false;
    *out = in_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool Uint(int width, uint64_t* v) {
    std::string_view b;
    if (!Take(width, &b)) return false;
    *v = 0;
    for (int i = width - 1; i >= 0; --i) *v = (*v << 8) | static_cast<uint8_t>(b[i]);
    return true;
  }
  bool Line(std::string_view* out) {
    const size_t nl = in_.find('\n', pos_);
    if (nl == std::string_view::npos) return false;
    *out = in_.substr(pos_, nl - pos_);
    pos_ = nl + 1;
    return true;
  }

  std::string Push(Value v) {
    if (stack_.size() >= kMaxStack) return "stack deeper than the scanner allows";
    stack_.push_back(std::move(v));
    return "";
  }
  std::string PushOther() { return Push(Value{}); }
  bool Pop(Value* v = nullptr) {
    if (stack_.empty() || stack_.back().kind == Value::kMark) return false;
    if (v != nullptr) *v = std::move(stack_.back());
    stack_.pop_back();
    return true;
  }
  // Pops everything down to and including the topmost MARK; `first` gets the item just above it.
  bool PopToMark(Value* first = nullptr) {
    size_t i = stack_.size();
    while (i > 0 && stack_[i - 1].kind != Value::kMark) --i;
    if (i == 0) return false;
    if (first != nullptr) *first = i < stack_.size() ? stack_[i] : Value{};
    stack_.resize(i - 1);
    return true;
  }
  std::string Memo(uint64_t index) {
    if (stack_.empty() || stack_.back().kind == Value::kMark)
      return "memo store with an empty stack";
    if (memo_.size() >= kMaxMemo && !memo_.count(index))
      return "memo larger than the scanner allows";
    memo_[index] = stack_.back();
    return "";
  }
  std::string Recall(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) return absl::StrCat("memo index ", index, " was never stored");
    return Push(it->second);
  }

  void Import(PickleStream& s, std::string_view module, std::string_view name, const char* opcode,
              uint64_t at) {
    PickleImport imp;
    imp.module = std::string(module.substr(0, kMaxKeptString));
    imp.name = std::string(name.substr(0, kMaxKeptString));
    imp.opcode = opcode;
    imp.offset = at;
    imp.allowed = IsAllowedPickleGlobal(module, name);
    s.imports.push_back(std::move(imp));
  }
  void Call(PickleStream& s, const Value& callable, const char* opcode, uint64_t at) {
    if (s.calls.size() >= kMaxCalls) return;
    s.calls.push_back(
        {callable.kind == Value::kGlobal ? callable.str() : "<not a global>", opcode, at});
  }

  std::string Step(uint8_t op, uint64_t at, PickleStream& s) {
    std::string_view a, b;
    uint64_t n = 0;
    Value v, w;
    const std::string kTrunc = "truncated argument";
    const std::string kUnder = "stack underflow";
    switch (op) {
      case '.':  // STOP
        if (stack_.empty()) return "STOP with an empty stack";
        return "STOP";
      case 0x80:  // PROTO
        if (!Uint(1, &n)) return kTrunc;
        s.protocol = static_cast<int>(n);
        if (n > 5) return absl::StrCat("unknown protocol ", n);
        return "";
      case 0x95:  // FRAME: a length hint, the opcodes follow inline
        return Uint(8, &n) ? "" : kTrunc;
      case '(':  // MARK
        return Push(Value{Value::kMark, nullptr});
      case '0':  // POP (also pops a MARK, as pickle does)
        if (stack_.empty()) return kUnder;
        stack_.pop_back();
        return "";
      case '1':  // POP_MARK
        return PopToMark() ? "" : kUnder;
      case '2':  // DUP
        if (stack_.empty()) return kUnder;
        return Push(stack_.back());
      // Scalars.
      case 'F':
      case 'I':
      case 'L':
        return Line(&a) ? PushOther() : kTrunc;
      case 'J':
        return Uint(4, &n) ? PushOther() : kTrunc;
      case 'K':
        return Uint(1, &n) ? PushOther() : kTrunc;
      case 'M':
        return Uint(2, &n) ? PushOther() : kTrunc;
      case 'G':
        return Take(8, &a) ? PushOther() : kTrunc;
      case 'N':
      case 0x88:
      case 0x89:
      case 0x97:  // NEXT_BUFFER
        return PushOther();
      case 0x98:  // READONLY_BUFFER
        return stack_.empty() ? kUnder : "";
      case 0x8a:  // LONG1
        if (!Uint(1, &n) || !Take(n, &a)) return kTrunc;
        return PushOther();
      case 0x8b:  // LONG4
        if (!Uint(4, &n) || !Take(n, &a)) return kTrunc;
        return PushOther();
      // Strings and bytes.
      case 'S': {  // STRING: a quoted repr on one line
        if (!Line(&a)) return kTrunc;
        std::string_view t = a;
        if (t.size() >= 2 && (t.front() == '\'' || t.front() == '"') && t.back() == t.front()) {
          t = t.substr(1, t.size() - 2);
        }
        return Push(Str(t));
      }
      case 'V':  // UNICODE (raw-unicode-escape; module names are plain ASCII)
        if (!Line(&a)) return kTrunc;
        return Push(Str(a));
      case 'T':  // BINSTRING
      case 'X':  // BINUNICODE
      case 'B':  // BINBYTES
        if (!Uint(4, &n) || !Take(n, &a)) return kTrunc;
        return Push(Str(a));
      case 'U':   // SHORT_BINSTRING
      case 'C':   // SHORT_BINBYTES
      case 0x8c:  // SHORT_BINUNICODE
        if (!Uint(1, &n) || !Take(n, &a)) return kTrunc;
        return Push(Str(a));
      case 0x8d:  // BINUNICODE8
      case 0x8e:  // BINBYTES8
      case 0x96:  // BYTEARRAY8
        if (!Uint(8, &n) || !Take(n, &a)) return kTrunc;
        return Push(Str(a));
      // Containers.
      case ']':
      case ')':
      case '}':
      case 0x8f:  // EMPTY_SET
        return PushOther();
      case 'l':
      case 't':
      case 'd':
      case 0x91:  // FROZENSET
        return PopToMark() ? PushOther() : kUnder;
      case 'a':  // APPEND
        if (!Pop() || stack_.empty()) return kUnder;
        return "";
      case 'e':   // APPENDS
      case 'u':   // SETITEMS
      case 0x90:  // ADDITEMS
        if (!PopToMark() || stack_.empty()) return kUnder;
        return "";
      case 's':  // SETITEM
        if (!Pop() || !Pop() || stack_.empty()) return kUnder;
        return "";
      case 0x85:  // TUPLE1
        if (!Pop()) return kUnder;
        return PushOther();
      case 0x86:  // TUPLE2
        if (!Pop() || !Pop()) return kUnder;
        return PushOther();
      case 0x87:  // TUPLE3
        if (!Pop() || !Pop() || !Pop()) return kUnder;
        return PushOther();
      // Memo.
      case 'p':  // PUT
        if (!Line(&a) || !absl::SimpleAtoi(AV(a), &n)) return kTrunc;
        return Memo(n);
      case 'q':
        return Uint(1, &n) ? Memo(n) : kTrunc;
      case 'r':
        return Uint(4, &n) ? Memo(n) : kTrunc;
      case 0x94:  // MEMOIZE
        return Memo(memo_next_++);
      case 'g':
        if (!Line(&a) || !absl::SimpleAtoi(AV(a), &n)) return kTrunc;
        return Recall(n);
      case 'h':
        return Uint(1, &n) ? Recall(n) : kTrunc;
      case 'j':
        return Uint(4, &n) ? Recall(n) : kTrunc;
      // Persistent ids: torch's storages; persistent_load is the unpickler's own code.
      case 'P':
        return Line(&a) ? PushOther() : kTrunc;
      case 'Q':
        if (!Pop()) return kUnder;
        return PushOther();
      // Imports.
      case 'c':  // GLOBAL module\nname\n
        if (!Line(&a) || !Line(&b)) return kTrunc;
        Import(s, a, b, "GLOBAL", at);
        return Push(Global(absl::StrCat(AV(a), ".", AV(b))));
      case 0x93: {  // STACK_GLOBAL
        if (!Pop(&w) || !Pop(&v)) return kUnder;
        if (v.kind != Value::kString || w.kind != Value::kString) {
          Import(s, "<unknown>", "<unknown>", "STACK_GLOBAL", at);
          return Push(Global("<unknown>.<unknown>"));
        }
        Import(s, v.str(), w.str(), "STACK_GLOBAL", at);
        return Push(Global(absl::StrCat(v.str(), ".", w.str())));
      }
      case 0x82:  // EXT1, EXT2, EXT4: the copyreg extension registry, an import by number
      case 0x83:
      case 0x84: {
        const int width = op == 0x82 ? 1 : op == 0x83 ? 2 : 4;
        if (!Uint(width, &n)) return kTrunc;
        const char* name = op == 0x82 ? "EXT1" : op == 0x83 ? "EXT2" : "EXT4";
        Import(s, "<copyreg extension>", absl::StrCat(n), name, at);
        return Push(Global(absl::StrCat("<copyreg extension>.", n)));
      }
      case 'i': {  // INST module\nname\n: import, then call it with the items above MARK
        if (!Line(&a) || !Line(&b)) return kTrunc;
        Import(s, a, b, "INST", at);
        if (!PopToMark()) return kUnder;
        Call(s, Global(absl::StrCat(AV(a), ".", AV(b))), "INST", at);
        return PushOther();
      }
      // Calls.
      case 'R':  // REDUCE callable args
        if (!Pop(&w) || !Pop(&v)) return kUnder;
        Call(s, v, "REDUCE", at);
        return PushOther();
      case 0x81:  // NEWOBJ cls args
        if (!Pop(&w) || !Pop(&v)) return kUnder;
        Call(s, v, "NEWOBJ", at);
        return PushOther();
      case 0x92:  // NEWOBJ_EX cls args kwargs
        if (!Pop() || !Pop() || !Pop(&v)) return kUnder;
        Call(s, v, "NEWOBJ_EX", at);
        return PushOther();
      case 'o':  // OBJ: MARK cls args...
        if (!PopToMark(&v)) return kUnder;
        Call(s, v, "OBJ", at);
        return PushOther();
      case 'b':  // BUILD obj state: __setstate__ of an object already made
        if (!Pop() || stack_.empty()) return kUnder;
        return "";
      default:
        return "unknown opcode";
    }
  }

  std::string_view in_;
  uint64_t pos_ = 0;
  std::vector<Value> stack_;
  std::map<uint64_t, Value> memo_;
  uint64_t memo_next_ = 0;
};

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

std::string Alias(std::string_view module, std::string_view name) {
  if (module == "posix" || module == "nt") return absl::StrCat("os.", AV(name));
  if (module == "__builtin__") return absl::StrCat("builtins.", AV(name));
  return "";
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

PickleStream ScanPickleStream(std::string_view bytes) { return Machine(bytes).Run(); }

bool IsPickleFileName(std::string_view path) {
  const size_t slash = path.rfind('/');
  const std::string base =
      absl::AsciiStrToLower(AV(slash == std::string_view::npos ? path : path.substr(slash + 1)));
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
  std::unique_ptr<RangeReader> r = MakeMemoryRangeReader(std::string(name), std::string(bytes));
  return ScanPickleFile(*r);
}

// Strings from a pickle need not be UTF-8, which JSON text must be: they are shown escaped,
// as the text output shows them.
nlohmann::json Text(const std::string& s) { return EscapeUntrusted(s); }

nlohmann::json PickleScanToJson(const PickleScan& scan) {
  nlohmann::json streams = nlohmann::json::array();
  for (const PickleStream& s : scan.streams) {
    nlohmann::json imports = nlohmann::json::array();
    for (const PickleImport& i : s.imports) {
      const std::string alias = Alias(i.module, i.name);
      imports.push_back({{"module", Text(i.module)},
                         {"name", Text(i.name)},
                         {"global", Text(i.Qualified())},
                         {"alias", alias.empty() ? nlohmann::json(nullptr) : Text(alias)},
                         {"opcode", i.opcode},
                         {"offset", i.offset},
                         {"allowed", i.allowed},
                         {"dangerous", i.dangerous}});
    }
    nlohmann::json calls = nlohmann::json::array();
    for (const PickleCall& c : s.calls) {
      calls.push_back({{"target", Text(c.target)}, {"opcode", c.opcode}, {"offset", c.offset}});
    }
    streams.push_back({{"name", Text(s.name)},
                       {"offset", s.offset},
                       {"size", s.size},
                       {"protocol", s.protocol},
                       {"imports", imports},
                       {"calls", calls},
                       {"error", s.error.empty() ? nlohmann::json(nullptr) : Text(s.error)}});
  }
  nlohmann::json flagged = nlohmann::json::array();
  for (const std::string& f : scan.flagged) flagged.push_back(Text(f));
  return {{"location", Text(scan.location)},
          {"format", "pickle"},
          {"kind", scan.kind},
          {"file_size", scan.file_size},
          {"streams", streams},
          {"flagged", flagged},
          {"safe", scan.safe()}};
}

std::string RenderPickleScan(const PickleScan& scan) {
  std::string out =
      absl::StrCat(EscapeUntrusted(scan.location), ": ",
                   scan.kind == "zip" ? "PyTorch zip checkpoint" : "pickle stream", ", ",
                   scan.streams.size(), scan.streams.size() == 1 ? " pickle" : " pickles", " (");
  for (size_t i = 0; i < scan.streams.size(); ++i) {
    const PickleStream& s = scan.streams[i];
    absl::StrAppend(&out, i ? "; " : "", EscapeUntrusted(s.name), ", ", s.size, " bytes",
                    s.protocol ? absl::StrCat(", protocol ", s.protocol) : "");
  }
  absl::StrAppend(&out, "), nothing executed\n");
  // One line per distinct global, with its call count, in first-seen order.
  struct Row {
    const PickleImport* first;
    int imports = 0;
    int calls = 0;
  };
  std::vector<std::string> order;
  std::map<std::string, Row> rows;
  for (const PickleStream& s : scan.streams) {
    for (const PickleImport& i : s.imports) {
      auto [it, inserted] = rows.try_emplace(i.Qualified(), Row{&i});
      if (inserted) order.push_back(i.Qualified());
      ++it->second.imports;
    }
    for (const PickleCall& c : s.calls) {
      if (auto it = rows.find(c.target); it != rows.end()) ++it->second.calls;
    }
  }
  absl::StrAppend(&out, "imports (", order.size(), "):\n");
  for (const std::string& g : order) {
    const Row& r = rows[g];
    const PickleImport& i = *r.first;
    const std::string alias = Alias(i.module, i.name);
    const std::string label =
        EscapeUntrusted(alias.empty() ? g : absl::StrCat(g, " (", alias, ")"));
    absl::StrAppend(&out, absl::StrFormat("  %-44s %-10s %d call(s)", label,
                                          i.allowed     ? "allowed"
                                          : i.dangerous ? "DANGEROUS"
                                                        : "FLAGGED",
                                          r.calls));
    if (!i.allowed) absl::StrAppend(&out, "  at byte ", i.offset, " (", i.opcode, ")");
    absl::StrAppend(&out, "\n");
  }
  for (const PickleStream& s : scan.streams) {
    if (!s.error.empty()) {
      absl::StrAppend(&out, "  ", EscapeUntrusted(s.name),
                      ": scan stopped: ", EscapeUntrusted(s.error), "\n");
    }
  }
  if (scan.safe()) {
    absl::StrAppend(&out, "verdict: every import is in the allow-list\n");
  } else {
    std::string list;
    for (size_t i = 0; i < scan.flagged.size(); ++i) {
      absl::StrAppend(&list, i ? ", " : "", EscapeUntrusted(scan.flagged[i]));
    }
    absl::StrAppend(&out, "verdict: ", scan.flagged.size(), " flagged: ", list, "\n");
  }
  return out;
}

}  // namespace modelfs
