// Reading the preprocessor configs: preprocessor_config.json (images) and video_preprocessor_config.json
// (videos) share the patch geometry, the pixel bounds and the normalisation; one loader reads those for
// both (ImageProcessorConfig::load, VideoProcessorConfig::load), each then reads its own fields.
#pragma once

#include <array>
#include <string>

#include <nlohmann/json.hpp>

#include "model/json_fields.h"
#include "util/status.h"

namespace qvl {

// A processor config file's JSON object: `path` itself, or `path`/`name` where path is a directory (or a
// model built into the binary). `file` is what errors name.
struct ProcessorConfigJson {
  std::string file;
  nlohmann::json json;
};
Result<ProcessorConfigJson> read_processor_config(const std::string& path, const char* name);

// The shared fields into c (any config with patch_size, temporal_patch_size, merge_size, min_pixels,
// max_pixels, image_mean, image_std and rescale_factor); missing ones keep c's values. May throw
// nlohmann::json::exception for a field of the wrong type (the callers catch it with their own fields').
template <class Config>
Status read_shared_processor_fields(const ProcessorConfigJson& in, Config& c) {
  const nlohmann::json& j = in.json;
  QVL_RETURN_IF_ERROR(read_int_field(j, "patch_size", c.patch_size, in.file));
  QVL_RETURN_IF_ERROR(read_int_field(j, "temporal_patch_size", c.temporal_patch_size, in.file));
  QVL_RETURN_IF_ERROR(read_int_field(j, "merge_size", c.merge_size, in.file));
  if (j.contains("size")) {
    QVL_RETURN_IF_ERROR(read_int_field(j["size"], "shortest_edge", c.min_pixels, in.file + ": size"));
    QVL_RETURN_IF_ERROR(read_int_field(j["size"], "longest_edge", c.max_pixels, in.file + ": size"));
  }
  if (j.contains("image_mean")) c.image_mean = j["image_mean"].template get<std::array<float, 3>>();
  if (j.contains("image_std")) c.image_std = j["image_std"].template get<std::array<float, 3>>();
  c.rescale_factor = j.value("rescale_factor", c.rescale_factor);
  return Status::Ok();
}

// Whether the shared fields are usable: positive sizes and 0 < min_pixels <= max_pixels.
template <class Config>
bool shared_processor_fields_valid(const Config& c) {
  return c.patch_size > 0 && c.merge_size > 0 && c.temporal_patch_size > 0 && c.min_pixels > 0 &&
         c.max_pixels >= c.min_pixels;
}

}  // namespace qvl
