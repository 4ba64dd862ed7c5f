// Fuzz target: structured output's schema compiler and byte acceptor. The first line is a JSON schema,
// read as a request body is (the JSON limits, then the parser); "json" instead means any object. The rest is
// an answer fed byte by byte. Nothing may throw out; a refused schema says why; an answer the acceptor takes
// whole and calls complete must parse as JSON (nlohmann's parser, independently); undoing to any earlier
// byte and feeding the rest again gives the same verdicts.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/json_grammar.h"
#include "server/api.h"
#include "util/status.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nl = in.find('\n');
  if (nl == std::string_view::npos) return 0;
  const std::string_view head = in.substr(0, nl), answer = in.substr(nl + 1);
  std::shared_ptr<const qvl::JsonGrammar> g;
  if (head == "json") {
    g = qvl::JsonGrammar::any_object();
  } else {
    auto body = qvl::server::parse_json_text(std::string(head));
    if (!body.ok()) return 0;
    auto c = qvl::JsonGrammar::from_schema(*body);
    if (!c.ok()) {
      QVL_CHECK(!c.status().message().empty());
      return 0;
    }
    g = *c;
  }
  qvl::JsonAcceptor a(g);
  a.set_logging(true);
  std::vector<size_t> marks;
  std::vector<bool> verdicts;
  size_t taken = 0;
  for (char ch : answer) {
    marks.push_back(a.mark());
    const bool ok = a.feed(static_cast<uint8_t>(ch));
    verdicts.push_back(ok);
    if (!ok) break;
    ++taken;
  }
  if (taken == answer.size() && a.accepting()) {
    const auto v = nlohmann::json::parse(answer, nullptr, /*allow_exceptions=*/false);
    QVL_CHECK_MSG(!v.is_discarded(), "the acceptor took an answer that is not JSON");
  }
  // Back to the middle, then the same bytes again: the same verdicts.
  if (!marks.empty()) {
    const size_t k = marks.size() / 2;
    a.undo_to(marks[k]);
    for (size_t i = k; i < verdicts.size(); ++i) {
      const bool ok = a.feed(static_cast<uint8_t>(answer[i]));
      QVL_CHECK_MSG(ok == verdicts[i], "undo did not restore the state");
      if (!ok) break;
    }
  }
  return 0;
}
