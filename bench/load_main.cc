// modelfs-load: reads every byte of a model's files the way a model server does at start, for
// bench/load_bench.sh. Two loaders:
//   --mode mmap   maps each safetensors file, parses its header from the mapping and copies each
//                 tensor out of the mapping in offset order into one reusable buffer (safetensors
//                 load_file, llama.cpp);
//   --mode read   read() in 16 MiB calls into one buffer (vLLM --safetensors-load-strategy eager).
// Files that are not safetensors (config.json, tokenizer.json, ...) are read whole with read() in
// both modes. Prints the bytes read and the seconds taken; with --json, one JSON object.
//
//   modelfs-load --mode mmap|read [--json] FILE...
//
// Exit codes: 0 every file was read, 1 an I/O error or a malformed safetensors header (named on
// stderr), 2 bad usage. It uses only libc and nlohmann-json, so it measures the file system and
// not the project's own code.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

namespace {

constexpr size_t kReadChunk = 16u << 20;
// safetensors caps its header at 100 MB; anything larger is not a safetensors file.
constexpr uint64_t kMaxHeader = 100'000'000;

struct Totals {
  uint64_t bytes = 0;
  uint64_t tensors = 0;
  uint8_t checksum = 0;  // folds one byte of every copy, so no copy can be optimised away
};

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

bool Fail(const std::string& path, const std::string& what) {
  fprintf(stderr, "modelfs-load: %s: %s\n", path.c_str(), what.c_str());
  return false;
}

bool FailErrno(const std::string& path, const char* op) {
  return Fail(path, std::string(op) + ": " + strerror(errno));
}

// Reads the whole file with read() calls of up to kReadChunk bytes into buf.
bool ReadWhole(const std::string& path, int fd, std::vector<char>& buf, Totals& t) {
  for (;;) {
    ssize_t n = read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return FailErrno(path, "read");
    }
    if (n == 0) return true;
    t.bytes += static_cast<uint64_t>(n);
    t.checksum ^= static_cast<uint8_t>(buf[0]);
  }
}

// A safetensors header is 8 bytes of little-endian length, then that much JSON starting with '{'.
// Returns the header length if the first bytes of the file look like one.
std::optional<uint64_t> SafetensorsHeaderLength(int fd, uint64_t file_size) {
  unsigned char head[9];
  if (file_size < sizeof head || pread(fd, head, sizeof head, 0) != sizeof head) return {};
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | head[i];
  if (n == 0 || n > kMaxHeader || n > file_size - 8 || head[8] != '{') return {};
  return n;
}

// Copies each tensor out of a private read-only mapping of the file, in offset order.
bool LoadMapped(const std::string& path, int fd, uint64_t file_size, uint64_t header_len,
                std::vector<char>& copy, Totals& t) {
  void* map = mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED) return FailErrno(path, "mmap");
  const char* base = static_cast<const char*>(map);
  struct Unmap {
    void* p;
    size_t n;
    ~Unmap() { munmap(p, n); }
  } unmap{map, file_size};

  // The header is parsed from the mapping too, as safetensors does.
  auto header = nlohmann::json::parse(base + 8, base + 8 + header_len, nullptr, false);
  if (header.is_discarded() || !header.is_object())
    return Fail(path, "header is not a JSON object");
  t.bytes += 8 + header_len;
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = file_size - data_start;
  std::vector<std::pair<uint64_t, uint64_t>> spans;  // [begin, end) within the data section
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const auto it = info.is_object() ? info.find("data_offsets") : info.end();
    if (it == info.end() || !it->is_array() || it->size() != 2 || !(*it)[0].is_number_unsigned() ||
        !(*it)[1].is_number_unsigned()) {
      return Fail(path, "tensor " + name + ": no data_offsets [begin, end]");
    }
    uint64_t b = (*it)[0].get<uint64_t>(), e = (*it)[1].get<uint64_t>();
    if (b > e || e > data_size) return Fail(path, "tensor " + name + ": data_offsets out of range");
    spans.emplace_back(b, e);
  }
  std::sort(spans.begin(), spans.end());
  for (const auto& [b, e] : spans) {
    const size_t n = static_cast<size_t>(e - b);
    if (n == 0) continue;
    if (copy.size() < n) copy.resize(n);
    memcpy(copy.data(), base + data_start + b, n);
    t.bytes += n;
    t.tensors += 1;
    t.checksum ^= static_cast<uint8_t>(copy[n - 1]);
  }
  return true;
}

bool LoadFile(const std::string& path, bool mmap_mode, std::vector<char>& buf,
              std::vector<char>& copy, Totals& t) {
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return FailErrno(path, "open");
  if (mmap_mode) {
    struct stat st;
    if (fstat(fd.get(), &st) != 0) return FailErrno(path, "fstat");
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (auto header_len = SafetensorsHeaderLength(fd.get(), size)) {
      return LoadMapped(path, fd.get(), size, *header_len, copy, t);
    }
  }
  return ReadWhole(path, fd.get(), buf, t);
}

int Usage() {
  fprintf(stderr, "usage: modelfs-load --mode mmap|read [--json] FILE...\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode;
  bool json = false;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--mode" && i + 1 < argc) {
      mode = argv[++i];
    } else if (a.rfind("--mode=", 0) == 0) {
      mode = a.substr(7);
    } else if (a == "--json") {
      json = true;
    } else if (a == "-h" || a == "--help") {
      Usage();
      return 0;
    } else if (a.rfind("--", 0) == 0) {
      return Usage();
    } else {
      files.push_back(a);
    }
  }
  if ((mode != "mmap" && mode != "read") || files.empty()) return Usage();
  const bool mmap_mode = mode == "mmap";

  std::vector<char> buf(kReadChunk);
  std::vector<char> copy;
  Totals t;
  const auto start = std::chrono::steady_clock::now();
  for (const std::string& f : files) {
    if (!LoadFile(f, mmap_mode, buf, copy, t)) return 1;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (json) {
    nlohmann::json out = {{"mode", mode},       {"files", files.size()},
                          {"bytes", t.bytes},   {"tensors", t.tensors},
                          {"seconds", seconds}, {"checksum", t.checksum}};
    printf("%s\n", out.dump().c_str());
  } else {
    printf("%s: %zu files, %llu bytes (%llu tensors) in %.3f s, %.0f MB/s\n", mode.c_str(),
           files.size(), static_cast<unsigned long long>(t.bytes),
           static_cast<unsigned long long>(t.tensors), seconds,
           seconds > 0 ? static_cast<double>(t.bytes) / seconds / 1e6 : 0.0);
  }
  return 0;
}
