// The server's counters, histograms and gauges, rendered in the Prometheus text format for GET /metrics.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace qvl::server {

// A cumulative histogram with fixed upper bounds (seconds).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size(), 0) {}
  void observe(double value);
  // Appends the _bucket/_sum/_count lines of metric `name` to out. Not thread-safe: the caller locks.
  void render(const std::string& name, std::string& out) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // counts_[i]: observations <= bounds_[i] (non-cumulative here)
  uint64_t count_ = 0;
  double sum_ = 0;
};

// What a finished generation adds to the metrics.
struct GenerationSample {
  int prompt_tokens = 0, image_tokens = 0, generated_tokens = 0;
  int cached_tokens = 0;       // prompt tokens restored from the prefix cache
  int images = 0;
  double ttft_s = -1;          // < 0: no token came
  double duration_s = 0;       // submission to end
  double image_encode_s = -1;  // < 0: no image
  bool ok = true;
};

struct Gauges {
  int queue_depth = 0, busy_slots = 0, slots = 0;
  bool loaded = false;
  bool ready = false, draining = false;  // what /readyz says; SIGTERM received
  std::string kernel_table;              // kernels().name
  // The loaded model's facts (model/model.h ModelFacts), as labels of qvl_model_info; empty model: not loaded.
  std::string model, model_format, text_weights, vision_weights;
  int64_t model_parameters = 0;
  // The scheduler's caches (counters kept by the caches themselves).
  uint64_t image_cache_hits = 0, image_cache_misses = 0, image_cache_evictions = 0, images_encoded = 0;
  size_t image_cache_entries = 0, image_cache_bytes = 0, image_cache_budget = 0;
  uint64_t prefix_cache_lookups = 0, prefix_cache_hits = 0, prefix_cache_reused_tokens = 0, prefix_cache_evictions = 0;
  size_t prefix_cache_entries = 0, prefix_cache_bytes = 0, prefix_cache_budget = 0;
  // Documents' pages: found rendered in the page cache, rendered by a confined worker.
  uint64_t page_cache_hits = 0, pages_rendered = 0;
  size_t page_cache_bytes = 0;
};

class Metrics {
 public:
  Metrics();
  void count_request(const std::string& endpoint, int status);
  void observe(const GenerationSample& s);
  // One scheduler round: prompt tokens read, tokens generated, the answering streams' gaps since their
  // previous token (seconds).
  void observe_round(int64_t prompt_tokens, int64_t generated_tokens, const std::vector<double>& token_gaps_s);
  std::string render(const Gauges& gauges) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t prompt_tokens_ = 0, image_tokens_ = 0, generated_tokens_ = 0, images_ = 0;
  uint64_t generations_ok_ = 0, generations_failed_ = 0, cached_tokens_ = 0;
  uint64_t prompt_read_ = 0, generated_rounds_ = 0;  // from the rounds (as they happen)
  Histogram ttft_, duration_, image_encode_, inter_token_;
  // Tokens per second over the last kWindowS seconds: per-second buckets of (prompt read, generated).
  static constexpr int kWindowS = 10;
  struct Second {
    int64_t at = -1;  // steady-clock second this bucket counts
    uint64_t prompt = 0, generated = 0;
  };
  Second window_[kWindowS];
};

}  // namespace qvl::server
