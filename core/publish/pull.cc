#include "core/publish/pull.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/io/range_reader.h"
#include "core/io/staged_dest.h"
#include "core/oci/image_tree.h"
#include "core/oci/layer_decoder.h"
#include "core/oci/media_types.h"
#include "core/oci/path_safety.h"
#include "core/oci/tar.h"
#include "core/resolve/model_ref.h"
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

bool IsCompressed(const ModelLayer& l) { return IsCompressedEncoding(l.encoding); }

// Decompresses the verified compressed layer at `in` into `out`, checking the decoded bytes
// against `diff_id` when given. Errors: kDataLoss naming the layer (a corrupt or truncated
// stream, a diff ID that does not match); kInternal for I/O.
absl::Status DecodeFile(const std::string& in, const ModelLayer& l,
                        const std::optional<Digest>& diff_id, const std::string& out) {
  constexpr uint64_t kPiece = 4ull << 20;
  ASSIGN_OR_RETURN(auto reader, OpenFileRangeReader(in));
  std::error_code ec;
  fs::create_directories(fs::path(out).parent_path(), ec);
  int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat(out, ": ", strerror(errno)));
  absl::StatusOr<DecodedLayer> decoded = DecodeLayer(
      l.encoding, l.descriptor.digest, diff_id,
      [&](uint64_t offset, std::string* piece) -> absl::Status {
        piece->clear();
        if (offset >= l.descriptor.size) return absl::OkStatus();
        ASSIGN_OR_RETURN(*piece,
                         reader->ReadAt(offset, std::min(kPiece, l.descriptor.size - offset)));
        return absl::OkStatus();
      },
      [&](std::string_view bytes) -> absl::Status {
        while (!bytes.empty()) {
          ssize_t n = write(fd, bytes.data(), bytes.size());
          if (n < 0 && errno == EINTR) continue;
          if (n < 0) return absl::InternalError(absl::StrCat(out, ": write: ", strerror(errno)));
          bytes.remove_prefix(static_cast<size_t>(n));
        }
        return absl::OkStatus();
      });
  close(fd);
  return decoded.status();
}

// What the pull has placed at each relative path of the staged tree, across every layer.
enum class Placed { kDirectory, kFile, kLink };
using PlacedMap = std::map<std::string, Placed>;

// Claims `rel` for an entry of type `type`: every proper prefix must be (or becomes) a
// directory the pull made, so nothing is ever written through a link or into a file, and a
// path is used once (a directory may be declared again). Errors: kPermissionDenied.
absl::Status Claim(PlacedMap& placed, const std::string& rel, Placed type,
                   const std::string& where) {
  for (size_t slash = rel.find('/'); slash != std::string::npos; slash = rel.find('/', slash + 1)) {
    const std::string prefix = rel.substr(0, slash);
    auto [it, inserted] = placed.emplace(prefix, Placed::kDirectory);
    if (it->second == Placed::kLink) {
      return absl::PermissionDeniedError(absl::StrCat(
          where, ": '", rel, "' would be written through the link '", prefix, "'; refused"));
    }
    if (it->second == Placed::kFile) {
      return absl::PermissionDeniedError(absl::StrCat(where, ": '", rel, "' needs '", prefix,
                                                      "' to be a directory, but it is a file"));
    }
  }
  auto [it, inserted] = placed.emplace(rel, type);
  if (!inserted && !(type == Placed::kDirectory && it->second == Placed::kDirectory)) {
    return absl::PermissionDeniedError(
        absl::StrCat(where, ": path '", rel, "' appears twice in the model"));
  }
  return absl::OkStatus();
}

