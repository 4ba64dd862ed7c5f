// Undoes a request body's Content-Encoding (gzip or deflate) without ever holding more than a limit.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace qvl::server::http {

enum class InflateResult { kOk, kTooLarge, kCorrupt };

// Inflates a gzip or zlib-wrapped ("deflate") stream into `out`; stops with kTooLarge as soon as the output
// passes `limit` bytes, so a small compressed body cannot expand into a large allocation.
InflateResult inflate_body(std::string_view in, size_t limit, std::string& out);

}  // namespace qvl::server::http
