#include "core/publish/pull.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/io/range_reader.h"
#include "core/oci/media_types.h"
#include "core/oci/path_safety.h"
#include "core/oci/tar.h"
#include "core/publish/model_ref.h"
#include "core/status/status_macros.h"

namespace modelfs {
namespace {

namespace fs = std::filesystem;

// Streams one blob to `part`, hashing as it goes; verifies digest and size.
absl::Status DownloadVerified(RegistryClient& client, const std::string& repo, const Descriptor& d,
                              const std::string& role, const std::string& part,
                              const ProgressFn& progress, std::atomic<uint64_t>& total) {
  std::error_code ec;
  fs::create_directories(fs::path(part).parent_path(), ec);
  int fd = open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat(part, ": ", strerror(errno)));
  Sha256 h;
  uint64_t done = 0;
  absl::Status st = client.GetBlob(repo, d.digest, [&](std::string_view chunk) -> absl::Status {
    if (done + chunk.size() > d.size) {
      return absl::DataLossError(absl::StrCat("blob ", d.digest.str(), " (", role,
                                              ") is longer than its descriptor's ", d.size,
                                              " bytes"));
    }
    const char* p = chunk.data();
    size_t left = chunk.size();
    while (left > 0) {
      ssize_t n = write(fd, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return absl::InternalError(absl::StrCat(part, ": write: ", strerror(errno)));
      p += n;
      left -= static_cast<size_t>(n);
    }
    h.Update(chunk);
    done += chunk.size();
    total += chunk.size();
    if (progress) progress({role, done, d.size});
    return absl::OkStatus();
  });
  if (st.ok() && fsync(fd) != 0) st = absl::InternalError(absl::StrCat(part, ": fsync failed"));
  close(fd);
  if (!st.ok()) return st;
  Digest got = h.Finish();
  if (got != d.digest || done != d.size) {
    return absl::DataLossError(absl::StrCat("blob ", d.digest.str(), " (", role,
                                            ") failed verification: got ", got.str(), ", ", done,
                                            " of ", d.size, " bytes"));
  }
  return absl::OkStatus();
}

// Copies `size` bytes at `offset` of `reader` to fd, 8 MiB at a time.
absl::Status CopyRange(RangeReader& reader, uint64_t offset, uint64_t size, int fd,
                       const std::string& out) {
  constexpr uint64_t kSlice = 8ull << 20;
  for (uint64_t done = 0; done < size;) {
    const uint64_t n = std::min(kSlice, size - done);
    ASSIGN_OR_RETURN(std::string data, reader.ReadAt(offset + done, n));
    if (data.size() != n) {
      return absl::OutOfRangeError(
          absl::StrCat(out, ": short read from the tar at offset ", offset + done));
    }
    const char* p = data.data();
    size_t left = data.size();
    while (left > 0) {
      ssize_t w = write(fd, p, left);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return absl::InternalError(absl::StrCat(out, ": write: ", strerror(errno)));
      p += w;
      left -= static_cast<size_t>(w);
    }
    done += n;
  }
  return absl::OkStatus();
}

// Extracts a verified tar into `root`, refusing escapes and special files.
absl::Status ExtractTar(const std::string& tar_path, const std::string& root,
                        const std::string& role, std::set<std::string>& seen,
                        std::vector<std::string>& created) {
  ASSIGN_OR_RETURN(auto reader, OpenFileRangeReader(tar_path));
  ASSIGN_OR_RETURN(std::vector<TarEntry> entries, IndexTar(*reader));
  for (const auto& e : entries) {
    ASSIGN_OR_RETURN(std::string rel, NormalizeRelativePath(e.path));
    if (IsRootPath(rel)) continue;
    fs::path out = fs::path(root) / rel;
    std::error_code ec;
    switch (e.type) {
      case TarEntryType::kDirectory:
        fs::create_directories(out, ec);
        break;
      case TarEntryType::kFile: {
        if (!seen.insert(rel).second) {
          return absl::PermissionDeniedError(
              absl::StrCat("layer ", role, ": path '", rel, "' appears twice in the model"));
        }
        fs::create_directories(out.parent_path(), ec);
        int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0) return absl::InternalError(absl::StrCat(out.string(), ": ", strerror(errno)));
        // In slices: a weight file can be larger than memory, and one write() moves at most
        // 2 GiB on Linux.
        absl::Status copied = CopyRange(*reader, e.data_offset, e.size, fd, out.string());
        close(fd);
        RETURN_IF_ERROR(copied);
        created.push_back(rel);
        break;
      }
      case TarEntryType::kSymlink:
      case TarEntryType::kHardLink: {
        // A link target is resolved against the link's directory (symlink) or the root
        // (hard link); either way it must stay inside DEST.
        std::string target = e.linkname;
        if (e.type == TarEntryType::kSymlink) {
          if (!target.empty() && target[0] == '/') {
            return absl::PermissionDeniedError(absl::StrCat("layer ", role, ": symlink '", rel,
                                                            "' -> '", target, "' is absolute"));
          }
          std::string parent = fs::path(rel).parent_path().generic_string();
          target = parent.empty() ? target : parent + "/" + target;
        }
        auto norm = NormalizeRelativePath(target);
        if (!norm.ok() || IsRootPath(*norm)) {
          return absl::PermissionDeniedError(absl::StrCat("layer ", role, ": link '", rel, "' -> '",
                                                          e.linkname, "' escapes the destination"));
        }
        fs::create_directories(out.parent_path(), ec);
        if (e.type == TarEntryType::kSymlink) {
          fs::create_symlink(e.linkname, out, ec);
        } else {
          fs::create_hard_link(fs::path(root) / *norm, out, ec);
        }
        if (ec) return absl::InternalError(absl::StrCat(out.string(), ": ", ec.message()));
        created.push_back(rel);
        break;
      }
      case TarEntryType::kOther:
        return absl::PermissionDeniedError(absl::StrCat(
            "layer ", role, ": entry '", rel, "' is a device, FIFO or other special file"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PullResult> PullModel(RegistryClient& client, const ImageReference& ref,
                                     const std::string& dest, const PullOptions& o) {
  ASSIGN_OR_RETURN(ResolvedModel rm, ResolveModel(client, ref));
  PullResult result;
  result.model = rm.model_descriptor;
  result.volume = rm.volume_descriptor;

  // Check every raw path before anything is downloaded.
  std::set<std::string> seen;
  for (const auto& l : rm.layers) {
    if (l.encoding != LayerEncoding::kRaw) continue;
    RETURN_IF_ERROR(CheckRelativePath(l.path));
    if (!seen.insert(l.path).second) {
      return absl::PermissionDeniedError(absl::StrCat("two layers write '", l.path, "'"));
    }
  }
  for (const auto& l : rm.layers) {
    if (l.encoding == LayerEncoding::kTarGzip || l.encoding == LayerEncoding::kTarZstd) {
      return absl::UnimplementedError(absl::StrCat("layer ", l.descriptor.digest.str(),
                                                   " is compressed (", l.descriptor.media_type,
                                                   "); pull supports .raw and .tar layers"));
    }
  }

  std::error_code ec;
  const bool dest_existed = fs::exists(dest, ec);
  fs::create_directories(dest, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat(dest, ": ", ec.message()));
  // A failed pull leaves no trace: DEST goes too when this pull created it (after the staging
  // tree inside it; fs::remove never removes a directory that is not empty).
  struct DestCleanup {
    std::string dir;
    bool armed;
    ~DestCleanup() {
      std::error_code ec;
      if (armed) fs::remove(dir, ec);
    }
  } dest_cleanup{dest, !dest_existed};
  std::string staging = absl::StrCat(dest, "/.modelfs-pull-", getpid());
  fs::remove_all(staging, ec);
  fs::create_directories(staging, ec);
  struct StagingCleanup {
    std::string dir;
    ~StagingCleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{staging};

  std::atomic<uint64_t> total{0};
  std::atomic<size_t> next{0};
  absl::Mutex mu;
  absl::Status first_error;
  auto worker = [&] {
    for (;;) {
      size_t i = next++;
      if (i >= rm.layers.size()) return;
      {
        absl::MutexLock l(&mu);
        if (!first_error.ok()) return;
      }
      const ModelLayer& l = rm.layers[i];
      std::string role = l.path.empty() ? l.descriptor.digest.str() : l.path;
      std::string part = l.encoding == LayerEncoding::kRaw
                             ? absl::StrCat(staging, "/files/", l.path, ".part")
                             : absl::StrCat(staging, "/tars/", i, ".tar.part");
      absl::Status st =
          DownloadVerified(client, rm.repository, l.descriptor, role, part, o.progress, total);
      if (!st.ok()) {
        std::error_code e2;
        fs::remove(part, e2);
        absl::MutexLock lock(&mu);
        if (first_error.ok()) first_error = st;
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  int n = std::max(1, std::min<int>(o.parallel, static_cast<int>(rm.layers.size())));
  for (int i = 0; i < n; ++i) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  RETURN_IF_ERROR(first_error);

  // Everything verified: unpack tars into the staging tree, then move files into place.
  std::vector<std::string> created;
  for (size_t i = 0; i < rm.layers.size(); ++i) {
    const ModelLayer& l = rm.layers[i];
    if (l.encoding == LayerEncoding::kRaw) {
      std::string part = absl::StrCat(staging, "/files/", l.path, ".part");
      fs::path final_path = fs::path(staging) / "files" / l.path;
      fs::rename(part, final_path, ec);
      if (ec) return absl::InternalError(absl::StrCat(part, ": ", ec.message()));
      created.push_back(l.path);
      result.files.push_back({l.path, l.descriptor.digest, l.descriptor.size});
    } else {
      std::string tar = absl::StrCat(staging, "/tars/", i, ".tar.part");
      std::vector<std::string> from_tar;
      RETURN_IF_ERROR(
          ExtractTar(tar, staging + "/files", l.descriptor.digest.str(), seen, from_tar));
      for (const auto& p : from_tar) result.files.push_back({p, l.descriptor.digest, 0});
      created.insert(created.end(), from_tar.begin(), from_tar.end());
    }
  }
  for (const auto& rel : created) {
    fs::path from = fs::path(staging) / "files" / rel;
    fs::path to = fs::path(dest) / rel;
    fs::create_directories(to.parent_path(), ec);
    fs::rename(from, to, ec);
    if (ec) return absl::InternalError(absl::StrCat(to.string(), ": ", ec.message()));
  }
  result.bytes = total.load();
  dest_cleanup.armed = false;
  return result;
}

nlohmann::json PullResultToJson(const PullResult& r) {
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : r.files) {
    files.push_back({{"path", f.path}, {"layer", f.layer.str()}, {"size", f.size}});
  }
  nlohmann::json j = {{"model", {{"digest", r.model.digest.str()}, {"size", r.model.size}}},
                      {"files", files},
                      {"bytes", r.bytes}};
  if (r.volume) j["volume"] = {{"digest", r.volume->digest.str()}, {"size", r.volume->size}};
  return j;
}

}  // namespace modelfs
