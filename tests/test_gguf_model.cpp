// `qvl quantize --format gguf` and back: the tiny model written as llama.cpp's GGUF pair holds the blocks qvl
// computes at load (q8_0) or the stored values (f32), loads again, and in f32 answers exactly as the source.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "engine/generate.h"
#include "io/gguf.h"
#include "io/image.h"
#include "model/gguf_export.h"
#include "model/test_model.h"
#include "tensor/quant.h"
#include "test_paths.h"
#include "util/thread_pool.h"

namespace qvl {
namespace {

namespace fs = std::filesystem;

std::vector<int32_t> answer(const Model& m) {
  ThreadPool pool(2);
  GenerateOptions g;
  g.sampling.temperature = 0;
  g.max_tokens = 8;
  g.ignore_eos = true;
  g.image.max_pixels = 65536;
  auto img = load_image_file(test::data_dir() + "/images/png_rgb8_256x256.png");
  EXPECT_TRUE(img.ok());
  auto r = generate(m, pool, {user_message(1, "Describe it.")}, {*img}, g);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r->tokens : std::vector<int32_t>{};
}

TEST(GgufModel, WrittenGgufHoldsQvlsBlocksAndLoadsAgain) {
  const fs::path root = fs::temp_directory_path() / ("qvl-test-gguf-model-" + std::to_string(::getpid()));
  TestModelOptions o;
  o.preset = "tiny-8b";  // untied lm_head (output.weight) and an unblockable vision MLP (BF16 in the file)
  o.seed = 3;
  o.out_dir = (root / "st").string();
  o.model_files_dir = test::model_files_dir();
  ASSERT_TRUE(make_test_model(o).ok());
  auto src = Model::load(o.out_dir);
  ASSERT_TRUE(src.ok()) << src.status().message();

  for (WeightType t : {WeightType::kQ8_0, WeightType::kF32}) {
    SCOPED_TRACE(weight_type_name(t));
    const WeightTypes types{t, t};
    const std::string out = (root / weight_type_name(t)).string();
    auto path = write_gguf_model(**src, types, out, "tiny8b");
    ASSERT_TRUE(path.ok()) << path.status().message();
    // The files follow llama.cpp's layout.
    auto f = GgufFile::open(*path);
    ASSERT_TRUE(f.ok()) << f.status().message();
    EXPECT_EQ(*f->get_string("general.architecture"), "qwen3vl");
    ASSERT_NE(f->tensor("output.weight"), nullptr);
    EXPECT_EQ(f->tensor("blk.0.attn_q.weight")->type, static_cast<uint32_t>(t == WeightType::kQ8_0 ? GgmlType::kQ8_0 : GgmlType::kF32));
    EXPECT_EQ(f->tensor("blk.0.attn_norm.weight")->type, static_cast<uint32_t>(GgmlType::kF32));
    auto v = GgufFile::open((fs::path(out) / ("mmproj-tiny8b-" + std::string(weight_type_name(t)) + ".gguf")).string());
    ASSERT_TRUE(v.ok()) << v.status().message();
    EXPECT_EQ(*v->get_string("clip.projector_type"), "qwen3vl_merger");
    ASSERT_NE(v->tensor("v.patch_embd.weight.1"), nullptr);
    ASSERT_NE(v->tensor("v.deepstack.4.fc2.weight"), nullptr);  // DeepStack by layer: [1, 2, 4]
    if (t == WeightType::kQ8_0) EXPECT_EQ(v->tensor("v.blk.0.ffn_down.weight")->type, static_cast<uint32_t>(GgmlType::kBF16));

    // Every matrix holds the blocks qvl computes when it quantizes at load (the reference quantizer on the
    // stored values), the token embedding included (llama.cpp quantizes it; qvl keeps it as stored).
    for (const char* name : {"token_embd.weight", "blk.0.attn_q.weight", "output.weight"}) {
      SCOPED_TRACE(name);
      const GgufTensor* g = f->tensor(name);
      ASSERT_NE(g, nullptr);
      const std::string hf = name == std::string("token_embd.weight") ? "model.language_model.embed_tokens.weight"
                             : name == std::string("output.weight") ? "lm_head.weight"
                                                                    : "model.language_model.layers.0.self_attn.q_proj.weight";
      const TensorView* sv = (*src)->checkpoint().find(hf);
      ASSERT_NE(sv, nullptr);
      const int64_t cols = sv->shape[1];
      const Mat m{weight_type_of(sv->dtype), sv->shape[0], cols, sv->data};
      std::vector<float> row(static_cast<size_t>(cols));
      const size_t rb = g->bytes / static_cast<size_t>(sv->shape[0]);
      std::vector<uint8_t> want(rb);
      for (int64_t r = 0; r < std::min<int64_t>(sv->shape[0], 64); ++r) {
        m.row_to_f32(r, row.data());
        if (t == WeightType::kQ8_0) {
          quantize_row_q8_0_ref(row.data(), reinterpret_cast<BlockQ8_0*>(want.data()), cols);
        } else {
          std::memcpy(want.data(), row.data(), rb);
        }
        ASSERT_EQ(std::memcmp(want.data(), g->data + r * rb, rb), 0) << "row " << r;
      }
    }
    auto back = Model::load(out, types);
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(answer(**back).size(), 8u);
    if (t == WeightType::kF32) {  // float: the same model exactly
      auto direct = Model::load(o.out_dir, types);
      ASSERT_TRUE(direct.ok()) << direct.status().message();
      EXPECT_EQ(answer(**back), answer(**direct));
    }
  }
  std::error_code ec;
  fs::remove_all(root, ec);
}

// A tied LM head converted at load shares the embedding table; when that table is memory built at load (a
// GGUF K-quant embedding expanded to float), converting the head must leave it intact (releasing it would
// bring its pages back zeroed).
TEST(GgufModel, ConvertingATiedHeadKeepsAnEmbeddingBuiltAtLoad) {
  std::vector<float> table(64 * 256);  // 64 KB: whole pages inside, which a release would zero
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<float>(i % 17) - 8.0f;
  const std::vector<float> copy = table;
  TextW text;
  text.embed = Mat{WeightType::kF32, 64, 256, table.data()};
  text.lm_head = text.embed;
  VisionW vision;
  ThreadPool pool(1);
  WeightArena arena;
  ASSERT_TRUE(convert_weights(text, vision, WeightTypes{WeightType::kQ8_0, std::nullopt}, pool, arena, nullptr, table.data()).ok());
  EXPECT_EQ(text.lm_head.type, WeightType::kQ8_0);
  EXPECT_EQ(table, copy);
}

}  // namespace
}  // namespace qvl
