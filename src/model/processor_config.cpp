// Reading a preprocessor config file's JSON object (model/processor_config.h).
#include "model/processor_config.h"

#include <filesystem>

#include "util/builtin_files.h"

namespace qvl {

Result<ProcessorConfigJson> read_processor_config(const std::string& path, const char* name) {
  ProcessorConfigJson out{path, {}};
  if (is_builtin_path(path) || std::filesystem::is_directory(path)) out.file = (std::filesystem::path(path) / name).string();
  QVL_ASSIGN_OR_RETURN(std::string text, read_model_file(out.file, 1 << 20));
  out.json = nlohmann::json::parse(text, nullptr, false);
  if (out.json.is_discarded() || !out.json.is_object()) return Status::Error(out.file + ": not a JSON object");
  return out;
}

}  // namespace qvl
