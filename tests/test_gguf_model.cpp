// `qvl quantize --format gguf` and back: the tiny model written as llama.cpp's GGUF pair holds the blocks qvl
// computes at load (q8_0) or the stored values (f32), loads again, and in f32 answers exactly as the source.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "engine/generate.h"
#include "engine/session.h"
#include "io/gguf.h"
#include "io/image.h"
#include "model/gguf_export.h"
#include "model/test_model.h"
#include "tensor/quant.h"
#include "test_paths.h"
#include "util/file.h"
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
        row_to_f32(m, r, row.data());
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
    EXPECT_FALSE((*back)->tokenizer_from_gguf());  // the tokenizer.json copied beside the files
    // Without tokenizer.json beside the files the tokenizer comes from the GGUF's metadata, and gives
    // transformers' ids on every tokenizer golden, in both modes, and the same decoded text.
    fs::remove(fs::path(out) / "tokenizer.json");
    auto meta = Model::load(out, types);
    ASSERT_TRUE(meta.ok()) << meta.status().message();
    EXPECT_TRUE((*meta)->tokenizer_from_gguf());
    EXPECT_EQ(answer(**meta), answer(**back));
    {
      const Tokenizer& tok = (*meta)->tokenizer();
      EXPECT_EQ(tok.vocab_size(), (*src)->tokenizer().vocab_size());
      auto text = read_file_text(test::data_dir() + "/tokenizer_golden.json");
      ASSERT_TRUE(text.ok());
      const auto golden = nlohmann::json::parse(*text);
      int checked = 0;
      for (const auto& c : golden["cases"]) {
        const std::string s = c["text"];
        ASSERT_EQ(tok.encode(s, true), c["ids"].get<std::vector<int32_t>>()) << s;
        ASSERT_EQ(tok.encode(s, false), c["ids_user"].get<std::vector<int32_t>>()) << s;
        ASSERT_EQ(tok.decode(c["ids"].get<std::vector<int32_t>>()), c["decoded"].get<std::string>()) << s;
        ++checked;
      }
      EXPECT_GT(checked, 1000);
      EXPECT_EQ((*meta)->chat_template(), (*src)->chat_template());
    }
    if (t == WeightType::kF32) {  // float: the same model exactly
      auto direct = Model::load(o.out_dir, types);
      ASSERT_TRUE(direct.ok()) << direct.status().message();
      EXPECT_EQ(answer(**back), answer(**direct));
    }
  }
  std::error_code ec;
  fs::remove_all(root, ec);
}

// llama.cpp's converter marks an added token CONTROL when it is special or looks special (<|...|>), so
// Qwen's non-special <|fim_prefix|> family arrives as CONTROL: the tokenizer built from such metadata still
// gives HF's ids on every golden (those tokens matched in user text too, as HF matches them).
TEST(GgufModel, TokenizerFromLlamaCppStyleMetadataMatchesHf) {
  auto text = read_file_text(test::model_files_dir() + "/tokenizer.json", 1ull << 30);
  ASSERT_TRUE(text.ok());
  const auto j = nlohmann::json::parse(*text);
  std::vector<std::string> tokens(151936);
  std::vector<int64_t> types(tokens.size(), 5);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = "[PAD" + std::to_string(i) + "]";
  for (const auto& [t, id] : j["model"]["vocab"].items()) {
    tokens[id.get<size_t>()] = t;
    types[id.get<size_t>()] = 1;
  }
  int control_looking = 0;
  for (const auto& a : j["added_tokens"]) {
    const std::string c = a["content"];
    const bool looks = c.size() > 4 && c.rfind("<|", 0) == 0 && c.compare(c.size() - 2, 2, "|>") == 0;
    control_looking += looks && !a["special"].get<bool>();
    tokens[a["id"].get<size_t>()] = c;
    types[a["id"].get<size_t>()] = a["special"].get<bool>() || looks ? 3 : 4;
  }
  EXPECT_EQ(control_looking, 6);
  std::vector<std::string> merges;
  for (const auto& m : j["model"]["merges"])
    merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
  auto tok = Tokenizer::from_gguf(tokens, types, merges, "llama.cpp-style metadata");
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  auto golden_text = read_file_text(test::data_dir() + "/tokenizer_golden.json");
  ASSERT_TRUE(golden_text.ok());
  const auto golden = nlohmann::json::parse(*golden_text);
  for (const auto& c : golden["cases"]) {
    const std::string str = c["text"];
    ASSERT_EQ(tok->encode(str, true), c["ids"].get<std::vector<int32_t>>()) << str;
    ASSERT_EQ(tok->encode(str, false), c["ids_user"].get<std::vector<int32_t>>()) << str;
  }
  EXPECT_EQ(tok->encode("<|fim_prefix|>", false).size(), 1u) << "matched in user text, as HF does";
  EXPECT_GT(tok->encode("<|im_start|>", false).size(), 1u) << "a special token stays text in user text";
}

