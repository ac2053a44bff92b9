// GrpcContentStore: containerd.services.content.v1.Content over containerd's unix socket.
#include "snapshotter/content/content_store_client.h"

#include <grpcpp/grpcpp.h>
#include <string.h>
#include <sys/stat.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "containerd/services/content/v1/content.grpc.pb.h"
#include "containerd/services/images/v1/images.grpc.pb.h"

namespace modelfs::snapshotter {
namespace {

namespace api = ::containerd::services::content::v1;
namespace images_api = ::containerd::services::images::v1;

// containerd selects the namespace of a call by this gRPC metadata header.
constexpr char kNamespaceHeader[] = "containerd-namespace";
constexpr absl::Duration kInfoTimeout = absl::Seconds(10);

absl::Status FromGrpc(const grpc::Status& st, const std::string& what) {
  return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                      absl::StrCat(what, ": containerd says: ", st.error_message()));
}

class GrpcContentStore final : public ContentStore {
 public:
  GrpcContentStore(std::string socket_path, Clock* clock)
      : socket_path_(std::move(socket_path)),
        clock_(clock),
        channel_(grpc::CreateChannel(absl::StrCat("unix:", socket_path_),
                                     grpc::InsecureChannelCredentials())),
        stub_(api::Content::NewStub(channel_)),
        images_(images_api::Images::NewStub(channel_)) {}

  absl::Status CheckReachable(absl::Duration timeout) override {
    auto unreachable = [&](const std::string& why) {
      return absl::UnavailableError(absl::StrCat(
          "containerd_address \"", socket_path_, "\" does not reach containerd (", why,
          "); set containerd_address in the snapshotter's config to containerd's [grpc] address"));
    };
    struct stat st;
    if (stat(socket_path_.c_str(), &st) != 0) return unreachable(strerror(errno));
    if (!S_ISSOCK(st.st_mode)) return unreachable("not a unix socket");
    if (!channel_->WaitForConnected(absl::ToChronoTime(clock_->Now() + timeout))) {
      return unreachable(absl::StrCat("no connection within ", absl::FormatDuration(timeout)));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> Size(const std::string& ns, const Digest& digest) override {
    grpc::ClientContext ctx;
    Prepare(ctx, ns, clock_->Now() + kInfoTimeout);
    api::InfoRequest req;
    req.set_digest(digest.str());
    api::InfoResponse resp;
    grpc::Status st = stub_->Info(&ctx, req, &resp);
    if (!st.ok()) return FromGrpc(st, What("info of", ns, digest));
    if (resp.info().size() < 0) {
      return absl::DataLossError(
          absl::StrCat(What("info of", ns, digest), ": negative size ", resp.info().size()));
    }
    return static_cast<uint64_t>(resp.info().size());
  }

  absl::StatusOr<std::vector<std::string>> ImageNames(const std::string& ns,
                                                      const Digest& digest) override {
    grpc::ClientContext ctx;
    Prepare(ctx, ns, clock_->Now() + kInfoTimeout);
    images_api::ListImagesRequest req;
    req.add_filters(absl::StrCat("target.digest==\"", digest.str(), "\""));
    images_api::ListImagesResponse resp;
    grpc::Status st = images_->List(&ctx, req, &resp);
    if (!st.ok()) return FromGrpc(st, What("images naming", ns, digest));
    std::vector<std::string> names;
    for (const images_api::Image& image : resp.images()) {
      // The filter is containerd's; the target is checked here all the same.
      if (image.target().digest() == digest.str()) names.push_back(image.name());
    }
    return names;
  }

  absl::Status Read(const std::string& ns, const Digest& digest, uint64_t offset, uint64_t length,
                    absl::Time deadline,
                    const std::function<absl::Status(std::string_view)>& sink) override {
    if (length == 0) return absl::OkStatus();  // size 0 would mean "to the end" to containerd
    grpc::ClientContext ctx;
    Prepare(ctx, ns, deadline);
    api::ReadContentRequest req;
    req.set_digest(digest.str());
    req.set_offset(static_cast<int64_t>(offset));
    req.set_size(static_cast<int64_t>(length));
    std::unique_ptr<grpc::ClientReader<api::ReadContentResponse>> reader = stub_->Read(&ctx, req);
    api::ReadContentResponse piece;
    uint64_t got = 0;
    absl::Status sink_status;
    // containerd numbers pieces from the start of the range asked for (0 for the first one);
    // a piece numbered from the start of the blob is taken too. The numbering the first piece
    // sets must then continue without gaps: anything else is a protocol error, not bytes.
    int64_t base = -1;
    while (reader->Read(&piece)) {
      if (base < 0) base = piece.offset() == static_cast<int64_t>(offset) ? offset : 0;
      if (piece.offset() != base + static_cast<int64_t>(got)) {
        ctx.TryCancel();
        sink_status = absl::DataLossError(
            absl::StrCat(What("read of", ns, digest), ": piece numbered ", piece.offset(),
                         " where ", base + static_cast<int64_t>(got), " was expected"));
        break;
      }
      const std::string& data = piece.data();
      if (got + data.size() > length) {
        ctx.TryCancel();
        sink_status = absl::DataLossError(
            absl::StrCat(What("read of", ns, digest), ": more bytes than the ", length, " asked"));
        break;
      }
      got += data.size();
      sink_status = sink(data);
      if (!sink_status.ok()) {
        ctx.TryCancel();
        break;
      }
    }
    grpc::Status st = reader->Finish();
    if (!sink_status.ok()) return sink_status;
    if (!st.ok()) return FromGrpc(st, What("read of", ns, digest));
    if (got != length) {
      return absl::OutOfRangeError(absl::StrCat(What("read of", ns, digest), ": ", got,
                                                " bytes at offset ", offset, ", ", length,
                                                " asked"));
    }
    return absl::OkStatus();
  }

 private:
  static void Prepare(grpc::ClientContext& ctx, const std::string& ns, absl::Time deadline) {
    ctx.AddMetadata(kNamespaceHeader, ns);
    ctx.set_deadline(absl::ToChronoTime(deadline));
    // containerd may be starting (or restarting): wait for the socket within the deadline.
    ctx.set_wait_for_ready(true);
  }
  std::string What(const char* op, const std::string& ns, const Digest& digest) const {
    return absl::StrCat("containerd content store (", socket_path_, "): ", op, " ", digest.str(),
                        " in namespace \"", ns, "\"");
  }

  const std::string socket_path_;
  Clock* const clock_;  // what call deadlines are measured on
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<api::Content::Stub> stub_;
  std::unique_ptr<images_api::Images::Stub> images_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ContentStore>> ConnectContentStore(const std::string& socket_path,
                                                                  Clock* clock) {
  if (socket_path.empty()) {
    return absl::InvalidArgumentError("containerd content store: empty socket path");
  }
  return std::make_unique<GrpcContentStore>(socket_path, clock);
}

}  // namespace modelfs::snapshotter
