// Which model directory a --model argument means: a directory, or a hub id found in the local hub cache.
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "model/resolve.h"
#include "util/file.h"

namespace qvl::test {
namespace {

namespace fs = std::filesystem;

TEST(ModelResolve, DirectoryHubCacheAndMissing) {
  const fs::path cache = fs::temp_directory_path() / ("qvl-test-hub-" + std::to_string(::getpid()));
  fs::remove_all(cache);
  const fs::path repo = cache / "models--Qwen--Qwen3-VL-2B-Instruct";
  fs::create_directories(repo / "refs");
  fs::create_directories(repo / "snapshots" / "abc123");
  ASSERT_TRUE(write_file_bytes((repo / "refs" / "main").string(), "abc123\n", 7).ok());
  ASSERT_TRUE(write_file_bytes((repo / "snapshots" / "abc123" / "config.json").string(), "{}", 2).ok());

  auto hub = locate_model("Qwen/Qwen3-VL-2B-Instruct", cache.string());
  ASSERT_TRUE(hub.ok()) << hub.status().message();
  EXPECT_EQ(hub->dir, (repo / "snapshots" / "abc123").string());
  EXPECT_EQ(hub->id, "Qwen/Qwen3-VL-2B-Instruct");

  auto dir = locate_model((repo / "snapshots" / "abc123").string(), cache.string());
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(dir->id, "abc123");

  auto missing = locate_model("Qwen/Qwen3-VL-8B-Instruct", cache.string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("huggingface-cli download Qwen/Qwen3-VL-8B-Instruct"), std::string::npos)
      << missing.status().message();
  EXPECT_FALSE(locate_model("no/such/dir", cache.string()).ok());
  fs::remove_all(cache);
}

}  // namespace
}  // namespace qvl::test
