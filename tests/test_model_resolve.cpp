// Which model directory a --model argument means: a directory, or a hub id found complete in the local hub
// cache (no network), or refused with what to do when downloads are off. Downloads: tests/test_hub*.cpp.
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "hub/resolve.h"
#include "util/file.h"

namespace qvl::test {
namespace {

namespace fs = std::filesystem;

TEST(ModelResolve, DirectoryHubCacheAndMissing) {
  const fs::path cache = fs::temp_directory_path() / ("qvl-test-hub-" + std::to_string(::getpid()));
  fs::remove_all(cache);
  const fs::path repo = cache / "models--Qwen--Qwen3-VL-2B-Instruct";
  const std::string commit = "0123456789abcdef0123456789abcdef01234567";
  const fs::path snap = repo / "snapshots" / commit;
  fs::create_directories(repo / "refs");
  fs::create_directories(snap);
  ASSERT_TRUE(write_file_bytes((repo / "refs" / "main").string(), commit.data(), commit.size()).ok());
  for (const char* f : {"config.json", "tokenizer.json", "model.safetensors"})
    ASSERT_TRUE(write_file_bytes((snap / f).string(), "{}", 2).ok());

  ResolveOptions o;
  o.hub_cache = cache.string();
  o.download = false;
  auto hub = resolve_model("Qwen/Qwen3-VL-2B-Instruct", o);
  ASSERT_TRUE(hub.ok()) << hub.status().message();
  EXPECT_EQ(hub->dir, snap.string());
  EXPECT_EQ(hub->id, "Qwen/Qwen3-VL-2B-Instruct");
  auto prefixed = resolve_model("hf:Qwen/Qwen3-VL-2B-Instruct", o);
  ASSERT_TRUE(prefixed.ok()) << prefixed.status().message();
  EXPECT_EQ(prefixed->dir, snap.string());

  auto dir = resolve_model(snap.string(), o);
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(dir->id, commit);

  // An incomplete snapshot is not used.
  fs::remove(snap / "model.safetensors");
  EXPECT_FALSE(resolve_model("Qwen/Qwen3-VL-2B-Instruct", o).ok());

  auto missing = resolve_model("Qwen/Qwen3-VL-8B-Instruct", o);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("qvl pull Qwen/Qwen3-VL-8B-Instruct"), std::string::npos)
      << missing.status().message();
  auto bad = resolve_model("no/such/dir/at/all", o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not a hub id"), std::string::npos) << bad.status().message();
  fs::remove_all(cache);
}

}  // namespace
}  // namespace qvl::test
