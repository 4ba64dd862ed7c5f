// qvl_accuracy: the error each weight storage type adds against the float32 path (weights as stored,
// computed in float32), on one image prompt: vision-embedding cosine similarity, KL divergence of the
// next-token distributions, and top-1 agreement over 64 greedy tokens (teacher-forced on the reference
// continuation). --stress multiplies a few channels of every RMSNorm weight, making the large-magnitude
// activation channels that trained checkpoints have, to show what per-block activation scales buy.
//
// GGUF configs measure llama.cpp's file types: "gguf:q4_k_m" writes the model as a GGUF pair with that text
// type (qvl quantize --format gguf; vision f32) and runs it as qvl runs such a file: its K-quant matrices
// through the K-quant GEMM tiles (integer products on 8-bit activations, as for q8_0 and q4_0).
//
// "attention:bf16" (alone or with weight types: vision:q8_0+attention:bf16) runs the vision tower's attention
// in bf16 (--vision-attention bf16; f32 where the CPU has no AVX512_BF16, and the label says so).
//
// usage: qvl_accuracy --model DIR --image FILE [--tokens N] [--threads N] [--stress]
//                     [--configs text:q4_0,gguf:q6_k,gguf:q4_k_m,attention:bf16,...]
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <cstdio>
#include <string>
#include <vector>

#include <unistd.h>

#include "engine/generate.h"
#include "engine/prompt.h"
#include "kernels/attention.h"
#include "model/gguf_export.h"
#include "model/mrope.h"
#include "model/text.h"
#include "model/vision.h"
#include "util/cpu_budget.h"

using namespace qvl;

namespace {

struct Config {
  std::string label;
  WeightTypes types;
  std::string gguf;  // a GGUF text type to write the model as first ("" for none)
  AttentionPrecision attention = AttentionPrecision::kF32;
};

// max |a - b| / max |a| over n values.
double max_rel_error(const float* a, const float* b, size_t n) {
  double mx = 0, diff = 0;
  for (size_t i = 0; i < n; ++i) {
    mx = std::max(mx, std::abs(double{a[i]}));
    diff = std::max(diff, std::abs(double{a[i]} - b[i]));
  }
  return mx > 0 ? diff / mx : diff;
}

struct Outputs {
  std::vector<float> vision;  // image embeddings
  std::vector<float> logits;  // [positions, vocab] for the scored positions
};

int64_t argmax(const float* x, int64_t n) {
  int64_t b = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[b]) b = i;
  return b;
}

// Runs the prompt plus `continuation` in one pass; returns the image embeddings and the logits of the last
// prompt position and every continuation position.
Outputs run(const Model& model, ThreadPool& pool, const std::vector<int32_t>& ids, const MRopePositions& pos,
            const std::vector<PreprocessedImage>& pre, const std::vector<int32_t>& continuation) {
  Outputs out;
  std::vector<const PreprocessedImage*> ptrs;
  for (const auto& p : pre) ptrs.push_back(&p);
  VisionOutput vis = encode_images(model, pool, ptrs);
  out.vision = vis.embeds;
  VisualInputs visual{vis.embeds.data(), {}, vis.n_tokens};
  for (const auto& d : vis.deepstack) visual.deepstack.push_back(d.data());
  std::vector<int32_t> all = ids;
  all.insert(all.end(), continuation.begin(), continuation.end());
  std::vector<int32_t> p[3];
  const int64_t n_prompt = static_cast<int64_t>(ids.size()), n = static_cast<int64_t>(all.size());
  for (int a = 0; a < 3; ++a) {
    p[a] = pos.pos[a];
    for (int64_t i = n_prompt; i < n; ++i) p[a].push_back(static_cast<int32_t>(i + pos.rope_delta));
  }
  const int32_t* p3[3] = {p[0].data(), p[1].data(), p[2].data()};
  const int64_t V = model.config().text.vocab_size;
  KVCache cache(model.config().text, n);
  std::vector<float> logits(static_cast<size_t>(n * V));
  text_forward(model, pool, cache, all.data(), n, p3, &visual, LogitsMode::kAll, logits.data());
  out.logits.assign(logits.begin() + (n_prompt - 1) * V, logits.end());
  return out;
}

