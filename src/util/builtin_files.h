// Files built into the executable (gzip-compressed at build time by cmake/embed_compressed.cmake): the
// model's small files that ship with qvl (config, processor configs, chat templates, tokenizer), so a lone
// copy of the binary needs no folder beside it. A path "builtin:NAME/FILE" names one of them wherever a
// model's small files are read (read_model_file below), so the loaders treat them as a directory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "util/status.h"

namespace qvl {

struct BuiltinFile {
  const char* name;                // "qwen3-vl-2b-instruct/tokenizer.json"
  const unsigned char* gz;         // the gzip stream
  const unsigned char* gz_end;
  size_t size;                     // the file's size, decompressed
};

// "builtin:": the prefix of a path that names a built-in file.
inline constexpr const char* kBuiltinPrefix = "builtin:";

bool is_builtin_path(const std::string& path);
// The built-in files, by name.
std::vector<const BuiltinFile*> builtin_files();
// A built-in file's bytes, decompressed; an error names it and says which files there are.
Result<std::string> read_builtin_file(const std::string& name);

// A model's small file: "builtin:NAME/FILE" from the executable, any other path from the disk (an error
// names the path; `max_bytes` guards against reading something huge by mistake).
Result<std::string> read_model_file(const std::string& path, uint64_t max_bytes = UINT64_MAX);
// True when read_model_file(path) would find a regular file there.
bool model_file_exists(const std::string& path);

}  // namespace qvl
