// The server's counters, histograms and gauges, rendered in the Prometheus text format for GET /metrics.
#include "server/metrics.h"

#include <chrono>
#include <cstdio>

namespace qvl::server {

namespace {

// A Prometheus label value: backslash, double quote and newline escaped.
std::string label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void sample(std::string& out, const std::string& name, double value) {
  out += name + ' ' + number(value) + '\n';
}

}  // namespace

void Histogram::observe(double value) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (value <= bounds_[i]) {
      ++counts_[i];
      break;
    }
  }
  ++count_;
  sum_ += value;
}

void Histogram::render(const std::string& name, std::string& out) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += name + "_bucket{le=\"" + number(bounds_[i]) + "\"} " + std::to_string(cumulative) + '\n';
  }
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + '\n';
  out += name + "_sum " + number(sum_) + '\n';
  out += name + "_count " + std::to_string(count_) + '\n';
}

// Buckets span what a CPU sees: tens of milliseconds for a short text prompt on the tiny model, minutes for
// several large images on the 2B model.
Metrics::Metrics()
    : ttft_({0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}),
      duration_({0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}),
      image_encode_({0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      inter_token_({0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.5, 1, 1.5, 2.5, 5}) {}

namespace {
int64_t steady_second() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

void Metrics::observe_round(int64_t prompt_tokens, int64_t generated_tokens, const std::vector<double>& token_gaps_s) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_read_ += static_cast<uint64_t>(prompt_tokens);
  generated_rounds_ += static_cast<uint64_t>(generated_tokens);
  for (double g : token_gaps_s) inter_token_.observe(g);
  const int64_t now = steady_second();
  Second& b = window_[now % kWindowS];
  if (b.at != now) b = Second{now, 0, 0};
  b.prompt += static_cast<uint64_t>(prompt_tokens);
  b.generated += static_cast<uint64_t>(generated_tokens);
}

void Metrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{endpoint, status}];
}

void Metrics::observe(const GenerationSample& s) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_tokens_ += static_cast<uint64_t>(s.prompt_tokens);
  image_tokens_ += static_cast<uint64_t>(s.image_tokens);
  cached_tokens_ += static_cast<uint64_t>(s.cached_tokens);
  generated_tokens_ += static_cast<uint64_t>(s.generated_tokens);
  images_ += static_cast<uint64_t>(s.images);
  ++(s.ok ? generations_ok_ : generations_failed_);
  if (s.ttft_s >= 0) ttft_.observe(s.ttft_s);
  duration_.observe(s.duration_s);
  if (s.image_encode_s >= 0) image_encode_.observe(s.image_encode_s);
}

