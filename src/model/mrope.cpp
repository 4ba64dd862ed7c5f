// The 3-D (temporal, height, width) position ids of interleaved M-RoPE for a prompt with images and
// videos — transformers' Qwen3VLModel.get_rope_index — and the rope delta used by decode steps.
#include "model/mrope.h"

#include <algorithm>

namespace qvl {

Result<MRopePositions> get_rope_index(const std::vector<int32_t>& ids, const std::vector<GridTHW>& image_grids,
                                      const std::vector<GridTHW>& video_grids_in, int spatial_merge_size,
                                      const VisionTokenIds& tok) {
  const int64_t n = static_cast<int64_t>(ids.size());
  MRopePositions out;
  for (auto& p : out.pos) p.reserve(ids.size());
  // video_grid_thw = repeat_interleave(video_grid_thw, t); video_grid_thw[:, 0] = 1 — each frame group
  // is positioned like an image, timestamps in the text separating them.
  std::vector<GridTHW> video_grids;
  for (const GridTHW& g : video_grids_in)
    for (int i = 0; i < g.t; ++i) video_grids.push_back({1, g.h, g.w});

  // vision_tokens = input_ids[vision_start_indices + 1]; count the images and videos they announce.
  int image_nums = 0, video_nums = 0;
  for (int64_t i = 0; i + 1 < n; ++i) {
    if (ids[i] != tok.vision_start) continue;
    image_nums += ids[i + 1] == tok.image_pad;
    video_nums += ids[i + 1] == tok.video_pad;
  }
  if (image_nums != static_cast<int>(image_grids.size()) || video_nums != static_cast<int>(video_grids.size()))
    return Status::Error("prompt announces " + std::to_string(image_nums) + " image(s) and " +
                         std::to_string(video_nums) + " video frame group(s), but " +
                         std::to_string(image_grids.size()) + " image grid(s) and " +
                         std::to_string(video_grids.size()) + " video frame group(s) were given");

  auto index_from = [&](int32_t id, int64_t st) -> int64_t {
    auto it = std::find(ids.begin() + st, ids.end(), id);
    return it == ids.end() ? n + 1 : it - ids.begin();
  };
  auto append_text = [&](int64_t len, int64_t st_idx) {
    for (int64_t i = 0; i < len; ++i)
      for (auto& p : out.pos) p.push_back(static_cast<int32_t>(st_idx + i));
  };
  int64_t max_pos = -1;  // llm_pos_ids_list[-1].max()
  int64_t st = 0;
  int image_index = 0, video_index = 0;
  int remain_images = image_nums, remain_videos = video_nums;
  for (int k = 0; k < image_nums + video_nums; ++k) {
    const int64_t ed_image = remain_images > 0 ? index_from(tok.image_pad, st) : n + 1;
    const int64_t ed_video = remain_videos > 0 ? index_from(tok.video_pad, st) : n + 1;
    GridTHW g;
    int64_t ed;
    int32_t pad;
    if (ed_image < ed_video) {
      g = image_grids[image_index++];
      --remain_images;
      ed = ed_image;
      pad = tok.image_pad;
    } else {
      g = video_grids[video_index++];
      --remain_videos;
      ed = ed_video;
      pad = tok.video_pad;
    }
    if (ed > n) return Status::Error("prompt has fewer vision pad runs than vision blocks");
    const int64_t gt = g.t, gh = g.h / spatial_merge_size, gw = g.w / spatial_merge_size;
    const int64_t count = gt * gh * gw;
    if (ed + count > n || std::any_of(ids.begin() + ed, ids.begin() + ed + count, [&](int32_t id) { return id != pad; }))
      return Status::Error("vision block at token " + std::to_string(ed) + " should have " + std::to_string(count) +
                           " pad tokens for grid " + std::to_string(g.t) + "x" + std::to_string(g.h) + "x" +
                           std::to_string(g.w));
    // text tokens before the block: arange(text_len) + st_idx on all three axes
    const int64_t text_len = ed - st;
    const int64_t st_idx = max_pos + 1;
    append_text(text_len, st_idx);
    // vision tokens: (t, h, w) indices + text_len + st_idx, in t, h, w row-major order
    const int64_t base = text_len + st_idx;
    for (int64_t t = 0; t < gt; ++t)
      for (int64_t r = 0; r < gh; ++r)
        for (int64_t c = 0; c < gw; ++c) {
          out.pos[0].push_back(static_cast<int32_t>(base + t));
          out.pos[1].push_back(static_cast<int32_t>(base + r));
          out.pos[2].push_back(static_cast<int32_t>(base + c));
        }
    max_pos = std::max({text_len > 0 ? st_idx + text_len - 1 : max_pos, base + gt - 1, base + gh - 1, base + gw - 1});
    st = ed + count;
  }
  if (st < n) {
    const int64_t st_idx = max_pos + 1;
    append_text(n - st, st_idx);
    max_pos = st_idx + (n - st) - 1;
  }
  // mrope_position_deltas = llm_positions.max() + 1 - len(input_ids)
  out.rope_delta = image_nums + video_nums == 0 ? 0 : max_pos + 1 - n;
  return out;
}

}  // namespace qvl
