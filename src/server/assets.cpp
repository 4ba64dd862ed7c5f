// The web page's files embedded in the binary: for now a placeholder page pointing at the API, until the
// chat page replaces this table behind the same find_asset interface.
#include "server/assets.h"

#include <array>

namespace qvl::server {

namespace {

constexpr std::string_view kIndexHtml = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>qvl</title>
<style>
  body { font: 16px/1.5 system-ui, sans-serif; max-width: 42rem; margin: 3rem auto; padding: 0 1rem; }
  code { background: #f3f3f3; padding: 0 .25rem; border-radius: 3px; }
</style>
</head>
<body>
<h1>qvl</h1>
<p>Qwen3-VL-2B-Instruct on CPUs. The server is up; the chat page is not built in yet.</p>
<p>Status: <code id="status">checking...</code></p>
<ul>
  <li><code>POST /v1/chat/completions</code> &mdash; OpenAI chat completions, with images</li>
  <li><code>POST /api/chat</code>, <code>POST /api/generate</code> &mdash; Ollama</li>
  <li><code>GET /health</code>, <code>GET /metrics</code></li>
</ul>
<p>See <code>docs/API.md</code> for examples.</p>
<script>
fetch("/health").then(r => r.json()).then(j => {
  document.getElementById("status").textContent = j.status + (j.model ? " (" + j.model + ")" : "");
}).catch(() => { document.getElementById("status").textContent = "unreachable"; });
</script>
</body>
</html>
)html";

struct Entry {
  std::string_view path;
  Asset asset;
};

constexpr std::array<Entry, 2> kAssets{{
    {"/", {"text/html; charset=utf-8", kIndexHtml}},
    {"/index.html", {"text/html; charset=utf-8", kIndexHtml}},
}};

}  // namespace

const Asset* find_asset(std::string_view path) {
  for (const Entry& e : kAssets) {
    if (e.path == path) return &e.asset;
  }
  return nullptr;
}

}  // namespace qvl::server
