// The structured-output token mask's cost per decode step on the real 151k-token vocabulary, in the states
// an answer spends its time in: before a value, inside a free string, inside a bounded string, inside a
// number, and at a schema object's key. Compare with a decode step (BENCHMARKS.md: ~22 ms at 45 tok/s).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/json_constraint.h"
#include "tokenizer/tokenizer.h"

namespace {

const qvl::Tokenizer& tokenizer() {
  static const qvl::Tokenizer* tok = [] {
    const char* env = std::getenv("QVL_MODEL_FILES_DIR");
    auto r = qvl::Tokenizer::load(env ? env : QVL_MODEL_FILES_DIR);
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", r.status().message().c_str());
      std::exit(1);
    }
    return new qvl::Tokenizer(std::move(r).value());
  }();
  return *tok;
}

std::shared_ptr<const qvl::JsonGrammar> schema() {
  const auto s = nlohmann::ordered_json::parse(R"({"type":"object","properties":{
      "name":{"type":"string"}, "code":{"type":"string","maxLength":8}, "total":{"type":"number"},
      "items":{"type":"array","items":{"type":"object","properties":{"what":{"type":"string"},"price":{"type":"number"}},
               "required":["what","price"],"additionalProperties":false}},
      "paid":{"type":"boolean"}},"required":["name","code","total","items","paid"],"additionalProperties":false})");
  return qvl::JsonGrammar::from_schema(s).value();
}

// Arg: the answer so far (which state the mask is computed in).
void BM_JsonMask(benchmark::State& state) {
  static const char* const kPrefixes[] = {"", "{\"name\": \"Caf", "{\"name\": \"x\", \"code\": \"ab", "{\"name\": \"x\", \"code\": \"a\", \"total\": 12",
                                          "{\"name\": \"x\", \"code\": \"a\", \"total\": 1, \""};
  static const char* const kNames[] = {"before the value", "free string", "string, maxLength 8", "number", "object key"};
  const auto& tok = tokenizer();
  qvl::JsonConstraint c(schema(), tok, {tok.token_id("<|im_end|>")});
  for (int32_t id : tok.encode(kPrefixes[state.range(0)])) c.accept(id);
  std::vector<float> logits(151936, 0.0f);
  for (auto _ : state) {
    c.mask(logits.data(), static_cast<int>(logits.size()));
    benchmark::DoNotOptimize(logits.data());
  }
  int allowed = 0;
  for (uint8_t a : c.allowed()) allowed += a;
  state.SetLabel(std::string(kNames[state.range(0)]) + ", " + std::to_string(allowed) + " tokens allowed");
}
BENCHMARK(BM_JsonMask)->DenseRange(0, 4)->Unit(benchmark::kMillisecond);

}  // namespace