double kl(const float* p_logits, const float* q_logits, int64_t n) {
  // KL(P || Q) with P, Q the softmaxes, in double.
  double mp = p_logits[0], mq = q_logits[0];
  for (int64_t i = 1; i < n; ++i) mp = std::max<double>(mp, p_logits[i]), mq = std::max<double>(mq, q_logits[i]);
  double zp = 0, zq = 0;
  for (int64_t i = 0; i < n; ++i) zp += std::exp(p_logits[i] - mp), zq += std::exp(q_logits[i] - mq);
  const double lzp = std::log(zp) + mp, lzq = std::log(zq) + mq;
  double s = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double lp = p_logits[i] - lzp, lq = q_logits[i] - lzq;
    s += std::exp(lp) * (lp - lq);
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir, image_path, configs_arg = "text:q8_0,text:q4_0,vision:q8_0,vision:q4_0,text:q4_0+vision:q8_0";
  int tokens = 64, threads = default_threads();
  bool stress = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--model") model_dir = next();
    else if (a == "--image") image_path = next();
    else if (a == "--tokens") tokens = std::stoi(next());
    else if (a == "--threads") threads = std::stoi(next());
    else if (a == "--configs") configs_arg = next();
    else if (a == "--stress") stress = true;
    else {
      std::fprintf(stderr, "usage: qvl_accuracy --model DIR --image FILE [--tokens N] [--threads N] [--stress] "
                           "[--configs text:q4_0+vision:q8_0,...]\n");
      return 2;
    }
  }
  std::vector<Config> configs{{"float32 path (reference)", {}, "", AttentionPrecision::kF32}};
  for (size_t s = 0; s < configs_arg.size();) {
    size_t e = configs_arg.find(',', s);
    if (e == std::string::npos) e = configs_arg.size();
    const std::string item = configs_arg.substr(s, e - s);
    Config c{item, {}, "", AttentionPrecision::kF32};
    if (item.rfind("gguf:", 0) == 0) {
      c.gguf = item.substr(5);
      if (!is_gguf_write_type(c.gguf)) {
        std::fprintf(stderr, "bad config '%s' (gguf:<%s>)\n", item.c_str(), gguf_write_type_list());
        return 2;
      }
      c.types = WeightTypes{WeightType::kF32, WeightType::kF32};
      configs.push_back(c);
      s = e + 1;
      continue;
    }
    for (size_t t = 0; t < item.size();) {
      size_t f = item.find('+', t);
      if (f == std::string::npos) f = item.size();
      const std::string part = item.substr(t, f - t);
      const size_t colon = part.find(':');
      if (colon != std::string::npos && part.substr(0, colon) == "attention") {
        if (!parse_attention_precision(part.substr(colon + 1), &c.attention)) {
          std::fprintf(stderr, "bad config '%s' (attention:f32 or attention:bf16)\n", part.c_str());
          return 2;
        }
        if (effective_attention_precision(c.attention) != c.attention) c.label += " (ran as f32: no AVX512_BF16)";
        t = f + 1;
        continue;
      }
      WeightType wt;
      if (colon == std::string::npos || !weight_type_from_name(part.substr(colon + 1), &wt)) {
        std::fprintf(stderr, "bad config '%s'\n", part.c_str());
        return 2;
      }
      (part.substr(0, colon) == "text" ? c.types.text : c.types.vision) = wt;
      t = f + 1;
    }
    configs.push_back(c);
    s = e + 1;
  }
  auto image = load_image_file(image_path);
  if (!image.ok()) {
    std::fprintf(stderr, "%s\n", image.status().message().c_str());
    return 1;
  }
  ThreadPool pool(threads);
  std::vector<int32_t> ids, continuation;
  MRopePositions pos;
  std::vector<PreprocessedImage> pre;
  Outputs ref;
  std::printf("| config | vision cosine | vision max error | logits max error at prompt end | KL at prompt end | mean KL over "
              "%d tokens | top-1 agreement |\n|---|---|---|---|---|---|---|\n",
              tokens);
  const std::string scratch = (std::filesystem::temp_directory_path() / ("qvl-accuracy-" + std::to_string(::getpid()))).string();
  for (size_t ci = 0; ci < configs.size(); ++ci) {
    std::string load_from = model_dir;
    if (!configs[ci].gguf.empty()) {
      // The file the config names, written from the float checkpoint (vision in f32: the text type alone).
      auto src = Model::load(model_dir, WeightTypes{}, threads);
      if (!src.ok()) {
        std::fprintf(stderr, "%s\n", src.status().message().c_str());
        return 1;
      }
      GgufWriteTypes w;
      w.text = configs[ci].gguf;
      w.vision = "f32";
      std::error_code ec;
      std::filesystem::remove_all(scratch, ec);
      auto path = write_gguf_model(**src, w, scratch, "acc");
      if (!path.ok()) {
        std::fprintf(stderr, "%s\n", path.status().message().c_str());
        return 1;
      }
      load_from = *path;
    }
    auto loaded = Model::load(load_from, configs[ci].types, threads);
    if (!loaded.ok()) {
      std::fprintf(stderr, "%s\n", loaded.status().message().c_str());
      return 1;
    }
    Model& model = **loaded;
    model.set_vision_attention(configs[ci].attention);
    if (stress) model.inject_outlier_channels(/*count=*/4, /*scale=*/64.0f);
    if (ci == 0) {
      // The reference continuation: greedy tokens of the float32 path.
      const ChatMessage user = user_message(1, "Describe this image.");
      GenerateOptions g;
      g.sampling.temperature = 0;
      g.max_tokens = tokens;
      g.ignore_eos = true;
      auto r = generate(model, pool, {user}, {*image}, g);
      if (!r.ok()) {
        std::fprintf(stderr, "%s\n", r.status().message().c_str());
        return 1;
      }
      continuation = r->tokens;
      auto p = preprocess_image(*image, model.image_config());
      pre.push_back(std::move(p).value());
      ids = *build_prompt_ids(model.tokenizer(), render_chat_with_spans({user}), {pre[0].num_tokens()});
      pos = *get_rope_index(ids, {{pre[0].grid_t, pre[0].grid_h, pre[0].grid_w}}, {}, model.config().vision.spatial_merge_size);
      ref = run(model, pool, ids, pos, pre, continuation);
      std::printf("| %s | 1 | 0 | 0 | 0 | 0 | 100%% |\n", configs[ci].label.c_str());
      std::fflush(stdout);
      continue;
    }
    Outputs o = run(model, pool, ids, pos, pre, continuation);
    double dot = 0, na = 0, nb = 0;
    for (size_t i = 0; i < ref.vision.size(); ++i)
      dot += double{ref.vision[i]} * o.vision[i], na += double{ref.vision[i]} * ref.vision[i], nb += double{o.vision[i]} * o.vision[i];
    const int64_t V = model.config().text.vocab_size, steps = static_cast<int64_t>(continuation.size());
    double kl_sum = 0;
    int agree = 0;
    for (int64_t s = 0; s < steps; ++s) {
      const float* a = &ref.logits[static_cast<size_t>(s * V)];
      const float* b = &o.logits[static_cast<size_t>(s * V)];
      kl_sum += kl(a, b, V);
      agree += argmax(a, V) == argmax(b, V);
    }
    std::printf("| %s | %.6f | %.2e | %.2e | %.2e | %.2e | %.1f%% |\n", configs[ci].label.c_str(), dot / std::sqrt(na * nb),
                max_rel_error(ref.vision.data(), o.vision.data(), ref.vision.size()),
                max_rel_error(ref.logits.data(), o.logits.data(), static_cast<size_t>(V)),
                kl(ref.logits.data(), o.logits.data(), V), kl_sum / std::max<int64_t>(1, steps),
                100.0 * agree / std::max<int64_t>(1, steps));
    std::fflush(stdout);
  }
  std::error_code ec;
  std::filesystem::remove_all(scratch, ec);
  return 0;
}
