// Tokenizer encode throughput (MB/s) on English technical prose and on the multilingual golden strings;
// tools/reference/bench_hf_tokenizer.py measures Hugging Face tokenizers on the very same text.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"
#include "util/file.h"

namespace {

std::string model_dir() {
  const char* env = std::getenv("QVL_MODEL_FILES_DIR");
  return env ? env : QVL_MODEL_FILES_DIR;
}

const qvl::Tokenizer& tokenizer() {
  static const qvl::Tokenizer* tok = [] {
    auto r = qvl::Tokenizer::load(model_dir());
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", r.status().message().c_str());
      std::exit(1);
    }
    return new qvl::Tokenizer(std::move(r).value());
  }();
  return *tok;
}

// The same texts as bench_hf_tokenizer.py: bench/data/english.md (English + tables + code, ~60 KB), and the golden
// strings joined by newlines (CJK, Arabic, emoji, code, long runs).
const std::string& text(int which) {
  static const std::string english = [] {
    auto t = qvl::read_file_text(std::string(QVL_SOURCE_DIR) + "/bench/data/english.md");
    return t.ok() ? *t : std::string();
  }();
  static const std::string multilingual = [] {
    auto t = qvl::read_file_text(std::string(QVL_SOURCE_DIR) + "/tests/data/tokenizer_golden.json");
    std::string out;
    if (!t.ok()) return out;
    const nlohmann::json golden = nlohmann::json::parse(*t);
    for (const auto& c : golden["cases"]) out += c["text"].get<std::string>() + "\n";
    return out;
  }();
  return which == 0 ? english : multilingual;
}

void BM_Encode(benchmark::State& state) {
  const qvl::Tokenizer& tok = tokenizer();
  const std::string& t = text(static_cast<int>(state.range(0)));
  if (t.empty()) {
    state.SkipWithError("benchmark text not found");
    return;
  }
  size_t n_tokens = 0;
  for (auto _ : state) {
    auto ids = tok.encode(t);
    n_tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(t.size()));
  state.counters["tokens"] = static_cast<double>(n_tokens);
  state.SetLabel(state.range(0) == 0 ? "english MODEL.md" : "multilingual goldens");
}
BENCHMARK(BM_Encode)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_Load(benchmark::State& state) {
  for (auto _ : state) {
    auto r = qvl::Tokenizer::load(model_dir());
    benchmark::DoNotOptimize(r.ok());
  }
}
BENCHMARK(BM_Load)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

