// The server's counters, histograms and gauges, rendered in the Prometheus text format for GET /metrics.
#include "server/metrics.h"

#include <cstdio>

namespace qvl::server {

namespace {

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
      image_encode_({0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}) {}

void Metrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{endpoint, status}];
}

void Metrics::observe(const GenerationSample& s) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_tokens_ += static_cast<uint64_t>(s.prompt_tokens);
  image_tokens_ += static_cast<uint64_t>(s.image_tokens);
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
  header(out, "qvl_time_to_first_token_seconds", "histogram", "From the start of the prefill to the first token.");
  ttft_.render("qvl_time_to_first_token_seconds", out);
  header(out, "qvl_request_duration_seconds", "histogram", "From arrival to the last token, queueing included.");
  duration_.render("qvl_request_duration_seconds", out);
  header(out, "qvl_image_encode_seconds", "histogram", "Image preprocessing and vision encoder time per request.");
  image_encode_.render("qvl_image_encode_seconds", out);
  header(out, "qvl_queue_depth", "gauge", "Requests waiting for a slot.");
  sample(out, "qvl_queue_depth", g.queue_depth);
  header(out, "qvl_busy_slots", "gauge", "Slots running a request.");
  sample(out, "qvl_busy_slots", g.busy_slots);
  header(out, "qvl_slots", "gauge", "Slots (--parallel).");
  sample(out, "qvl_slots", g.slots);
  header(out, "qvl_model_loaded", "gauge", "1 once the model is loaded.");
  sample(out, "qvl_model_loaded", g.loaded ? 1 : 0);
  return out;
}

}  // namespace qvl::server
