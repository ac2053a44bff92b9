#include "testsupport/hub/pickle_test_files.h"

#include <cstdint>
#include <vector>

namespace modelfs::testing {
namespace {

void Le(std::string& out, uint64_t v, int width) {
  for (int i = 0; i < width; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::string BinUnicode(const std::string& s) {
  std::string out = "X";
  Le(out, s.size(), 4);
  return out + s;
}

std::string BinPut(int n) { return std::string("q") + static_cast<char>(n); }

uint32_t Crc32(const std::string& data) {
  uint32_t crc = 0xffffffffu;
  for (unsigned char c : data) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

}  // namespace

std::string TorchStateDictPickle() {
  std::string p = "\x80\x02";
  p += "ccollections\nOrderedDict\n" + BinPut(0) + ")R" + BinPut(1);
  p += BinUnicode("w") + BinPut(2);
  p += "ctorch._utils\n_rebuild_tensor_v2\n" + BinPut(3);
  p += "((" + BinUnicode("storage") + BinPut(4) + "ctorch\nFloatStorage\n" + BinPut(5) +
       BinUnicode("0") + BinPut(6) + BinUnicode("cpu") + BinPut(7) + "K\x04t" + BinPut(8) + "Q";
  p += std::string("K\x00", 2) + "K\x02K\x02\x86" + BinPut(9) + "K\x02K\x01\x86" + BinPut(10);
  p += "\x89";
  p += std::string("h\x00", 2) + ")R" + BinPut(11);
  p += "t" + BinPut(12) + "R" + BinPut(13) + "s.";
  return p;
}

std::string OsSystemPickle(int protocol) {
  if (protocol < 4) {
    return std::string("\x80\x02") + "cposix\nsystem\n" + BinPut(0) + BinUnicode("id") + BinPut(1) +
           "\x85" + BinPut(2) + "R" + BinPut(3) + ".";
  }
  const std::string body =
      std::string("\x8c\x05posix\x94\x8c\x06system\x94\x93\x94") + "\x8c\x02id\x94\x85\x94R\x94.";
  std::string p = "\x80\x04\x95";
  Le(p, body.size(), 8);
  return p + body;
}

std::string StoredZip(const std::map<std::string, std::string>& entries) {
  std::string out, cd;
  for (const auto& [name, data] : entries) {
    const uint32_t crc = Crc32(data);
    const uint64_t offset = out.size();
    std::string local = "PK\x03\x04";
    Le(local, 20, 2);  // version needed
    Le(local, 0, 2);   // flags
    Le(local, 0, 2);   // stored
    Le(local, 0, 4);   // time, date
    Le(local, crc, 4);
    Le(local, data.size(), 4);
    Le(local, data.size(), 4);
    Le(local, name.size(), 2);
    Le(local, 0, 2);
    out += local + name + data;
    std::string c = "PK\x01\x02";
    Le(c, 20, 2);
    Le(c, 20, 2);
    Le(c, 0, 2);
    Le(c, 0, 2);
    Le(c, 0, 4);
    Le(c, crc, 4);
    Le(c, data.size(), 4);
    Le(c, data.size(), 4);
    Le(c, name.size(), 2);
    Le(c, 0, 2);  // extra
    Le(c, 0, 2);  // comment
    Le(c, 0, 2);  // disk
    Le(c, 0, 2);  // internal attributes
    Le(c, 0, 4);  // external attributes
    Le(c, offset, 4);
    cd += c + name;
  }
  const uint64_t cd_offset = out.size();
  out += cd;
  std::string eocd = "PK\x05\x06";
  Le(eocd, 0, 2);
  Le(eocd, 0, 2);
  Le(eocd, entries.size(), 2);
  Le(eocd, entries.size(), 2);
  Le(eocd, cd.size(), 4);
  Le(eocd, cd_offset, 4);
  Le(eocd, 0, 2);
  return out + eocd;
}

std::string TorchZipCheckpoint(const std::string& data_pkl) {
  return StoredZip({{"archive/data.pkl", data_pkl},
                    {"archive/data/0", std::string(16, '\0')},
                    {"archive/byteorder", "little"},
                    {"archive/version", "3\n"}});
}

std::string TorchLegacyCheckpoint(const std::string& object_pickle) {
  std::string f;
  f += std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", 15);  // magic
  f += "\x80\x02M\xe9\x03.";                                                          // 1001
  f += std::string("\x80\x02}q\x00(", 6) + BinUnicode("little_endian") + "\x88u.";    // sys info
  f += object_pickle;
  f += std::string("\x80\x02]q\x00", 5) + BinUnicode("0") + "a.";  // storage keys
  f += std::string(16, '\x01');                                    // data
  return f;
}

}  // namespace modelfs::testing
