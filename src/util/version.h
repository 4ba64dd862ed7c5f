// What this build of qvl is: its version (git describe at build time) and the compiler that built it.
#pragma once

#include <string>

namespace qvl {

// "0.1.0+a90e606" (the project version and `git describe` of the tree it was built from; the project version
// alone when built outside a git checkout).
const char* version();
// "gcc 12.2.0", "clang 14.0.6".
std::string compiler();

}  // namespace qvl
