// The symbolic pickle machine behind ScanPickleStream (pickle_scan.h): it follows the opcodes
// of one pickle stream without executing any, tracking only strings and imported globals, and
// records every import and every call of an imported global.
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/formats/pickle_scan.h"

namespace modelfs {
namespace {

absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Bounds on the symbolic machine, far above any real checkpoint's, so that a hostile stream
// costs memory in proportion to its own length at most.
constexpr size_t kMaxStack = 1 << 20;
constexpr size_t kMaxMemo = 1 << 20;
constexpr size_t kMaxCalls = 1 << 16;  // recorded; a state dict makes one per tensor

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

}  // namespace

PickleStream ScanPickleStream(std::string_view bytes) { return Machine(bytes).Run(); }

}  // namespace modelfs
