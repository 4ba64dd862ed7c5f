// How the KV cache stores keys and values: float16 (half the memory and reads; the default) or float32
// (exactly what the reference computes; the golden tests use it).
#pragma once

#include <string>

namespace qvl {

enum class KVType { kF32, kF16 };
const char* kv_type_name(KVType t);
// Parses "f16" or "f32"; false otherwise.
bool kv_type_from_name(const std::string& name, KVType* out);

}  // namespace qvl
