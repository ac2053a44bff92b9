// `modelfs node ls` as text, from the JSON document `--json` prints (cmd/modelfs/node_render.h).
#include "cmd/modelfs/node_render.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace modelfs::cli {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kM[] = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
constexpr char kV[] = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

json Node() {
  return {{"models",
           {{{"name", "sha256-1111"},
             {"model_digest", kM},
             {"volume_digest", kV},
             {"reference", std::string("127.0.0.1:5000/m@") + kV},
             {"registry", "127.0.0.1:5000"},
             {"repository", "m"},
             {"state", "ready"},
             {"error", ""},
             {"prefetched", false},
             {"layers", 2u},
             {"size", 3u << 30},
             {"cached_bytes", 1u << 30},
             {"verified_bytes", 1u << 29},
             {"sealed", false},
             {"passthrough_opens", 7u},
             {"snapshots",
              {{{"key", "k8s.io/3/sha256:abc"},
                {"kind", "committed"},
                {"image", "reg/v:1"},
                {"container", ""}},
               {{"key", "k8s.io/9/" + std::string(64, 'c')},
                {"kind", "active"},
                {"image", ""},
                {"container", std::string(64, 'c')}}}}}}},
          {"cache", {{"bytes", 1u << 30}, {"max_bytes", 0u}, {"layers", 3u}, {"disk_full", false}}},
          {"layers",
           {{{"digest", "sha256:3333"},
             {"size", 1024u},
             {"quarantined", true},
             {"scrubbing", false},
             {"models", {kM}}}}},
          {"errors",
           {{{"registry", "127.0.0.1:5000"},
             {"at", "2026-12-07T15:00:00Z"},
             {"message", "UNAVAILABLE: connection refused"},
             {"count", 3u}}}}};
}

TEST(NodeRenderTest, AModelLineShowsItsShortDigestSizesSealOpensSnapshotsAndState) {
  const std::string text = RenderNodeList(Node());
  EXPECT_THAT(text, HasSubstr("sha256:111111111111    3.00 GiB    1.00 GiB  512.00 MiB  no      "
                              "    7     2  ready    127.0.0.1:5000/m@sha256:2222"));
}

TEST(NodeRenderTest, UnderTheModelItsDigestsRegistryAndSnapshotsWithTheirContainers) {
  const std::string text = RenderNodeList(Node());
  EXPECT_THAT(text, HasSubstr(std::string("    M ") + kM + " from 127.0.0.1:5000/m\n"));
  EXPECT_THAT(text, HasSubstr(std::string("    V ") + kV + "\n"));
  EXPECT_THAT(text, HasSubstr("    committed k8s.io/3/sha256:abc  image reg/v:1\n"));
  EXPECT_THAT(text, HasSubstr("    active    k8s.io/9/" + std::string(64, 'c') + "  container " +
                              std::string(64, 'c') + "\n"));
}

TEST(NodeRenderTest, TheCacheIsShownAgainstItsBoundOrAsUnbounded) {
  json node = Node();
  EXPECT_THAT(RenderNodeList(node), HasSubstr("cache: 1.00 GiB of unbounded, 3 layers\n"));
  node["cache"]["max_bytes"] = 200ull << 30;
  node["cache"]["disk_full"] = true;
  EXPECT_THAT(RenderNodeList(node),
              HasSubstr("cache: 1.00 GiB of 200.00 GiB, 3 layers, DISK FULL (serving uncached)\n"));
}

TEST(NodeRenderTest, QuarantinedLayersAndTheLastErrorPerRegistryAreListed) {
  const std::string text = RenderNodeList(Node());
  EXPECT_THAT(text, HasSubstr("layer sha256:3333 (1.00 KiB): quarantined\n"));
  EXPECT_THAT(text, HasSubstr("  127.0.0.1:5000  2026-12-07T15:00:00Z  (3 in all)  UNAVAILABLE: "
                              "connection refused\n"));
}

TEST(NodeRenderTest, ANodeWithoutModelsSaysSo) {
  json node = {{"models", json::array()}, {"cache", {{"bytes", 0u}, {"layers", 0u}}}};
  const std::string text = RenderNodeList(node);
  EXPECT_THAT(text, HasSubstr("(no models registered)\n"));
  EXPECT_THAT(text, Not(HasSubstr("last error per registry")));
}

TEST(NodeRenderTest, StringsFromTheDaemonCannotWriteTerminalEscapes) {
  json node = Node();
  node["models"][0]["reference"] = "evil\x1b[2Jref";
  EXPECT_THAT(RenderNodeList(node), Not(HasSubstr("\x1b[2J")));
}

TEST(NodeRenderTest, PrefetchProgressCountsSealedLayersAndVerifiedBytes) {
  json p = {{"phase", "fetching"},
            {"layers", 5u},
            {"layers_sealed", 3u},
            {"total_bytes", 2u << 30},
            {"verified_bytes", 1u << 30}};
  EXPECT_EQ(RenderPrefetchProgress(p), "fetching 3/5 layers sealed, 1.00 GiB of 2.00 GiB verified");
  EXPECT_EQ(RenderPrefetchProgress(json{{"phase", "resolving"}}), "resolving ...");
}

}  // namespace
}  // namespace modelfs::cli