std::string Metrics::render(const Gauges& g) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  header(out, "qvl_requests_total", "counter", "HTTP requests answered, by endpoint and status code.");
  for (const auto& [key, n] : requests_) {
    out += "qvl_requests_total{endpoint=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"} " +
           std::to_string(n) + '\n';
  }
  header(out, "qvl_generations_total", "counter", "Generations finished, by outcome.");
  out += "qvl_generations_total{outcome=\"ok\"} " + std::to_string(generations_ok_) + '\n';
  out += "qvl_generations_total{outcome=\"error\"} " + std::to_string(generations_failed_) + '\n';
  header(out, "qvl_prompt_tokens_total", "counter", "Prompt tokens read (image tokens included).");
  sample(out, "qvl_prompt_tokens_total", static_cast<double>(prompt_tokens_));
  header(out, "qvl_image_tokens_total", "counter", "Image tokens in prompts.");
  sample(out, "qvl_image_tokens_total", static_cast<double>(image_tokens_));
  header(out, "qvl_images_total", "counter", "Images received in requests.");
  sample(out, "qvl_images_total", static_cast<double>(images_));
  header(out, "qvl_generated_tokens_total", "counter", "Tokens generated.");
  sample(out, "qvl_generated_tokens_total", static_cast<double>(generated_tokens_));
  header(out, "qvl_prompt_tokens_cached_total", "counter", "Prompt tokens restored from the prefix cache (not read again).");
  sample(out, "qvl_prompt_tokens_cached_total", static_cast<double>(cached_tokens_));
  header(out, "qvl_prompt_tokens_read_total", "counter", "Prompt tokens run through the model, counted as they are read.");
  sample(out, "qvl_prompt_tokens_read_total", static_cast<double>(prompt_read_));
  {
    // Rates over the last full kWindowS seconds (the current second is still filling).
    const int64_t now = steady_second();
    uint64_t p = 0, gen = 0;
    for (const Second& b : window_)
      if (b.at >= now - kWindowS && b.at < now) p += b.prompt, gen += b.generated;
    header(out, "qvl_prompt_tokens_per_second", "gauge", "Prompt tokens read per second over the last 10 s.");
    sample(out, "qvl_prompt_tokens_per_second", static_cast<double>(p) / kWindowS);
    header(out, "qvl_generated_tokens_per_second", "gauge", "Tokens generated per second over the last 10 s, all streams.");
    sample(out, "qvl_generated_tokens_per_second", static_cast<double>(gen) / kWindowS);
  }
  header(out, "qvl_time_to_first_token_seconds", "histogram", "From arrival to the first token, queueing included.");
  ttft_.render("qvl_time_to_first_token_seconds", out);
  header(out, "qvl_request_duration_seconds", "histogram", "From arrival to the last token, queueing included.");
  duration_.render("qvl_request_duration_seconds", out);
  header(out, "qvl_image_encode_seconds", "histogram", "Image preprocessing and vision encoder time per request.");
  image_encode_.render("qvl_image_encode_seconds", out);
  header(out, "qvl_inter_token_latency_seconds", "histogram", "Gap between two tokens of one stream.");
  inter_token_.render("qvl_inter_token_latency_seconds", out);
  header(out, "qvl_image_cache_hits_total", "counter", "Images found in the image cache (not encoded again).");
  sample(out, "qvl_image_cache_hits_total", static_cast<double>(g.image_cache_hits));
  header(out, "qvl_image_cache_misses_total", "counter", "Image cache lookups that found nothing.");
  sample(out, "qvl_image_cache_misses_total", static_cast<double>(g.image_cache_misses));
  header(out, "qvl_image_cache_evictions_total", "counter", "Encoded images dropped to stay within --image-cache-mb.");
  sample(out, "qvl_image_cache_evictions_total", static_cast<double>(g.image_cache_evictions));
  header(out, "qvl_images_encoded_total", "counter", "Vision tower passes (one per distinct image not in the cache).");
  sample(out, "qvl_images_encoded_total", static_cast<double>(g.images_encoded));
  header(out, "qvl_image_cache_entries", "gauge", "Encoded images kept.");
  sample(out, "qvl_image_cache_entries", static_cast<double>(g.image_cache_entries));
  header(out, "qvl_image_cache_bytes", "gauge", "Memory of the encoded images kept.");
  sample(out, "qvl_image_cache_bytes", static_cast<double>(g.image_cache_bytes));
  header(out, "qvl_image_cache_budget_bytes", "gauge", "--image-cache-mb in bytes.");
  sample(out, "qvl_image_cache_budget_bytes", static_cast<double>(g.image_cache_budget));
  header(out, "qvl_page_cache_hits_total", "counter", "Document pages found rendered in the page cache (not rendered again).");
  sample(out, "qvl_page_cache_hits_total", static_cast<double>(g.page_cache_hits));
  header(out, "qvl_document_pages_rendered_total", "counter", "Document pages rendered by the confined PDF worker.");
  sample(out, "qvl_document_pages_rendered_total", static_cast<double>(g.pages_rendered));
  header(out, "qvl_page_cache_bytes", "gauge", "Memory of the rendered pages kept (--page-cache-mb).");
  sample(out, "qvl_page_cache_bytes", static_cast<double>(g.page_cache_bytes));
  header(out, "qvl_prefix_cache_lookups_total", "counter", "Requests that looked for a cached prefix.");
  sample(out, "qvl_prefix_cache_lookups_total", static_cast<double>(g.prefix_cache_lookups));
  header(out, "qvl_prefix_cache_hits_total", "counter", "Requests that reused a cached prefix.");
  sample(out, "qvl_prefix_cache_hits_total", static_cast<double>(g.prefix_cache_hits));
  header(out, "qvl_prefix_cache_reused_tokens_total", "counter", "Prompt tokens restored from the prefix cache.");
  sample(out, "qvl_prefix_cache_reused_tokens_total", static_cast<double>(g.prefix_cache_reused_tokens));
  header(out, "qvl_prefix_cache_evictions_total", "counter", "KV caches dropped to stay within --prefix-cache-mb.");
  sample(out, "qvl_prefix_cache_evictions_total", static_cast<double>(g.prefix_cache_evictions));
  header(out, "qvl_prefix_cache_entries", "gauge", "KV caches of finished requests kept.");
  sample(out, "qvl_prefix_cache_entries", static_cast<double>(g.prefix_cache_entries));
  header(out, "qvl_prefix_cache_bytes", "gauge", "Memory of the KV caches kept.");
  sample(out, "qvl_prefix_cache_bytes", static_cast<double>(g.prefix_cache_bytes));
  header(out, "qvl_prefix_cache_budget_bytes", "gauge", "--prefix-cache-mb in bytes.");
  sample(out, "qvl_prefix_cache_budget_bytes", static_cast<double>(g.prefix_cache_budget));
  header(out, "qvl_queue_depth", "gauge", "Requests waiting for a slot.");
  sample(out, "qvl_queue_depth", g.queue_depth);
  header(out, "qvl_busy_slots", "gauge", "Slots running a request.");
  sample(out, "qvl_busy_slots", g.busy_slots);
  header(out, "qvl_slots", "gauge", "Slots (--parallel).");
  sample(out, "qvl_slots", g.slots);
  header(out, "qvl_model_loaded", "gauge", "1 once the model is loaded.");
  sample(out, "qvl_model_loaded", g.loaded ? 1 : 0);
  // The names autoscalers are set up with (vLLM's num_requests_waiting/running, TGI's queue size): an HPA or
  // KEDA trigger on qvl_requests_waiting adds replicas before requests are refused.
  header(out, "qvl_requests_waiting", "gauge", "Requests accepted and waiting for a slot (same as qvl_queue_depth).");
  sample(out, "qvl_requests_waiting", g.queue_depth);
  header(out, "qvl_requests_running", "gauge", "Requests in a slot: reading the prompt or answering (same as qvl_busy_slots).");
  sample(out, "qvl_requests_running", g.busy_slots);
  header(out, "qvl_ready", "gauge", "1 while GET /readyz answers 200.");
  sample(out, "qvl_ready", g.ready ? 1 : 0);
  header(out, "qvl_kernel_table", "gauge", "The kernel table in use (label table), 1; why: qvl serve's log.");
  out += "qvl_kernel_table{table=\"" + g.kernel_table + "\"} 1\n";
  if (!g.model.empty()) {
    header(out, "qvl_model_info", "gauge", "The loaded model (labels: its facts, as /health gives them), 1.");
    out += "qvl_model_info{model=\"" + label_value(g.model) + "\",format=\"" + g.model_format + "\",text_weights=\"" +
           g.text_weights + "\",vision_weights=\"" + g.vision_weights + "\"} 1\n";
    header(out, "qvl_model_parameters", "gauge", "The loaded model's parameters (as /health's model_info.parameters).");
    out += "qvl_model_parameters " + std::to_string(g.model_parameters) + "\n";  // exact, as /health gives it
  }
  header(out, "qvl_draining", "gauge", "1 after SIGTERM: finishing running requests, refusing new ones.");
  sample(out, "qvl_draining", g.draining ? 1 : 0);
  return out;
}

}  // namespace qvl::server
