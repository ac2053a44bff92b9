// The admin service and its socket (see admin_service.h).
#include "snapshotter/admin/admin_service.h"

#include <sys/stat.h>
#include <sys/un.h>

#include <chrono>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "snapshotter/service/snapshots_service.h"

namespace modelfs::snapshotter {

namespace admin = modelfs::admin::v1;
namespace fs = std::filesystem;

void ToProto(const NodeStatus& status, admin::ListResponse* out) {
  for (const NodeModel& m : status.models) {
    admin::Model* pm = out->add_models();
    pm->set_name(m.name);
    pm->set_model_digest(m.model_digest);
    pm->set_volume_digest(m.volume_digest);
    pm->set_reference(m.reference);
    pm->set_registry(m.registry);
    pm->set_repository(m.repository);
    pm->set_state(m.state);
    pm->set_error(m.error);
    pm->set_prefetched(m.prefetched);
    pm->set_layers(m.layers);
    pm->set_size(m.size);
    pm->set_cached_bytes(m.cached_bytes);
    pm->set_verified_bytes(m.verified_bytes);
    pm->set_sealed(m.sealed);
    pm->set_passthrough_opens(m.passthrough_opens);
    for (const NodeSnapshot& s : m.snapshots) {
      admin::Snapshot* ps = pm->add_snapshots();
      ps->set_key(s.key);
      ps->set_kind(s.kind);
      ps->set_image(s.image);
      ps->set_container(s.container);
    }
  }
  out->set_cache_bytes(status.cache_bytes);
  out->set_cache_max_bytes(status.cache_max_bytes);
  out->set_cache_layers(status.cache_layers);
  out->set_disk_full(status.disk_full);
  for (const NodeLayer& l : status.layers) {
    admin::Layer* pl = out->add_layers();
    pl->set_digest(l.digest);
    pl->set_size(l.size);
    pl->set_quarantined(l.quarantined);
    pl->set_scrubbing(l.scrubbing);
    for (const std::string& m : l.models) pl->add_models(m);
  }
  for (const NodeRegistryError& e : status.errors) {
    admin::RegistryError* pe = out->add_errors();
    pe->set_registry(e.registry);
    pe->set_at_unix_seconds(e.at == absl::InfinitePast() ? 0 : absl::ToUnixSeconds(e.at));
    pe->set_message(e.message);
    pe->set_count(e.count);
  }
}

void ToProto(const PrefetchProgress& p, admin::PrefetchProgress* out) {
  out->set_phase(p.phase);
  out->set_model_digest(p.model_digest);
  out->set_layers(p.layers);
  out->set_layers_sealed(p.layers_sealed);
  out->set_total_bytes(p.total_bytes);
  out->set_verified_bytes(p.verified_bytes);
}

void ToProto(const EvictOutcome& o, admin::EvictResponse* out) {
  out->set_model_digest(o.model_digest);
  out->set_was_registered(o.was_registered);
  out->set_layers_evicted(o.layers_evicted);
  out->set_bytes_evicted(o.bytes_evicted);
  out->set_layers_kept(o.layers_kept);
}

grpc::Status AdminService::List(grpc::ServerContext*, const admin::ListRequest*,
                                admin::ListResponse* response) {
  ToProto(node_->Status(), response);
  return grpc::Status::OK;
}

grpc::Status AdminService::Prefetch(grpc::ServerContext* context,
                                    const admin::PrefetchRequest* request,
                                    grpc::ServerWriter<admin::PrefetchProgress>* writer) {
  std::string last_phase;
  absl::Time last_sent = absl::InfinitePast();
  absl::Status st = node_->Prefetch(
      request->reference(),
      [&](const PrefetchProgress& p) {
        // Every change of phase, and the byte count at most every 250 ms.
        const absl::Time now = absl::Now();
        if (p.phase == last_phase && now - last_sent < absl::Milliseconds(250)) return;
        last_phase = p.phase;
        last_sent = now;
        admin::PrefetchProgress msg;
        ToProto(p, &msg);
        writer->Write(msg);
      },
      [context] { return context->IsCancelled(); }, absl::Milliseconds(250), absl::Minutes(2));
  return ToGrpcStatus(st);
}

grpc::Status AdminService::Evict(grpc::ServerContext*, const admin::EvictRequest* request,
                                 admin::EvictResponse* response) {
  absl::StatusOr<EvictOutcome> out = node_->Evict(request->reference());
  if (!out.ok()) return ToGrpcStatus(out.status());
  ToProto(*out, response);
  return grpc::Status::OK;
}

absl::Status CheckAdminSocketPath(const std::string& path) {
  if (path.empty() || path.front() != '/' || path.size() >= sizeof(sockaddr_un::sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("admin_socket \"", path,
                                                   "\": want an absolute path under ",
                                                   sizeof(sockaddr_un::sun_path), " bytes"));
  }
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && !S_ISSOCK(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("admin_socket ", path, " exists and is not a socket; refusing to replace it"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<AdminServer>> AdminServer::Start(const std::string& path,
                                                                NodeAdmin* node) {
  if (absl::Status st = CheckAdminSocketPath(path); !st.ok()) return st;
  std::error_code ec;
  const fs::path dir = fs::path(path).parent_path();
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("admin_socket: cannot create ", dir.string(), ": ", ec.message()));
    }
    ::chmod(dir.c_str(), 0700);
  }
  // A socket left by an earlier process: bind would fail.
  if (fs::is_socket(path, ec)) fs::remove(path, ec);
  std::unique_ptr<AdminServer> s(new AdminServer(path, node));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("unix:", path), grpc::InsecureServerCredentials());
  builder.RegisterService(&s->service_);
  s->server_ = builder.BuildAndStart();
  if (!s->server_) return absl::UnavailableError(absl::StrCat("cannot listen on ", path));
  if (::chmod(path.c_str(), 0600) != 0) {
    return absl::UnavailableError(absl::StrCat("admin_socket: cannot chmod 0600 ", path));
  }
  return s;
}

AdminServer::~AdminServer() {
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_.reset();
  }
  std::error_code ec;
  fs::remove(path_, ec);
}

}  // namespace modelfs::snapshotter