// Extracts a verified tar into `root` (a fresh staging tree), refusing escapes, special files,
// repeated names and anything written through a link. Appends the files and links it made.
absl::Status ExtractTar(const std::string& tar_path, const std::string& root,
                        const std::string& role, PlacedMap& placed,
                        std::vector<std::string>& created) {
  ASSIGN_OR_RETURN(auto reader, OpenFileRangeReader(tar_path));
  ASSIGN_OR_RETURN(std::vector<TarEntry> entries, IndexTar(*reader));
  const std::string where = absl::StrCat("layer ", role);
  for (const auto& e : entries) {
    ASSIGN_OR_RETURN(std::string rel, NormalizeRelativePath(e.path));
    if (IsRootPath(rel)) continue;
    RETURN_IF_ERROR(CheckNotReservedModelPath(rel, where));
    fs::path out = fs::path(root) / rel;
    std::error_code ec;
    switch (e.type) {
      case TarEntryType::kDirectory:
        RETURN_IF_ERROR(Claim(placed, rel, Placed::kDirectory, where));
        fs::create_directories(out, ec);
        if (ec) return absl::InternalError(absl::StrCat(out.string(), ": ", ec.message()));
        break;
      case TarEntryType::kFile: {
        RETURN_IF_ERROR(Claim(placed, rel, Placed::kFile, where));
        fs::create_directories(out.parent_path(), ec);
        // O_EXCL: the name is new to the staged tree (Claim), so an existing one is a bug, and
        // opening it would write through whatever it is.
        int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
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
            return absl::PermissionDeniedError(
                absl::StrCat(where, ": symlink '", rel, "' -> '", target, "' is absolute"));
          }
          std::string parent = fs::path(rel).parent_path().generic_string();
          target = parent.empty() ? target : parent + "/" + target;
        }
        auto norm = NormalizeRelativePath(target);
        if (!norm.ok() || IsRootPath(*norm)) {
          return absl::PermissionDeniedError(absl::StrCat(where, ": link '", rel, "' -> '",
                                                          e.linkname, "' escapes the destination"));
        }
        if (e.type == TarEntryType::kHardLink) {
          // Only to a regular file this pull extracted before: never to a directory, a link or
          // a name that is not there yet.
          auto it = placed.find(*norm);
          if (it == placed.end() || it->second != Placed::kFile) {
            return absl::PermissionDeniedError(
                absl::StrCat(where, ": hard link '", rel, "' -> '", e.linkname,
                             "' does not name a file extracted before it"));
          }
        }
        RETURN_IF_ERROR(Claim(placed, rel, Placed::kLink, where));
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
        return absl::PermissionDeniedError(
            absl::StrCat(where, ": entry '", rel, "' is a device, FIFO or other special file"));
    }
  }
  return absl::OkStatus();
}

