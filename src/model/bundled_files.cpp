// The model's small files that ship with qvl, as the pseudo-directory the loaders read.
#include "model/bundled_files.h"

#include "util/builtin_files.h"

namespace qvl {

std::string bundled_model_files() { return std::string(kBuiltinPrefix) + kBundledModelName; }

}  // namespace qvl
