// Converting weight matrices at load time to the storage type the user chose (e.g. bf16 -> q4_0), into
// memory the model owns; the checkpoint's mapping is then no longer touched for those matrices.
#include "model/convert.h"

#include "kernels/kernels.h"

namespace qvl {

void narrow_row(const float* in, WeightType type, void* out, int64_t cols) {
  QVL_CHECK(weight_type_traits(type).load_target && "narrow_row: K-quants are bound from GGUF files, not converted to");
  // Q8_0 on the kernel table in use (its fast twin of quantize_row_q8_0_ref); the rest by the reference.
  if (type == WeightType::kQ8_0) return kernels().quantize_q8_0(in, static_cast<BlockQ8_0*>(out), cols);
  weight_type_traits(type).from_f32(in, out, cols);
}

WeightTypes default_weight_types() {
  // q8_0 for both towers: on the 2b preset the text KL divergence to the float path is ~1e-3 against ~0.2
  // for q4_0, and with injected outlier channels (as trained checkpoints have) q8_0 keeps 97% top-1
  // agreement where q4_0 falls apart (BENCHMARKS.md, accuracy table). --text-weights q4_0 halves the
  // text weights' memory and decode bandwidth for that price.
  return WeightTypes{WeightType::kQ8_0, WeightType::kQ8_0};
}

Result<Mat> convert_matrix(const Mat& m, WeightType type, const std::string& name, ThreadPool& pool, WeightArena& arena,
                           bool release_source) {
  if (m.type == type) return m;
  if (is_block32_quant(type) && m.cols % kQK != 0)
    return Status::Error(name + ": " + std::to_string(m.cols) + " columns cannot be split into blocks of " +
                         std::to_string(kQK) + " for " + weight_type_name(type) + "; choose f16 or bf16");
  const size_t rb = row_bytes(type, m.cols);
  // Not zero-filled: the pool's threads write every byte below, so each page is first touched by one of them
  // (on a NUMA machine the matrix spreads over the nodes the threads run on, not all on the loading thread's).
  arena.push_back(std::make_unique_for_overwrite<uint8_t[]>(rb * static_cast<size_t>(m.rows)));
  uint8_t* dst = arena.back().get();
  Mat out{type, m.rows, m.cols, dst};
  if (is_block32_quant(type) && m.rows % 8 == 0) {
    // Groups of 8 rows: quantized into a small buffer, then interleaved into place.
    pool.parallel_for(m.rows / 8, 8, [&](int, int64_t g0, int64_t g1) {
      std::vector<float> row(static_cast<size_t>(m.cols));
      std::vector<uint8_t> rows(8 * rb);
      for (int64_t g = g0; g < g1; ++g) {
        for (int c = 0; c < 8; ++c) {
          row_to_f32(m, 8 * g + c, row.data());
          narrow_row(row.data(), type, rows.data() + c * rb, m.cols);
        }
        interleave8(Mat{type, 8, m.cols, rows.data()}, dst + 8 * rb * static_cast<size_t>(g));
      }
    });
    out.layout = Layout::kInterleaved8;
  } else {
    pool.parallel_for(m.rows, 64, [&](int, int64_t r0, int64_t r1) {
      std::vector<float> row(static_cast<size_t>(m.cols));
      for (int64_t r = r0; r < r1; ++r) {
        row_to_f32(m, r, row.data());
        narrow_row(row.data(), type, dst + rb * static_cast<size_t>(r), m.cols);
      }
    });
  }
  // The source (a view into the checkpoint's mapping, or an earlier conversion) is not read again.
  if (release_source) SafetensorsModel::release(m.data, m.bytes());
  return out;
}

Result<Mat> interleave_matrix(const Mat& m, ThreadPool& pool, WeightArena& arena, bool release_source) {
  if (!is_interleavable(m.type) || m.layout != Layout::kRows || m.rows % 8 != 0) return m;
  arena.push_back(std::make_unique_for_overwrite<uint8_t[]>(m.bytes()));  // first touched by the pool's threads
  uint8_t* dst = arena.back().get();
  const size_t group_bytes = 8 * row_bytes(m.type, m.cols);
  pool.parallel_for(m.rows / 8, 64, [&](int, int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      Mat rows = m;
      rows.rows = 8;
      rows.data = m.row(8 * g);
      interleave8(rows, dst + group_bytes * static_cast<size_t>(g));
    }
  });
  if (release_source) SafetensorsModel::release(m.data, m.bytes());
  Mat out = m;
  out.data = dst;
  out.layout = Layout::kInterleaved8;
  return out;
}

