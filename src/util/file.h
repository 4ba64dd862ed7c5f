// Reading whole files into memory, with errors that name the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/status.h"

namespace qvl {

// Reads a whole file. `max_bytes` guards against reading something huge by mistake.
Result<std::vector<uint8_t>> read_file_bytes(const std::string& path, uint64_t max_bytes = UINT64_MAX);
Result<std::string> read_file_text(const std::string& path, uint64_t max_bytes = UINT64_MAX);
Status write_file_bytes(const std::string& path, const void* data, size_t size);

}  // namespace qvl
