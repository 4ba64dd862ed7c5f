// Reads generation_config.json the way transformers' GenerationConfig does.
#include "model/generation_config.h"

#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "util/file.h"
#include "util/builtin_files.h"

namespace qvl {

Result<GenerationConfig> GenerationConfig::load(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / "generation_config.json").string();
  if (!model_file_exists(path)) return GenerationConfig{};
  QVL_ASSIGN_OR_RETURN(std::string text, read_model_file(path, 1 << 20));
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::Error(path + ": not a JSON object");

  auto number = [&](const char* key, double absent, double null_value, double* out) -> Status {
    if (!j.contains(key)) {
      *out = absent;
      return Status::Ok();
    }
    const auto& v = j[key];
    if (v.is_null()) {
      *out = null_value;
      return Status::Ok();
    }
    if (!v.is_number()) return Status::Error(path + ": \"" + key + "\" must be a number or null, got " + v.dump());
    *out = v.get<double>();
    if (!std::isfinite(*out)) return Status::Error(path + ": \"" + key + "\" must be finite, got " + v.dump());
    return Status::Ok();
  };
  GenerationConfig g;
  g.do_sample = false;
  if (j.contains("do_sample") && !j["do_sample"].is_null()) {
    if (!j["do_sample"].is_boolean())
      return Status::Error(path + ": \"do_sample\" must be true or false, got " + j["do_sample"].dump());
    g.do_sample = j["do_sample"].get<bool>();
  }
  QVL_RETURN_IF_ERROR(number("temperature", 1.0, 1.0, &g.temperature));
  QVL_RETURN_IF_ERROR(number("top_k", 50.0, 0.0, &g.top_k));
  QVL_RETURN_IF_ERROR(number("top_p", 1.0, 1.0, &g.top_p));
  QVL_RETURN_IF_ERROR(number("min_p", 0.0, 0.0, &g.min_p));
  QVL_RETURN_IF_ERROR(number("repetition_penalty", 1.0, 1.0, &g.repetition_penalty));
  if (g.top_k != std::floor(g.top_k) || g.top_k < -1e9 || g.top_k > 1e9)
    return Status::Error(path + ": \"top_k\" must be a whole number, got " + j["top_k"].dump());
  return g;
}

}  // namespace qvl
