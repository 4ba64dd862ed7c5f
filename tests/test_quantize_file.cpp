// `qvl quantize`'s model directory: the converted weights written once load back as they were (same types,
// bit-identical logits), without converting again.
#include <gtest/gtest.h>

#include <filesystem>

#include "model/quantize_file.h"
#include "model/test_model.h"
#include "model/text.h"
#include "test_paths.h"

namespace qvl {
namespace {

std::vector<float> last_logits(const Model& m, ThreadPool& pool, const std::vector<int32_t>& ids) {
  KVCache cache(m.config().text, static_cast<int64_t>(ids.size()));
  std::vector<int32_t> pos(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) pos[i] = static_cast<int32_t>(i);
  const int32_t* p3[3] = {pos.data(), pos.data(), pos.data()};
  std::vector<float> logits(static_cast<size_t>(m.config().text.vocab_size));
  text_forward(m, pool, cache, ids.data(), static_cast<int64_t>(ids.size()), p3, nullptr, LogitsMode::kLast,
               logits.data());
  return logits;
}

TEST(QuantizeFile, ConvertedWeightsLoadBackBitForBit) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("qvl-test-quantize-" + std::to_string(::getpid()));
  TestModelOptions o;
  o.preset = "tiny";
  o.seed = 3;
  o.out_dir = (root / "src").string();
  o.model_files_dir = test::model_files_dir();
  ASSERT_TRUE(make_test_model(o).ok());

  auto converted = Model::load(o.out_dir, WeightTypes{WeightType::kQ4_0, WeightType::kQ8_0}, 2);
  ASSERT_TRUE(converted.ok()) << converted.status().message();
  const std::string out = (root / "q").string();
  Status s = write_converted_model(**converted, out);
  ASSERT_TRUE(s.ok()) << s.message();

  // Loaded with the defaults (which would convert bf16 to q8_0): stored quantized matrices stay as stored.
  auto reloaded = Model::load(out, default_weight_types(), 2);
  ASSERT_TRUE(reloaded.ok()) << reloaded.status().message();
  EXPECT_EQ((*reloaded)->text_weight_type(), WeightType::kQ4_0);
  EXPECT_EQ((*reloaded)->vision_weight_type(), WeightType::kQ8_0);
  EXPECT_EQ((*reloaded)->text().lm_head.type, WeightType::kQ4_0);

  ThreadPool pool(2);
  const std::vector<int32_t> ids = (*converted)->tokenizer().encode("Hello there, how are you today?");
  EXPECT_EQ(last_logits(**converted, pool, ids), last_logits(**reloaded, pool, ids));

  // Writing into the model's own directory is refused.
  EXPECT_FALSE(write_converted_model(**reloaded, out).ok());
  fs::remove_all(root);
}

}  // namespace
}  // namespace qvl
