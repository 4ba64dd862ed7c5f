// Fuzz target: reading the weights of a model directory `qvl quantize` wrote — a model.safetensors whose
// quantized matrices are U8 rows of blocks named in the "__metadata__" ("qvl.quantized.<tensor>": q8_0,
// q4_0, q8_0x8, q4_0x8) beside float tensors. The file is bound against a micro configuration (the shapes
// tests/fuzz/make_seeds.py writes) and every bound matrix is multiplied once, reading all its blocks.
#include <cstdint>
#include <filesystem>
#include <vector>

#include "fuzz_util.h"
#include "io/safetensors.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/weights.h"
#include "util/thread_pool.h"

namespace {

// Keep in step with MICRO in make_seeds.py.
qvl::ModelConfig micro_config() {
  qvl::ModelConfig c;
  qvl::VisionConfig& v = c.vision;
  v.depth = 1;
  v.hidden_size = 8;
  v.intermediate_size = 8;
  v.num_heads = 2;
  v.patch_size = 2;
  v.temporal_patch_size = 2;
  v.spatial_merge_size = 2;
  v.in_channels = 3;
  v.out_hidden_size = 32;
  v.num_position_embeddings = 4;
  v.deepstack_visual_indexes = {0};
  qvl::TextConfig& t = c.text;
  t.hidden_size = 32;
  t.intermediate_size = 32;
  t.num_hidden_layers = 1;
  t.num_attention_heads = 2;
  t.num_key_value_heads = 1;
  t.head_dim = 16;
  t.vocab_size = 8;
  t.tie_word_embeddings = true;
  return c;
}

// y = x · Wᵀ with x all ones: reads every byte of w's storage through the kernels.
void multiply(qvl::ThreadPool& pool, const qvl::Mat& w) {
  QVL_CHECK(!w.empty());
  std::vector<float> x(static_cast<size_t>(w.cols), 1.0f), y(static_cast<size_t>(w.rows));
  qvl::matmul(pool, x.data(), 1, w, nullptr, y.data());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const qvl::ModelConfig config = micro_config();
  static qvl::ThreadPool pool(1);
  const std::filesystem::path dir = qvl::fuzz::scratch_dir();
  qvl::fuzz::write_bytes(dir / "model.safetensors", data, size);
  auto file = qvl::SafetensorsModel::open(dir.string());
  if (!file.ok()) return 0;

  auto vision = qvl::bind_vision_weights(*file, config.vision);
  if (vision.ok()) {
    multiply(pool, vision->patch_embed.w);
    for (const auto& b : vision->blocks)
      for (const qvl::LinearW* l : {&b.qkv, &b.proj, &b.fc1, &b.fc2}) multiply(pool, l->w);
    multiply(pool, vision->merger.fc1.w);
    multiply(pool, vision->merger.fc2.w);
    for (const auto& m : vision->deepstack) {
      multiply(pool, m.fc1.w);
      multiply(pool, m.fc2.w);
    }
  } else {
    QVL_CHECK(!vision.status().message().empty());
  }
  auto text = qvl::bind_text_weights(*file, config.text);
  if (text.ok()) {
    multiply(pool, text->embed);
    for (const auto& l : text->layers)
      for (const qvl::Mat* m : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) multiply(pool, *m);
    multiply(pool, text->lm_head);
  } else {
    QVL_CHECK(!text.status().message().empty());
  }
  return 0;
}
