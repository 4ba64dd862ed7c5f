// Fuzz target: ModelConfig::parse on any bytes (a model directory's config.json). A configuration it
// accepts must be structurally sound, as the model code assumes without checking again.
#include <cstdint>
#include <string>

#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto c = qvl::ModelConfig::parse(std::string(reinterpret_cast<const char*>(data), size), "config.json");
  if (!c.ok()) {
    QVL_CHECK(!c.status().message().empty());
    return 0;
  }
  const qvl::VisionConfig& v = c->vision;
  const qvl::TextConfig& t = c->text;
  QVL_CHECK(v.depth > 0 && v.hidden_size > 0 && v.num_heads > 0 && v.hidden_size % v.num_heads == 0);
  QVL_CHECK(v.patch_size > 0 && v.temporal_patch_size > 0 && v.spatial_merge_size > 0 && v.in_channels > 0);
  for (int i : v.deepstack_visual_indexes) QVL_CHECK(i >= 0 && i < v.depth);
  QVL_CHECK(t.hidden_size > 0 && t.num_hidden_layers > 0 && t.vocab_size > 0 && t.head_dim > 0);
  QVL_CHECK(t.num_attention_heads > 0 && t.num_key_value_heads > 0 && t.num_attention_heads % t.num_key_value_heads == 0);
  QVL_CHECK(int64_t{t.mrope_section[0]} + t.mrope_section[1] + t.mrope_section[2] == t.head_dim / 2);
  return 0;
}
