// RegistryRoutingSource: each layer goes to the source a model registered it with; a layer no
// model registered is kNotFound and has no endpoint. Sources are in-memory fakes.
#include "core/registry/registry_routing_source.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "testsupport/fakes/fake_remote.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::FakeRemote;
using ::modelfs::testing::StatusIs;

TEST(RegistryRoutingSourceTest, EachLayerIsReadFromTheSourceItWasAddedWith) {
  auto a = std::make_shared<FakeRemote>();
  auto b = std::make_shared<FakeRemote>();
  const Digest da = a->AddBlob("layer a bytes");
  const Digest db = b->AddBlob("layer b bytes");
  a->SetEndpoint(da, "registry-a");
  b->SetEndpoint(db, "registry-b");
  RegistryRoutingSource routing;
  routing.AddSource(da, a);
  routing.AddSource(db, b);

  ASSERT_OK_AND_ASSIGN(std::string got, routing.FetchRange(da, 6, 1, absl::InfiniteFuture()));
  EXPECT_EQ(got, "a");
  std::string streamed;
  ASSERT_OK(routing.StreamRange(db, 0, 7, absl::InfiniteFuture(), [&](absl::string_view piece) {
    streamed.append(piece.data(), piece.size());
    return absl::OkStatus();
  }));
  EXPECT_EQ(streamed, "layer b");
  EXPECT_EQ(routing.EndpointOf(da), "registry-a");
  EXPECT_EQ(routing.EndpointOf(db), "registry-b");
  EXPECT_EQ(a->requests(), 1);
  EXPECT_EQ(b->requests(), 1);
}

TEST(RegistryRoutingSourceTest, ALayerNoModelRegisteredIsNotFound) {
  RegistryRoutingSource routing;
  const Digest d = Digest::Of("unknown");
  EXPECT_THAT(routing.FetchRange(d, 0, 1, absl::InfiniteFuture()).status(),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(routing.EndpointOf(d), "");
}

TEST(RegistryRoutingSourceTest, ALaterRouteReplacesAnEarlierOne) {
  auto a = std::make_shared<FakeRemote>();
  auto b = std::make_shared<FakeRemote>();
  const Digest d = a->AddBlob("same bytes");
  b->AddBlob("same bytes");
  RegistryRoutingSource routing;
  routing.AddSource(d, a);
  routing.AddSource(d, b);
  ASSERT_OK(routing.FetchRange(d, 0, 4, absl::InfiniteFuture()).status());
  EXPECT_EQ(a->requests(), 0);
  EXPECT_EQ(b->requests(), 1);
}

}  // namespace
}  // namespace modelfs
