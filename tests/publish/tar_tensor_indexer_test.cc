// TarTensorIndexer: the weight files of a tar, indexed from one pass over its bytes, give the
// indexes the raw-layer path gives for the same file bytes (offsets within the file, the same
// BLAKE3 digests), with the member's path and data offset beside them.
#include "core/publish/tar_tensor_indexer.h"

#include <string>

#include "core/formats/gguf_writer.h"
#include "core/formats/safetensors.h"
#include "core/io/range_reader.h"
#include "core/oci/tar.h"
#include "core/publish/tensor_listing.h"
#include "core/status/status_macros.h"
#include "testsupport/testing/status_matchers.h"

namespace modelfs {
namespace {

using ::modelfs::testing::StatusIs;

std::string Bytes(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 31 + seed * 17) & 0xff);
  return s;
}

std::string Safetensors(int seed, size_t big = 64) {
  SafetensorsWriter w;
  EXPECT_OK(w.AddTensor("a.weight", "BF16", {static_cast<uint64_t>(big / 2)}, Bytes(big, seed)));
  EXPECT_OK(w.AddTensor("b.bias", "F32", {8}, Bytes(32, seed + 1)));
  return w.Serialize();
}

std::string Gguf() {
  GgufWriter g;
  g.Set("general.architecture", GgufValue::String("llama"));
  EXPECT_OK(g.AddTensor("token_embd.weight", {8, 2}, /*F32*/ 0, Bytes(64, 3)));
  EXPECT_OK(g.AddTensor("output_norm.weight", {8}, /*F32*/ 0, Bytes(32, 4)));
  absl::StatusOr<std::string> file = g.Serialize();
  EXPECT_OK(file.status());
  return file.value_or("");
}

// The index the raw-layer path (push of a .raw layer) builds for the same bytes.
TensorIndex RawIndexOf(const std::string& file, const std::string& path) {
  auto reader = MakeMemoryRangeReaderView(path, file);
  absl::StatusOr<std::optional<TensorSkeleton>> s =
      ReadTensorSkeleton(*reader, path, Digest(), file.size(), 0);
  EXPECT_OK(s.status());
  absl::StatusOr<TensorIndexBuilder> b =
      TensorIndexBuilder::Create(std::move((*s)->index), std::move((*s)->header));
  EXPECT_OK(b.status());
  b->Update(file);
  absl::StatusOr<TensorIndex> idx = b->Finish();
  EXPECT_OK(idx.status());
  return *idx;
}

// Feeds `tar` in pieces of `piece` bytes.
absl::StatusOr<std::vector<TarTensorIndex>> IndexTarInPieces(const std::string& tar, size_t piece,
                                                             std::string* stopped = nullptr) {
  TarTensorIndexer ix("layer test");
  for (size_t at = 0; at < tar.size(); at += piece) {
    RETURN_IF_ERROR(ix.Feed(std::string_view(tar).substr(at, piece)));
  }
  std::optional<TarTensorIndexes> out = ix.Finish(Digest::Of(tar));
  if (stopped) *stopped = ix.stopped();
  if (!out) return std::vector<TarTensorIndex>();
  EXPECT_EQ(out->tar_digest, Digest::Of(tar));
  EXPECT_EQ(out->tar_size, tar.size());
  return out->files;
}

TEST(TarTensorIndexerTest, EveryWeightMemberIsIndexedAsTheRawPathIndexesTheSameBytes) {
  const std::string a = Safetensors(1), b = Safetensors(5, 4096), g = Gguf();
  const std::string long_dir(120, 'd');  // past ustar's 100 bytes: a pax path record
  TarWriter w;
  ASSERT_OK(w.AddDirectory("models"));
  ASSERT_OK(w.AddFile("models/README.md", "# not a model\n"));
  ASSERT_OK(w.AddFile("models/a.safetensors", a));
  ASSERT_OK(w.AddFile("models/" + long_dir + "/b.safetensors", b));
  ASSERT_OK(w.AddFile("models/m.gguf", g));
  const std::string tar = w.Finish();
  ASSERT_OK_AND_ASSIGN(std::vector<TarEntry> entries, IndexTarBytes(tar));
  for (size_t piece : {size_t{1}, size_t{7}, size_t{512}, size_t{4096}, tar.size()}) {
    ASSERT_OK_AND_ASSIGN(std::vector<TarTensorIndex> got, IndexTarInPieces(tar, piece));
    ASSERT_EQ(got.size(), 3u) << piece;
    EXPECT_EQ(got[0].file, "models/a.safetensors");
    EXPECT_EQ(got[1].file, "models/" + long_dir + "/b.safetensors");
    EXPECT_EQ(got[2].file, "models/m.gguf");
    const std::string* bytes[] = {&a, &b, &g};
    for (size_t i = 0; i < got.size(); ++i) {
      TensorIndex want = RawIndexOf(*bytes[i], got[i].file);
      const TarEntry* e = nullptr;
      for (const TarEntry& x : entries)
        if (x.path == got[i].file) e = &x;
      ASSERT_NE(e, nullptr);
      want.layer_digest = Digest::Of(tar);
      want.layer_size = tar.size();
      want.file_offset = e->data_offset;
      EXPECT_EQ(got[i].index, want) << got[i].file << " in pieces of " << piece;
    }
  }
}

