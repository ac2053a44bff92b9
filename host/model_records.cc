// Stored model records (see model_records.h).
#include "host/model_records.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "core/oci/digest.h"
#include "core/status/status_macros.h"
#include "nlohmann/json.hpp"

namespace modelfs {
namespace fs = std::filesystem;
namespace {

absl::Status WriteFileSynced(const fs::path& path, const std::string& bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("models: create ", path.string(), ": ", strerror(errno)));
  }
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      return absl::InternalError(
          absl::StrCat("models: write ", path.string(), ": ", strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) {
    return absl::InternalError(
        absl::StrCat("models: fsync ", path.string(), ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadWholeFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("models: ", path.string(), " is missing"));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Serves ResolveModel from the files of one record, checking every digest.
class StoredFetcher final : public ModelFetcher {
 public:
  StoredFetcher(fs::path dir, std::map<std::string, std::string> media_types)
      : dir_(std::move(dir)), media_types_(std::move(media_types)) {}

  absl::StatusOr<ManifestResult> GetManifest(const std::string& /*repository*/,
                                             const std::string& reference) override {
    ASSIGN_OR_RETURN(Digest d, Digest::Parse(reference));
    ASSIGN_OR_RETURN(std::string bytes, ReadVerified(d, 16u << 20));
    ManifestResult r;
    r.bytes = std::move(bytes);
    r.digest = d;
    auto it = media_types_.find(d.str());
    if (it != media_types_.end()) r.media_type = it->second;
    return r;
  }

  absl::StatusOr<std::string> GetBlob(const std::string& /*repository*/, const Descriptor& d,
                                      uint64_t max_bytes) override {
    if (d.size > max_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("models: blob ", d.digest.str(), " is larger than ", max_bytes, " bytes"));
    }
    ASSIGN_OR_RETURN(std::string bytes, ReadVerified(d.digest, max_bytes));
    if (bytes.size() != d.size) {
      return absl::DataLossError(absl::StrCat("models: stored blob ", d.digest.str(), " has ",
                                              bytes.size(), " bytes, not ", d.size));
    }
    return bytes;
  }

  // Everything the record needs is stored here, by digest, whichever registry M lives on.
  absl::StatusOr<ModelFetcher*> OnRegistry(const std::string& /*registry*/) override {
    return this;
  }

 private:
  absl::StatusOr<std::string> ReadVerified(const Digest& d, uint64_t max_bytes) {
    fs::path p = dir_ / "blobs" / std::string(d.hex());
    std::error_code ec;
    uint64_t size = fs::file_size(p, ec);
    if (ec) return absl::NotFoundError(absl::StrCat("models: ", p.string(), " is missing"));
    if (size > max_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("models: ", p.string(), " is larger than ", max_bytes, " bytes"));
    }
    ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(p));
    Digest got = Digest::Of(bytes);
    if (got != d) {
      return absl::DataLossError(
          absl::StrCat("models: ", p.string(), " has digest ", got.str(), ", not ", d.str()));
    }
    return bytes;
  }

  fs::path dir_;
  std::map<std::string, std::string> media_types_;
};

}  // namespace

