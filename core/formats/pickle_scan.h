// Pickle checkpoints, examined and never executed: which Python globals a pickle imports, and
// which of them fall outside a small allow-list of what a PyTorch state dict needs.
//
// A pickle is a program for a stack machine. GLOBAL, INST and STACK_GLOBAL import
// "module.name"; REDUCE, NEWOBJ, NEWOBJ_EX, OBJ and INST call what they imported. Loading a
// checkpoint runs that program, so `os.system` in it runs on load. This scanner walks the
// opcodes (protocols 0 to 5) with a symbolic stack and memo, enough to resolve STACK_GLOBAL's
// two strings and each call's target, and allocates nothing an attacker's length can blow up.
// Like the Hub's own pickle scanning it reports what a pickle imports; it cannot prove a
// pickle harmless (an allowed callable may still be misused), which is why fetch and push
// refuse pickle files unless asked.
//
// What is scanned:
//   - a PyTorch zip checkpoint (torch.save since 1.6, zip64 included): every *.pkl entry
//     (archive/data.pkl, TorchScript's constants.pkl), stored uncompressed as torch writes
//     them; a compressed .pkl entry cannot be scanned and counts as flagged;
//   - a raw pickle stream (a .pkl, a legacy torch.save .bin/.pt): the pickles at the start of
//     the file, one after another (the legacy format's magic number, protocol, sys info, the
//     object and the storage keys), until the bytes after a STOP are not a pickle.
//
// Thread safety: pure functions over the reader they are given.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/io/range_reader.h"
#include "nlohmann/json.hpp"

namespace modelfs {

struct PickleImport {
  std::string module;
  std::string name;
  std::string opcode;   // "GLOBAL", "STACK_GLOBAL", "INST", "EXT2", ...
  uint64_t offset = 0;  // of the opcode, from the start of the file
  bool allowed = false;
  bool dangerous =
      false;  // a module known to run commands or code (os, subprocess, builtins.eval, ...)
  std::string Qualified() const { return module + "." + name; }
};

struct PickleCall {
  std::string target;   // "module.name", or "<not a global>"
  std::string opcode;   // "REDUCE", "NEWOBJ", "NEWOBJ_EX", "OBJ", "INST"
  uint64_t offset = 0;  // from the start of the file
};

// One pickle stream.
struct PickleStream {
  std::string name;     // zip entry name, or "pickle 2 at byte 58"
  uint64_t offset = 0;  // where it starts in the file
  uint64_t size = 0;    // bytes up to and including STOP (or scanned before the error)
  int protocol = 0;     // from PROTO, 0 when absent
  std::vector<PickleImport> imports;
  std::vector<PickleCall> calls;
  std::string error;  // why the scan stopped early ("" when it reached STOP)
};

struct PickleScan {
  std::string location;
  std::string kind;  // "zip" (PyTorch zip checkpoint) or "pickle" (raw stream)
  uint64_t file_size = 0;
  std::vector<PickleStream> streams;
  // Imports outside the allow-list, and streams that could not be scanned, in order and
  // without repeats ("posix.system", "archive/data.pkl: compressed entry not scanned").
  std::vector<std::string> flagged;
  bool safe() const { return flagged.empty(); }
};

// A checkpoint Python's pickle can run code from when it is loaded, by name (case-insensitive):
// *.bin *.pt *.pth *.pkl *.pickle *.ckpt. By name on purpose: torch.load reads a legacy
// checkpoint's first pickle before it knows what the file is, so content cannot clear it.
bool IsPickleFileName(std::string_view path);

// Scans one pickle stream starting at the beginning of `bytes` (stopping at its STOP); offsets
// are then from the start of `bytes`.
PickleStream ScanPickleStream(std::string_view bytes);

// Whether "module.name" is in the allow-list: torch._utils._rebuild_tensor{,_v2,_v3},
// _rebuild_parameter{,_with_state}, _rebuild_qtensor, _rebuild_meta_tensor_no_storage,
// torch.<X>Storage, torch.storage.UntypedStorage, torch.<dtype>, torch.Size, torch.device,
// collections.OrderedDict, numpy's array and dtype reconstruction (numpy{,.core,._core}
// .multiarray._reconstruct / .scalar, numpy.dtype, numpy.ndarray), _codecs.encode, and the
// builtins set, frozenset, bytearray, slice and complex.
bool IsAllowedPickleGlobal(std::string_view module, std::string_view name);

// Zip or raw stream, from the first bytes. Errors: kInvalidArgument naming the location when
// it is neither a zip archive nor a pickle; kOutOfRange for a truncated zip directory.
absl::StatusOr<PickleScan> ScanPickleFile(RangeReader& reader);

// The same over bytes in memory (the fuzzer's entry point).
absl::StatusOr<PickleScan> ScanPickleBytes(std::string_view bytes, std::string_view name);

// True when the first bytes look like a zip archive ("PK\3\4") or a pickle (PROTO 0x80).
bool LooksLikePickleCheckpoint(std::string_view first_bytes);

// The name a global is better known by, for people reading a scan: "posix.system" ->
// "os.system", "__builtin__.eval" -> "builtins.eval"; "" when it has no other name.
std::string PickleGlobalAlias(std::string_view module, std::string_view name);

// The JSON and text forms of a scan are the CLI's: cmd/modelfs/pickle_render.h.

}  // namespace modelfs
