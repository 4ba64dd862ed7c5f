// The 3-D (temporal, height, width) position ids of interleaved M-RoPE for a prompt with images and
// videos — transformers' Qwen3VLModel.get_rope_index — and the rope delta used by decode steps.
#pragma once

#include <cstdint>
#include <vector>

#include "util/status.h"

namespace qvl {

struct GridTHW {
  int t = 1, h = 0, w = 0;  // in patches, as image_grid_thw
};

struct VisionTokenIds {
  int32_t image_pad = 151655;
  int32_t video_pad = 151656;
  int32_t vision_start = 151652;
};

struct MRopePositions {
  // pos[axis][i] for axis 0 = t, 1 = h, 2 = w and prompt position i.
  std::vector<int32_t> pos[3];
  // max position + 1 - prompt length: a token generated at cache index c has position c + rope_delta.
  int64_t rope_delta = 0;
};

// Fails when the pads in `ids` do not match the grids (count of vision blocks or of pad tokens).
Result<MRopePositions> get_rope_index(const std::vector<int32_t>& ids, const std::vector<GridTHW>& image_grids,
                                      const std::vector<GridTHW>& video_grids, int spatial_merge_size,
                                      const VisionTokenIds& tokens = {});

}  // namespace qvl
