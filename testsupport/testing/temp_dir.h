// A unique temporary directory for one test, removed (recursively) when it goes out of scope.
#pragma once

#include <filesystem>
#include <string>

namespace modelfs::testing {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Returns path()/name.
  std::filesystem::path Join(const std::string& name) const { return path_ / name; }
  // Writes bytes to path()/name and returns the full path.
  std::filesystem::path WriteFile(const std::string& name, const std::string& bytes) const;

 private:
  std::filesystem::path path_;
};

}  // namespace modelfs::testing
