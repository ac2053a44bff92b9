// UrlOrigin, ResolveLocation and IsRedirectStatus: the URL pieces the HTTP clients share.
#include "core/http/url.h"

#include <gtest/gtest.h>

namespace modelfs {
namespace {

TEST(UrlOriginTest, IsTheSchemeAndAuthorityLowercased) {
  EXPECT_EQ(UrlOrigin("HTTPS://Reg.Example:5000/v2/x?y=1"), "https://reg.example:5000");
}

TEST(UrlOriginTest, OfAUrlWithoutAPathIsTheWholeUrl) {
  EXPECT_EQ(UrlOrigin("http://h:1"), "http://h:1");
}

TEST(UrlOriginTest, OfAStringWithoutASchemeIsEmpty) { EXPECT_EQ(UrlOrigin("/v2/x"), ""); }

TEST(ResolveLocationTest, AnAbsoluteLocationIsKept) {
  EXPECT_EQ(ResolveLocation("http://a/v2/x", "https://cdn/b?sig=1"), "https://cdn/b?sig=1");
}

TEST(ResolveLocationTest, ASchemeRelativeLocationTakesTheBasesScheme) {
  EXPECT_EQ(ResolveLocation("https://a/v2/x", "//cdn/b"), "https://cdn/b");
}

TEST(ResolveLocationTest, AnAbsolutePathKeepsTheBasesOriginAsSpelled) {
  EXPECT_EQ(ResolveLocation("http://Reg:5000/v2/x?q=1", "/v2/y"), "http://Reg:5000/v2/y");
}

TEST(ResolveLocationTest, ARelativePathIsResolvedAgainstTheBasesDirectory) {
  EXPECT_EQ(ResolveLocation("http://a/v2/r/blobs/uploads/?x=1", "abc"),
            "http://a/v2/r/blobs/uploads/abc");
}

TEST(IsRedirectStatusTest, TheFiveRedirectStatusesAreRedirects) {
  for (long s : {301, 302, 303, 307, 308}) EXPECT_TRUE(IsRedirectStatus(s)) << s;
}

TEST(IsRedirectStatusTest, OtherThreeHundredsAreNot) {
  for (long s : {300, 304, 305, 200, 404}) EXPECT_FALSE(IsRedirectStatus(s)) << s;
}

}  // namespace
}  // namespace modelfs
