// The kernel's ModelMounter: FuseMount for the tree of models, umount2 for the rest.
#include "host/model_mounter.h"

#include <sys/mount.h>

#include <utility>

#include "core/status/status_macros.h"
#include "fuse/stale_mount.h"

namespace modelfs {
namespace {

class FuseModelMount final : public ModelMount {
 public:
  explicit FuseModelMount(std::unique_ptr<FuseMount> fuse) : fuse_(std::move(fuse)) {}
  absl::Status RemoveModel(const std::string& model_name) override {
    return fuse_->RemoveModel(model_name);
  }
  absl::Status Unmount() override { return fuse_->Unmount(); }
  absl::Status Detach() override { return fuse_->Detach(); }
  absl::Status Wait() override { return fuse_->Wait(); }
  int fuse_fd() const override { return fuse_->fuse_fd(); }

 private:
  std::unique_ptr<FuseMount> fuse_;
};

class FuseModelMounter final : public ModelMounter {
 public:
  absl::Status DetachStaleMount(const std::string& dir) override {
    return ::modelfs::DetachStaleMount(dir);
  }
  absl::StatusOr<std::unique_ptr<ModelMount>> Mount(const std::string& dir,
                                                    std::shared_ptr<ModelTree> tree,
                                                    const FuseMountOptions& options) override {
    ASSIGN_OR_RETURN(std::unique_ptr<FuseMount> fuse,
                     FuseMount::Mount(dir, std::move(tree), options));
    return std::make_unique<FuseModelMount>(std::move(fuse));
  }
  absl::StatusOr<std::unique_ptr<ModelMount>> Adopt(int fuse_fd, const std::string& dir,
                                                    std::shared_ptr<ModelTree> tree,
                                                    const FuseMountOptions& options) override {
    ASSIGN_OR_RETURN(std::unique_ptr<FuseMount> fuse,
                     FuseMount::Adopt(fuse_fd, dir, std::move(tree), options));
    return std::make_unique<FuseModelMount>(std::move(fuse));
  }
  void LazyUnmount(const std::string& dir) override { ::umount2(dir.c_str(), MNT_DETACH); }
};

}  // namespace

std::unique_ptr<ModelMounter> NewFuseModelMounter() { return std::make_unique<FuseModelMounter>(); }

}  // namespace modelfs
