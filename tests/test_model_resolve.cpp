// Which model directory a --model argument means: a directory, or a hub id found complete in the local hub
// cache (no network), or refused with what to do when downloads are off. Downloads: tests/test_hub*.cpp.
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "hub/cache.h"
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

// What can only be a local path never goes to a hub (it would be a network lookup of a name the user meant as a
// file): an existing file that is not a .gguf, /x ./x ../x ~/x, and a missing .gguf. The answer says which.
TEST(ModelResolve, LocalPathsAreNeverHubIds) {
  const fs::path dir = fs::temp_directory_path() / ("qvl-test-local-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "m");
  const fs::path file = dir / "m" / "model.safetensors";
  ASSERT_TRUE(write_file_bytes(file.string(), "{}", 2).ok());
  ResolveOptions o;
  o.hub_cache = (dir / "cache").string();
  o.download = false;  // a hub lookup would end in "download it with: qvl pull ..."
  auto is_file = resolve_model(file.string(), o);
  ASSERT_FALSE(is_file.ok());
  EXPECT_NE(is_file.status().message().find("is a file, not a model"), std::string::npos) << is_file.status().message();
  for (const std::string spec : {"./mymodel", "../up/model", "/no/such/model", "~/models/x", "gg/x.gguf", "my/x.gguf"}) {
    auto r = resolve_model(spec, o);
    ASSERT_FALSE(r.ok()) << spec;
    EXPECT_NE(r.status().message().find("no such file or directory"), std::string::npos) << spec << ": " << r.status().message();
    EXPECT_EQ(r.status().message().find("qvl pull"), std::string::npos) << spec << ": " << r.status().message();
  }
  // Hugging Face's own rules for ORG/NAME (huggingface_hub validate_repo_id).
  for (const std::string& id : std::vector<std::string>{"Qwen/Qwen3-VL-2B-Instruct", "unsloth/Qwen3-VL-2B-Instruct-GGUF", "a_/b.c",
                                                       "A1/_x_", std::string(90, 'a') + "/bcdefgh", "o/" + std::string(96, 'n')})
    EXPECT_TRUE(hub::is_valid_repo_id(id)) << id;
  for (const std::string& id : std::vector<std::string>{"./mymodel", "-x/y", "x/y-", "x./y", "a--b/c", "a/b..c", "a/b/c", "/x", "x/", "o/" + std::string(97, 'n')})
    EXPECT_FALSE(hub::is_valid_repo_id(id)) << id;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qvl::test
