// The web page's files (src/server/ui/), embedded in the binary at build time, looked up by request path.
#include "server/assets.h"

#include <array>

namespace qvl::server {

namespace {

// kEmbed_index_html, kEmbed_app_js, ...: written by cmake/embed_files.cmake from src/server/ui/
// (CMakeLists.txt regenerates it whenever one of those files changes).
#include "server/ui_files.inc"

struct Entry {
  std::string_view path;
  Asset asset;
};

constexpr std::array<Entry, 9> kAssets{{
    {"/", {"text/html; charset=utf-8", kEmbed_index_html}},
    {"/index.html", {"text/html; charset=utf-8", kEmbed_index_html}},
    {"/app.js", {"text/javascript; charset=utf-8", kEmbed_app_js}},
    {"/render.js", {"text/javascript; charset=utf-8", kEmbed_render_js}},
    {"/conversations.js", {"text/javascript; charset=utf-8", kEmbed_conversations_js}},
    {"/documents.js", {"text/javascript; charset=utf-8", kEmbed_documents_js}},
    {"/style.css", {"text/css; charset=utf-8", kEmbed_style_css}},
    {"/favicon.svg", {"image/svg+xml", kEmbed_favicon_svg}},
    {"/favicon.ico", {"image/svg+xml", kEmbed_favicon_svg}},  // browsers ask for it by this name
}};

}  // namespace

const Asset* find_asset(std::string_view path) {
  for (const Entry& e : kAssets) {
    if (e.path == path) return &e.asset;
  }
  return nullptr;
}

}  // namespace qvl::server
