// Finds the model's small files that ship with qvl, relative to the running executable.
#include "model/bundled_files.h"

#include <filesystem>
#include <vector>

namespace qvl {

namespace fs = std::filesystem;

Result<std::string> bundled_model_files_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return Status::Error("cannot find the qvl executable's folder (/proc/self/exe: " + ec.message() +
                               "); pass --model-files DIR, a folder with config.json and tokenizer.json");
  const fs::path up = exe.parent_path().parent_path();
  const std::vector<fs::path> candidates = {up / "models" / kBundledModelName,
                                            up / "share" / "qvl" / kBundledModelName};
  std::string looked;
  for (const fs::path& dir : candidates) {
    if (fs::is_regular_file(dir / "config.json", ec) && fs::is_regular_file(dir / "tokenizer.json", ec)) {
      return dir.lexically_normal().string();
    }
    looked += (looked.empty() ? "" : ", ") + dir.lexically_normal().string();
  }
  return Status::Error("the model files that ship with qvl (config.json, tokenizer.json) are not beside the "
                       "executable: looked in " + looked +
                       "; pass --model-files DIR (the repository's models/" + kBundledModelName +
                       ", or any Qwen3-VL model directory)");
}

}  // namespace qvl
