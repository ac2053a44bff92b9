// Pickle checkpoints for the scanner's tests, assembled opcode by opcode the way torch.save and
// Python's pickle write them (no torch needed): a benign state dict, one whose __reduce__
// names os.system, and the zip and legacy containers torch puts them in.
//
// Thread safety: pure functions.
#pragma once

#include <map>
#include <string>

namespace modelfs::testing {

// Protocol 2: OrderedDict({"w": _rebuild_tensor_v2(<persistent storage '0', FloatStorage, cpu,
// 4>, 0, (2, 2), (2, 1), False, OrderedDict())}), as torch.save's data.pkl.
std::string TorchStateDictPickle();
// What pickle.dumps(obj, protocol) gives for an object whose __reduce__ returns
// (os.system, ("id",)) on Linux: GLOBAL posix.system (protocol 2) or STACK_GLOBAL (4).
std::string OsSystemPickle(int protocol);
// A zip archive (stored entries, CRC-32 filled in) of `entries` (name -> bytes).
std::string StoredZip(const std::map<std::string, std::string>& entries);
// torch.save's zip format: archive/data.pkl = `data_pkl`, archive/data/0, archive/version.
std::string TorchZipCheckpoint(const std::string& data_pkl);
// torch.save's legacy format: magic number, protocol, sys info, `object_pickle`, storage keys,
// then 16 bytes of storage data.
std::string TorchLegacyCheckpoint(const std::string& object_pickle);

}  // namespace modelfs::testing
