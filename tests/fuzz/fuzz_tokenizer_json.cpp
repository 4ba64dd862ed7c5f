// Fuzz target: read_tokenizer_json (a model directory's tokenizer.json, read as a stream of events) on any
// bytes, against nlohmann's DOM of the same bytes as the oracle. Whatever it accepts, the DOM reads the same:
// the vocabulary (each key once, a repeated one with its last id), the merges in order, the added tokens; a
// refusal says why and names the file; bytes the DOM cannot parse are refused.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto r = qvl::read_tokenizer_json(text, "t/tokenizer.json");
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!r.ok()) {
    QVL_CHECK(r.status().message().rfind("t/tokenizer.json: ", 0) == 0);
    return 0;
  }
  QVL_CHECK_MSG(!j.is_discarded(), "accepted bytes that are not JSON");
  QVL_CHECK(j.is_object());
  const nlohmann::json& model = j.at("model");
  QVL_CHECK(model.is_object() && model.at("type") == "BPE" && r->model_type == "BPE");

  const nlohmann::json& vocab = model.at("vocab");
  QVL_CHECK(vocab.is_object());
  std::map<std::string, int64_t> last;  // the reader's entries: each key once, with its last id
  for (const auto& [key, id] : r->vocab) last[key] = id;
  QVL_CHECK(last.size() == r->vocab.size() && last.size() == vocab.size());
  for (const auto& [key, id] : vocab.items()) {
    QVL_CHECK(id.is_number_integer());
    const auto it = last.find(key);
    QVL_CHECK(it != last.end() && it->second == id.get<int64_t>());
  }

  const nlohmann::json& merges = model.at("merges");
  QVL_CHECK(merges.is_array() && merges.size() == r->merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto& [left, right] = r->merges[i];
    if (merges[i].is_string()) {
      QVL_CHECK(merges[i].get<std::string>() == left + " " + right && !left.empty());
    } else {
      QVL_CHECK(merges[i].is_array() && merges[i].size() == 2);
      QVL_CHECK(merges[i][0] == left && merges[i][1] == right);
    }
  }

  const auto added = j.find("added_tokens");
  if (added == j.end() || added->is_null()) {
    QVL_CHECK(r->added.empty());
    return 0;
  }
  QVL_CHECK(added->is_array() && added->size() == r->added.size());
  for (size_t i = 0; i < added->size(); ++i) {
    const nlohmann::json& a = (*added)[i];
    const qvl::AddedToken& got = r->added[i];
    QVL_CHECK(a.is_object() && a.at("id") == got.id && a.at("content") == got.content);
    QVL_CHECK(got.id >= 0 && got.id <= (1 << 24));
    const auto special = a.find("special");
    QVL_CHECK(got.special == (special != a.end() && *special == true));
  }
  return 0;
}
