// The generated protos must stay wire-compatible with containerd's: same packages, field
// numbers and enum values (a mismatch would silently scramble every proxy-plugin call).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "containerd/services/snapshots/v1/snapshots.pb.h"
#include "containerd/types/mount.pb.h"

namespace {

namespace v1 = containerd::services::snapshots::v1;

int FieldNumber(const google::protobuf::Descriptor* d, const char* name) {
  const google::protobuf::FieldDescriptor* f = d->FindFieldByName(name);
  return f ? f->number() : -1;
}

TEST(ProtoWireTest, MountFieldsUseContainerdNumbers) {
  const auto* d = containerd::types::Mount::descriptor();
  EXPECT_EQ(d->full_name(), "containerd.types.Mount");
  EXPECT_EQ(FieldNumber(d, "type"), 1);
  EXPECT_EQ(FieldNumber(d, "source"), 2);
  EXPECT_EQ(FieldNumber(d, "target"), 3);
  EXPECT_EQ(FieldNumber(d, "options"), 4);
}

TEST(ProtoWireTest, InfoFieldsUseContainerdNumbers) {
  const auto* d = v1::Info::descriptor();
  EXPECT_EQ(d->full_name(), "containerd.services.snapshots.v1.Info");
  EXPECT_EQ(FieldNumber(d, "name"), 1);
  EXPECT_EQ(FieldNumber(d, "parent"), 2);
  EXPECT_EQ(FieldNumber(d, "kind"), 3);
  EXPECT_EQ(FieldNumber(d, "created_at"), 4);
  EXPECT_EQ(FieldNumber(d, "updated_at"), 5);
  EXPECT_EQ(FieldNumber(d, "labels"), 6);
}

TEST(ProtoWireTest, KindValuesMatchContainerd) {
  EXPECT_EQ(v1::UNKNOWN, 0);
  EXPECT_EQ(v1::VIEW, 1);
  EXPECT_EQ(v1::ACTIVE, 2);
  EXPECT_EQ(v1::COMMITTED, 3);
}

TEST(ProtoWireTest, CommitRequestPutsNameBeforeKey) {
  const auto* d = v1::CommitSnapshotRequest::descriptor();
  EXPECT_EQ(FieldNumber(d, "snapshotter"), 1);
  EXPECT_EQ(FieldNumber(d, "name"), 2);
  EXPECT_EQ(FieldNumber(d, "key"), 3);
  EXPECT_EQ(FieldNumber(d, "labels"), 4);
}

TEST(ProtoWireTest, UpdateAndUsageMessagesUseContainerdNumbers) {
  EXPECT_EQ(FieldNumber(v1::UpdateSnapshotRequest::descriptor(), "info"), 2);
  EXPECT_EQ(FieldNumber(v1::UpdateSnapshotRequest::descriptor(), "update_mask"), 3);
  EXPECT_EQ(FieldNumber(v1::ListSnapshotsRequest::descriptor(), "filters"), 2);
  EXPECT_EQ(FieldNumber(v1::UsageResponse::descriptor(), "size"), 1);
  EXPECT_EQ(FieldNumber(v1::UsageResponse::descriptor(), "inodes"), 2);
}

TEST(ProtoWireTest, ServiceHasContainerdsTenMethodsWithAStreamingList) {
  const auto* s = v1::Info::descriptor()->file()->FindServiceByName("Snapshots");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->full_name(), "containerd.services.snapshots.v1.Snapshots");
  EXPECT_EQ(s->method_count(), 10);
  const auto* list = s->FindMethodByName("List");
  ASSERT_NE(list, nullptr);
  EXPECT_TRUE(list->server_streaming());
  EXPECT_FALSE(list->client_streaming());
}

}  // namespace