// A GGUF with K-quant matrices (q4_k_m: Q4_K, Q6_K where llama-quantize puts more bits, Q8_0 where a row is
// not whole super-blocks): each K-quant matrix keeps the file's super-blocks (interleaved by 8 rows, read
// back exactly as ggml dequantizes them) and is multiplied by the K-quant GEMM tiles; the answers stay close to the
// float model's, closer than with 4-bit blocks of 32 in every matrix.
TEST(GgufModel, KQuantMatricesAreBoundAsStored) {
  const fs::path root = fs::temp_directory_path() / ("qvl-test-gguf-kquant-" + std::to_string(::getpid()));
  TestModelOptions o;
  o.preset = "tiny";  // intermediate 256: the ffn_down rows are whole super-blocks; the 128-wide ones are not
  o.seed = 5;
  o.out_dir = (root / "st").string();
  o.model_files_dir = test::model_files_dir();
  ASSERT_TRUE(make_test_model(o).ok());
  auto src = Model::load(o.out_dir);
  ASSERT_TRUE(src.ok()) << src.status().message();
  GgufWriteTypes w;
  w.text = "q4_k_m";
  w.vision = "q8_0";
  const std::string out = (root / "q4_k_m").string();
  // Into the model's own directory: refused before any file is written.
  const size_t files_before = std::distance(std::filesystem::directory_iterator(o.out_dir), std::filesystem::directory_iterator());
  auto own = write_gguf_model(**src, w, o.out_dir, "tiny");
  ASSERT_FALSE(own.ok());
  EXPECT_NE(own.status().message().find("the model's own directory"), std::string::npos) << own.status().message();
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(o.out_dir), std::filesystem::directory_iterator()),
            static_cast<std::ptrdiff_t>(files_before));
  auto path = write_gguf_model(**src, w, out, "tiny");
  ASSERT_TRUE(path.ok()) << path.status().message();
  auto f = GgufFile::open(*path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  // 4 layers: use_more_bits holds for layers 2 (every third) and 3 (the last eighth).
  EXPECT_EQ(f->tensor("blk.0.ffn_down.weight")->type, static_cast<uint32_t>(GgmlType::kQ4_K));
  EXPECT_EQ(f->tensor("blk.1.ffn_down.weight")->type, static_cast<uint32_t>(GgmlType::kQ4_K));
  EXPECT_EQ(f->tensor("blk.2.ffn_down.weight")->type, static_cast<uint32_t>(GgmlType::kQ6_K));
  EXPECT_EQ(f->tensor("blk.3.ffn_down.weight")->type, static_cast<uint32_t>(GgmlType::kQ6_K));
  EXPECT_EQ(f->tensor("blk.0.attn_q.weight")->type, static_cast<uint32_t>(GgmlType::kQ8_0));  // 128 columns
  EXPECT_EQ(*f->get_uint("general.file_type"), 15u);  // LLAMA_FTYPE_MOSTLY_Q4_K_M

  const WeightTypes f32{WeightType::kF32, WeightType::kF32};
  auto back = Model::load(out, f32);
  ASSERT_TRUE(back.ok()) << back.status().message();
  for (int layer : {0, 2}) {
    SCOPED_TRACE(layer);
    const GgufTensor* g = f->tensor("blk." + std::to_string(layer) + ".ffn_down.weight");
    const Mat& m = (*back)->text().layers[static_cast<size_t>(layer)].down;
    ASSERT_EQ(m.type, layer == 0 ? WeightType::kQ4_K : WeightType::kQ6_K);
    const int64_t cols = g->ne[0], rows = g->numel() / cols;
    ASSERT_EQ(m.rows, rows);
    // The file's super-blocks, interleaved by 8 rows for the GEMM tiles (the same bytes, moved).
    ASSERT_EQ(m.bytes(), g->bytes);
    EXPECT_EQ(m.layout, Layout::kInterleaved8);
    std::vector<float> want(static_cast<size_t>(cols)), got(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_TRUE(gguf_dequantize_row(g->type, g->data + r * (g->bytes / rows), want.data(), cols).ok());
      row_to_f32(m, r, got.data());
      ASSERT_EQ(want, got) << "row " << r;
    }
  }
  // Loaded with the default types, the K-quant matrices stay as stored, and it answers; its last-token
  // logits stay near the float model's.
  auto q8 = Model::load(out);
  ASSERT_TRUE(q8.ok()) << q8.status().message();
  EXPECT_EQ((*q8)->text().layers[0].down.type, WeightType::kQ4_K);
  EXPECT_EQ(answer(**q8).size(), 8u);
  auto direct = Model::load(o.out_dir, f32);
  ASSERT_TRUE(direct.ok());
  auto last_logits = [](const Model& m) {
    ThreadPool pool(2);
    Session s(m);
    GenerateOptions g;
    g.max_tokens = 1;
    EXPECT_TRUE(s.start(pool, {user_message(0, "What is the capital of France?")}, {}, g).ok());
    return s.logits();
  };
  // The yardstick: the same model with every text matrix in q4_0 (qvl's 4-bit type, integer products).
  auto q4 = Model::load(o.out_dir, WeightTypes{WeightType::kQ4_0, WeightType::kF32});
  ASSERT_TRUE(q4.ok());
  const std::vector<float> a = last_logits(**back), b = last_logits(**direct), c = last_logits(**q4);
  double diff = 0, diff_q4 = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    diff_q4 = std::max(diff_q4, std::fabs(static_cast<double>(c[i]) - b[i]));
    ref = std::max(ref, std::fabs(static_cast<double>(b[i])));
  }
  std::printf("[gguf] last-token logits against the float model (max %.3g): q4_k_m ffn_down (K-quant kernels) %.3g, "
              "q4_0 everywhere %.3g\n", ref, diff, diff_q4);
  EXPECT_GT(diff, 0.0);      // the K-quant matrices changed something
  EXPECT_LT(diff, diff_q4);  // ... less than 4-bit blocks of 32 in every matrix do
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