std::vector<std::pair<std::string, Mat*>> convertible_matrices(TextW& text, VisionW& vision, bool with_text,
                                                                bool with_vision) {
  std::vector<std::pair<std::string, Mat*>> out;
  if (with_text) {
    // The LM head first: when tied, converting it reads the whole embedding table (622 MB of bf16 pages
    // in the 2B model), and those pages are best dropped before the rest is converted, not on top of it.
    if (!text.lm_head.empty()) out.emplace_back("lm_head.weight", &text.lm_head);  // empty: an embedding model
    for (size_t i = 0; i < text.layers.size(); ++i) {
      TextLayerW& l = text.layers[i];
      const std::string p = "model.language_model.layers." + std::to_string(i) + ".";
      for (auto [m, n] : {std::pair{&l.q, "self_attn.q_proj"}, {&l.k, "self_attn.k_proj"}, {&l.v, "self_attn.v_proj"},
                          {&l.o, "self_attn.o_proj"}, {&l.gate, "mlp.gate_proj"}, {&l.up, "mlp.up_proj"},
                          {&l.down, "mlp.down_proj"}})
        out.emplace_back(p + n + ".weight", m);
    }
  }
  if (with_vision) {
    out.emplace_back("model.visual.patch_embed.proj.weight", &vision.patch_embed.w);
    for (size_t i = 0; i < vision.blocks.size(); ++i) {
      VisionBlockW& b = vision.blocks[i];
      const std::string p = "model.visual.blocks." + std::to_string(i) + ".";
      for (auto [m, n] : {std::pair{&b.qkv.w, "attn.qkv"}, {&b.proj.w, "attn.proj"}, {&b.fc1.w, "mlp.linear_fc1"},
                          {&b.fc2.w, "mlp.linear_fc2"}})
        out.emplace_back(p + n + ".weight", m);
    }
    out.emplace_back("model.visual.merger.linear_fc1.weight", &vision.merger.fc1.w);
    out.emplace_back("model.visual.merger.linear_fc2.weight", &vision.merger.fc2.w);
    for (size_t j = 0; j < vision.deepstack.size(); ++j) {
      const std::string p = "model.visual.deepstack_merger_list." + std::to_string(j) + ".";
      out.emplace_back(p + "linear_fc1.weight", &vision.deepstack[j].fc1.w);
      out.emplace_back(p + "linear_fc2.weight", &vision.deepstack[j].fc2.w);
    }
  }
  return out;
}

Status convert_weights(TextW& text, VisionW& vision, const WeightTypes& types, ThreadPool& pool, WeightArena& arena,
                       std::vector<std::string>* kept, const void* keep) {
  auto blockable = [&](const Mat& m, WeightType t, const std::string& name) {
    if (!is_block32_quant(t) || m.cols % kQK == 0) return true;
    if (kept) kept->push_back(name);
    return false;
  };
  // A matrix already stored quantized (a `qvl quantize` directory, a GGUF) keeps its values: converting it
  // again could only lose precision; its rows are interleaved for the integer GEMM tiles (a K-quant matrix
  // whose rows are not a multiple of 8 stays in rows: the float path widens it). K-quant matrices are
  // interleaved even in a tower with no type asked for: rows of them have no integer path.
  for (auto& [name, m] : convertible_matrices(text, vision, true, false)) {
    // A tied LM head shares the embedding table, which is still read (row lookups). Pages of a file mapping
    // may go (they are read again from the file); memory `keep` names (a table built at load) must stay.
    const bool release = keep == nullptr || m->data != keep;
    if (is_kquant(m->type) || (types.text && is_block32_quant(m->type))) {
      QVL_ASSIGN_OR_RETURN(*m, interleave_matrix(*m, pool, arena, release));
    } else if (types.text && !is_interleavable(m->type) && blockable(*m, *types.text, name)) {
      QVL_ASSIGN_OR_RETURN(*m, convert_matrix(*m, *types.text, name, pool, arena, release));
    }
  }
  // (A text model loaded without its vision file has no vision matrices.)
  for (auto& [name, m] : convertible_matrices(text, vision, false, !vision.blocks.empty())) {
    if (is_kquant(m->type) || (types.vision && is_block32_quant(m->type))) {
      QVL_ASSIGN_OR_RETURN(*m, interleave_matrix(*m, pool, arena));
    } else if (types.vision && !is_interleavable(m->type) && blockable(*m, *types.vision, name)) {
      QVL_ASSIGN_OR_RETURN(*m, convert_matrix(*m, *types.vision, name, pool, arena));
    }
  }
  return Status::Ok();
}

}  // namespace qvl
