// The web page's files, embedded in the binary: the server answers GET of a listed path with its bytes.
#pragma once

#include <string_view>

namespace qvl::server {

struct Asset {
  std::string_view content_type;  // e.g. "text/html; charset=utf-8"
  std::string_view data;
};

// The asset served at `path` ("/" is the page itself), or nullptr.
const Asset* find_asset(std::string_view path);

}  // namespace qvl::server