TEST(TarTensorIndexerTest, GnuLongNamesNameTheMember) {
  const std::string a = Safetensors(2);
  const std::string path = std::string(150, 'x') + "/model.safetensors";
  TarWriter w(TarWriter::LongNames::kGnu);
  ASSERT_OK(w.AddFile(path, a));
  const std::string tar = w.Finish();
  ASSERT_OK_AND_ASSIGN(std::vector<TarTensorIndex> got, IndexTarInPieces(tar, 100));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].file, path);
  EXPECT_EQ(got[0].index.tensors, RawIndexOf(a, path).tensors);
}

TEST(TarTensorIndexerTest, ALaterMemberOfTheSamePathReplacesTheEarlierOne) {
  TarWriter w;
  ASSERT_OK(w.AddFile("m.safetensors", Safetensors(1)));
  ASSERT_OK(w.AddFile("m.safetensors", Safetensors(9)));
  const std::string tar = w.Finish();
  ASSERT_OK_AND_ASSIGN(std::vector<TarTensorIndex> got, IndexTarInPieces(tar, 333));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].index.tensors, RawIndexOf(Safetensors(9), "m.safetensors").tensors);
}

TEST(TarTensorIndexerTest, AHeaderLargerThanTheFirstTryIsKeptUntilItParses) {
  SafetensorsWriter sw;
  // About 200 KiB of header: past the first 64 KiB the indexer keeps.
  for (int i = 0; i < 2000; ++i) {
    ASSERT_OK(sw.AddTensor(absl::StrCat("layers.", i, ".a_rather_long_tensor_name_to_fill.weight"),
                           "F32", {1}, Bytes(4, i)));
  }
  const std::string file = sw.Serialize();
  ASSERT_GT(sw.SerializeHeader().size(), 128u << 10);
  TarWriter w;
  ASSERT_OK(w.AddFile("big.safetensors", file));
  const std::string tar = w.Finish();
  ASSERT_OK_AND_ASSIGN(std::vector<TarTensorIndex> got, IndexTarInPieces(tar, 10000));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].index.tensors, RawIndexOf(file, "big.safetensors").tensors);
}

TEST(TarTensorIndexerTest, AMalformedWeightFileIsRefusedNamingTheMember) {
  TarWriter w;
  ASSERT_OK(w.AddFile("bad.safetensors", std::string("\x05\0\0\0\0\0\0\0{oops", 13)));
  const std::string tar = w.Finish();
  absl::StatusOr<std::vector<TarTensorIndex>> got = IndexTarInPieces(tar, 512);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("bad.safetensors"), std::string::npos)
      << got.status().message();
}

TEST(TarTensorIndexerTest, AHeaderOverTheLimitIsRefusedByName) {
  // A length field that asks for more than the safetensors header limit.
  std::string file("\0\0\0\0\0\0\0\0", 8);
  const uint64_t n = kSafetensorsMaxHeaderSize + 1;
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  file += std::string(1000, ' ');
  TarWriter w;
  ASSERT_OK(w.AddFile("huge.safetensors", file));
  absl::StatusOr<std::vector<TarTensorIndex>> got = IndexTarInPieces(w.Finish(), 512);
  EXPECT_THAT(got.status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(got.status().message().find("huge.safetensors"), std::string::npos)
      << got.status().message();
}

TEST(TarTensorIndexerTest, AnUnsafeWeightMemberPathIsRefused) {
  // TarWriter refuses such a name; write the header by hand with a valid checksum.
  std::string block(512, '\0');
  const std::string name = "../evil.safetensors";
  block.replace(0, name.size(), name);
  block.replace(100, 7, "0000644");
  block.replace(124, 11, "00000000000");
  block.replace(136, 11, "00000000000");
  block[156] = '0';
  block.replace(257, 6, std::string("ustar\0", 6));
  block.replace(263, 2, "00");
  block.replace(148, 8, "        ");
  unsigned sum = 0;
  for (unsigned char c : block) sum += c;
  char chk[8];
  snprintf(chk, sizeof chk, "%06o", sum);
  block.replace(148, 7, std::string(chk, 6) + '\0');
  const std::string tar = block + std::string(1024, '\0');
  absl::StatusOr<std::vector<TarTensorIndex>> got = IndexTarInPieces(tar, 512);
  EXPECT_THAT(got.status(), StatusIs(absl::StatusCode::kPermissionDenied));
}

TEST(TarTensorIndexerTest, ATarThatIsNotATarGetsNoIndexAndSaysWhy) {
  std::string stopped;
  ASSERT_OK_AND_ASSIGN(std::vector<TarTensorIndex> got,
                       IndexTarInPieces(std::string(2048, 'z'), 512, &stopped));
  EXPECT_TRUE(got.empty());
  EXPECT_NE(stopped.find("layer test"), std::string::npos) << stopped;
}

TEST(TarTensorIndexerTest, ATarCutShortInsideAWeightFileGetsNoIndex) {
  TarWriter w;
  ASSERT_OK(w.AddFile("m.safetensors", Safetensors(1)));
  const std::string tar = w.Finish();
  std::string stopped;
  ASSERT_OK_AND_ASSIGN(std::vector<TarTensorIndex> got,
                       IndexTarInPieces(tar.substr(0, 600), 512, &stopped));
  EXPECT_TRUE(got.empty());
  EXPECT_FALSE(stopped.empty());
}

}  // namespace
}  // namespace modelfs