// Writes the merged tree of an ordinary image (core/oci/image_tree.h) into `root` (a fresh
// staging tree) from its layers' verified tars: directories, files (a hard link becomes one to
// the first name of its bytes) and symlinks as they are. The tree never puts an entry under a link
// or a file, and it is written parents first, so nothing is written through a link.
absl::Status WriteImageTree(const ResolvedModel& rm, const std::vector<std::string>& tars,
                            const std::string& root, const std::string& shown, PullResult& result) {
  ImageTree tree;
  std::vector<std::unique_ptr<RangeReader>> readers;
  for (size_t i = 0; i < tars.size(); ++i) {
    const std::string where = absl::StrCat("layer ", rm.layers[i].descriptor.digest.str());
    ASSIGN_OR_RETURN(std::unique_ptr<RangeReader> reader, OpenFileRangeReader(tars[i]));
    ASSIGN_OR_RETURN(std::vector<TarEntry> entries, IndexTar(*reader));
    RETURN_IF_ERROR(ApplyImageLayer(tree, i, where, entries));
    readers.push_back(std::move(reader));
  }
  const std::string where = absl::StrCat("image ", rm.model_descriptor.digest.str());
  std::map<std::pair<size_t, uint64_t>, fs::path> linked;  // (layer, offset) -> first name
  for (const auto& [rel, node] : tree.nodes) {
    RETURN_IF_ERROR(CheckNotReservedModelPath(rel, where));
    const fs::path out = fs::path(root) / rel;
    std::error_code ec;
    switch (node.type) {
      case ImageNodeType::kDirectory:
        fs::create_directory(out, ec);
        if (ec) return absl::InternalError(absl::StrCat(out.string(), ": ", ec.message()));
        break;
      case ImageNodeType::kFile: {
        // A hard link of the image (the same bytes of the same layer under a second name) is
        // a hard link here too, as unpacking the image would make it.
        if (node.size > 0) {
          auto [first, fresh] = linked.try_emplace({node.layer, node.offset}, out);
          if (!fresh) {
            fs::create_hard_link(first->second, out, ec);
            if (!ec) {
              result.files.push_back(
                  {shown + rel, rm.layers[node.layer].descriptor.digest, node.size});
              break;
            }
            ec.clear();  // a file system without hard links: a copy, as before
          }
        }
        int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                      (node.mode & 0111) != 0 ? 0755 : 0644);
        if (fd < 0) return absl::InternalError(absl::StrCat(out.string(), ": ", strerror(errno)));
        absl::Status copied =
            CopyRange(*readers[node.layer], node.offset, node.size, fd, out.string());
        close(fd);
        RETURN_IF_ERROR(copied);
        result.files.push_back({shown + rel, rm.layers[node.layer].descriptor.digest, node.size});
        break;
      }
      case ImageNodeType::kSymlink:
        fs::create_symlink(node.link_target, out, ec);
        if (ec) return absl::InternalError(absl::StrCat(out.string(), ": ", ec.message()));
        break;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PullResult> PullModel(RegistryClient& client, const ImageReference& ref,
                                     const std::string& dest, const PullOptions& o) {
  ASSIGN_OR_RETURN(ResolvedModel rm, ResolveModel(client, ref, o.connect, o.check_location));
  // The layers come from M's registry (a volume image may live on another one).
  std::shared_ptr<RegistryClient> other;
  if (rm.registry != client.registry()) {
    if (!o.connect) {
      return absl::FailedPreconditionError(
          absl::StrCat(ref.String(), ": the model lives on registry ", rm.registry));
    }
    ASSIGN_OR_RETURN(other, o.connect(rm.registry));
  }
  RegistryClient& model_client = other != nullptr ? *other : client;
  PullResult result;
  result.model = rm.model_descriptor;
  result.volume = rm.volume_descriptor;

  // Check every raw path before anything is downloaded.
  PlacedMap placed;
  for (const auto& l : rm.layers) {
    if (l.encoding != LayerEncoding::kRaw) continue;
    const std::string where = absl::StrCat("layer ", l.descriptor.digest.str());
    RETURN_IF_ERROR(CheckRelativePath(l.path));
    RETURN_IF_ERROR(CheckNotReservedModelPath(l.path, where));
    RETURN_IF_ERROR(Claim(placed, l.path, Placed::kFile, where));
  }
  // The diff ID of each compressed layer (its decompressed bytes must hash to it), checked
  // for a well-formed config before anything is downloaded.
  std::vector<std::optional<Digest>> diff_ids(rm.layers.size());
  for (size_t i = 0; i < rm.layers.size(); ++i) {
    if (IsCompressed(rm.layers[i])) {
      ASSIGN_OR_RETURN(diff_ids[i], LayerDiffId(rm, i));
    }
  }

  // Everything is staged next to DEST and moved into it only when every layer verified and
  // unpacked, so a failed pull leaves DEST as it found it (or absent, and no parent this pull
  // created).
  ASSIGN_OR_RETURN(std::unique_ptr<StagedDest> staged, StagedDest::Create(dest, "pull"));
  const std::string staging = staged->staging().string();
  std::error_code ec;
  const std::string tree = staged->tree().string();
  // A volume image may show the model under a directory (its record's pathPrefix): the pull
  // lays it out the way a mount of that image does.
  const std::string root = rm.path_prefix.empty() ? tree : tree + "/" + rm.path_prefix;
  const std::string shown = rm.path_prefix.empty() ? "" : rm.path_prefix + "/";
  fs::create_directories(root, ec);
  if (ec) return absl::InternalError(absl::StrCat(root, ": ", ec.message()));

  std::atomic<uint64_t> total{0};
  std::atomic<size_t> next{0};
  absl::Mutex mu;
  absl::Status first_error;
  // Downloads go outside the staged tree, so no tar entry can collide with a partial file.
  auto part_of = [&](size_t i) {
    return rm.layers[i].encoding == LayerEncoding::kRaw
               ? absl::StrCat(staging, "/raw/", i, ".part")
               : absl::StrCat(staging, "/tars/", i, ".tar.part");
  };
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
      const std::string part = part_of(i);
      const std::string download =
          IsCompressed(l) ? absl::StrCat(staging, "/compressed/", i, ".part") : part;
      absl::Status st = DownloadVerified(model_client, rm.repository, l.descriptor, role, download,
                                         o.progress, total);
      // A compressed layer is decoded only once its bytes matched the layer digest, and its
      // tar is used only once the decoded bytes matched the diff ID.
      if (st.ok() && download != part) {
        st = DecodeFile(download, l, diff_ids[i], part);
        std::error_code e2;
        fs::remove(download, e2);
      }
      if (!st.ok()) {
        std::error_code e2;
        fs::remove(download, e2);
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

  // Everything verified: raw files into the staged tree first (a tar's hard link may name
  // one), then the tars unpacked on top.
  for (size_t i = 0; i < rm.layers.size(); ++i) {
    const ModelLayer& l = rm.layers[i];
    if (l.encoding != LayerEncoding::kRaw) continue;
    fs::path final_path = fs::path(root) / l.path;
    fs::create_directories(final_path.parent_path(), ec);
    fs::rename(part_of(i), final_path, ec);
    if (ec) return absl::InternalError(absl::StrCat(final_path.string(), ": ", ec.message()));
  }
  if (rm.image) {
    std::vector<std::string> tars;
    for (size_t i = 0; i < rm.layers.size(); ++i) tars.push_back(part_of(i));
    RETURN_IF_ERROR(WriteImageTree(rm, tars, root, shown, result));
  }
  for (size_t i = 0; i < rm.layers.size(); ++i) {
    const ModelLayer& l = rm.layers[i];
    if (rm.image) break;  // written above, merged
    if (l.encoding == LayerEncoding::kRaw) {
      result.files.push_back({shown + l.path, l.descriptor.digest, l.descriptor.size});
      continue;
    }
    std::vector<std::string> from_tar;
    RETURN_IF_ERROR(ExtractTar(part_of(i), root, l.descriptor.digest.str(), placed, from_tar));
    for (const auto& p : from_tar) result.files.push_back({shown + p, l.descriptor.digest, 0});
  }

  result.bytes = total;
  RETURN_IF_ERROR(staged->Commit());
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