absl::Status SaveModelRecord(const fs::path& models_dir, const std::string& name,
                             const ResolvedModel& rm) {
  std::error_code ec;
  const fs::path final_dir = models_dir / name;
  if (fs::exists(final_dir / "record.json", ec)) return absl::OkStatus();
  fs::create_directories(models_dir, ec);
  std::string tmpl = (models_dir / (".new-" + name + "-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("models: mkdtemp ", tmpl, ": ", strerror(errno)));
  }
  const fs::path staging(tmpl);
  auto fail = [&](absl::Status st) {
    fs::remove_all(staging, ec);
    return st;
  };
  fs::create_directories(staging / "blobs", ec);
  if (ec) return fail(absl::InternalError(absl::StrCat("models: mkdir ", staging.string())));

  nlohmann::json media_types = nlohmann::json::object();
  auto put = [&](const std::string& bytes, const std::string& media_type) -> absl::Status {
    Digest d = Digest::Of(bytes);
    if (!media_type.empty()) media_types[d.str()] = media_type;
    return WriteFileSynced(staging / "blobs" / std::string(d.hex()), bytes);
  };
  Digest top;
  if (rm.volume_descriptor) {
    if (absl::Status st = put(rm.volume_manifest_json, rm.volume_descriptor->media_type); !st.ok())
      return fail(st);
    if (absl::Status st = put(rm.volume_layer_tar, ""); !st.ok()) return fail(st);
    for (const std::string& layer : rm.volume_index_layer_tars) {
      if (absl::Status st = put(layer, ""); !st.ok()) return fail(st);
    }
    if (!rm.volume_config_json.empty()) {
      if (absl::Status st = put(rm.volume_config_json, ""); !st.ok()) return fail(st);
    }
    top = rm.volume_descriptor->digest;
  } else {
    top = rm.model_descriptor.digest;
  }
  if (absl::Status st = put(rm.model_manifest_json, rm.model_descriptor.media_type); !st.ok())
    return fail(st);
  if (!rm.config_json.empty()) {
    if (absl::Status st = put(rm.config_json, ""); !st.ok()) return fail(st);
  }
  nlohmann::json record = {
      {"reference", absl::StrCat(rm.ref.registry(), "/", rm.ref.repository(), "@", top.str())},
      {"source", rm.ref.String()},
      {"mediaTypes", media_types}};
  // V's tar header records set aside, or used only once checked against the layers (a V found
  // among an image's referrers): the same when the model is restored.
  if (rm.volume_descriptor && rm.tar_headers.empty()) record["tarHeaders"] = false;
  if (rm.tar_headers_unpinned) record["tarHeaders"] = "unpinned";
  if (absl::Status st = WriteFileSynced(staging / "record.json", record.dump(2)); !st.ok())
    return fail(st);
  if (::rename(staging.c_str(), final_dir.c_str()) != 0) {
    int err = errno;
    fs::remove_all(staging, ec);
    // Another thread stored the same model first: theirs is as good as ours.
    if ((err == ENOTEMPTY || err == EEXIST) && fs::exists(final_dir / "record.json", ec)) {
      return absl::OkStatus();
    }
    return absl::InternalError(
        absl::StrCat("models: rename into ", final_dir.string(), ": ", strerror(err)));
  }
  int dfd = ::open(models_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

absl::StatusOr<ResolvedModel> LoadModelRecord(const fs::path& models_dir, const std::string& name) {
  const fs::path dir = models_dir / name;
  ASSIGN_OR_RETURN(std::string text, ReadWholeFile(dir / "record.json"));
  nlohmann::json record = nlohmann::json::parse(text, nullptr, false);
  if (record.is_discarded() || !record.is_object() || !record.contains("reference") ||
      !record["reference"].is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("models: ", (dir / "record.json").string(), " is not a valid record"));
  }
  std::map<std::string, std::string> media_types;
  if (record.contains("mediaTypes") && record["mediaTypes"].is_object()) {
    for (auto& [k, v] : record["mediaTypes"].items()) {
      if (v.is_string()) media_types[k] = v.get<std::string>();
    }
  }
  ASSIGN_OR_RETURN(ImageReference ref,
                   ImageReference::Parse(record["reference"].get<std::string>()));
  StoredFetcher fetcher(dir, std::move(media_types));
  ASSIGN_OR_RETURN(ResolvedModel rm, ResolveModel(fetcher, ref));
  if (record.contains("tarHeaders") && record["tarHeaders"] == false) rm.tar_headers.clear();
  if (record.contains("tarHeaders") && record["tarHeaders"] == "unpinned") {
    rm.tar_headers_unpinned = true;
  }
  std::string expected = absl::StrCat("sha256-", std::string(rm.model_descriptor.digest.hex()));
  if (expected != name) {
    return absl::DataLossError(
        absl::StrCat("models: record ", dir.string(), " holds model ", expected));
  }
  return rm;
}

absl::Status DeleteModelRecord(const fs::path& models_dir, const std::string& name) {
  std::error_code ec;
  fs::remove_all(models_dir / name, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("models: remove ", (models_dir / name).string(), ": ", ec.message()));
  }
  return absl::OkStatus();
}

std::vector<std::string> ListModelRecords(const fs::path& models_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(models_dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string n = it->path().filename().string();
    if (n.rfind("sha256-", 0) == 0) out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace modelfs
