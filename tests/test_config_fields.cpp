// Integer fields of config.json and preprocessor_config.json are read strictly: out of range or not an
// integer is an error naming the field, never a wrapped or undefined conversion (fuzz_config's finding).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "test_paths.h"
#include "util/file.h"

namespace qvl::test {
namespace {

nlohmann::json real_config() {
  auto text = read_file_text(model_files_dir() + "/config.json");
  EXPECT_TRUE(text.ok());
  return nlohmann::json::parse(*text);
}

TEST(ConfigFields, TheRealConfigParses) {
  auto c = ModelConfig::parse(real_config().dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->image_token_id, 151655);
}

TEST(ConfigFields, OutOfRangeAndNonIntegerValuesNameTheField) {
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](nlohmann::json& j) { j["image_token_id"] = 1e300; }, "config.json.image_token_id"},
      {[](nlohmann::json& j) { j["image_token_id"] = 4294967296LL; }, "config.json.image_token_id"},
      {[](nlohmann::json& j) { j["text_config"]["hidden_size"] = 2.5; }, "text_config.hidden_size"},
      {[](nlohmann::json& j) { j["vision_config"]["depth"] = "24"; }, "vision_config.depth"},
      {[](nlohmann::json& j) { j["vision_config"]["deepstack_visual_indexes"] = {5, 1e20}; },
       "deepstack_visual_indexes[1]"},
      {[](nlohmann::json& j) { j["text_config"]["num_attention_heads"] = 0; }, "num_attention_heads must be positive"},
      {[](nlohmann::json& j) { j["text_config"]["rope_scaling"]["mrope_section"] = {2147483647, 1, 0}; }, "mrope_section"},
      {[](nlohmann::json& j) { j["vision_config"]["num_position_embeddings"] = 2147483647; }, "must be a square"},
      {[](nlohmann::json& j) { j["vision_config"]["temporal_patch_size"] = 0; }, "temporal_patch_size must be positive"},
      {[](nlohmann::json& j) { j["vision_config"]["in_channels"] = -3; }, "in_channels must be positive"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = real_config();
    c.edit(j);
    auto r = ModelConfig::parse(j.dump(), "config.json");
    ASSERT_FALSE(r.ok()) << j.dump().substr(0, 200);
    EXPECT_NE(r.status().message().find(c.expected), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace qvl::test
