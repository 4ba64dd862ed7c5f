// The one inference thread: it loads the model, then admits queued requests into a fixed number of slots
// and runs them in rounds.
//
// A round admits at most one new request (its images preprocessed and its prompt built, a cached prefix
// restored), gives the oldest slot still reading its prompt one slice of work — some vision blocks of an
// image, or up to slice_tokens prompt tokens — and decodes one token of every answering slot; the prompt
// slice and the decode rows go through the text model as one batch, so its weights are read once a round.
// A stream therefore waits at most one slice between two tokens, and a new request waits for none of the
// running ones to end.
#include "engine/scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>

namespace qvl {

namespace {
double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}
}  // namespace

const char* job_error_name(JobError e) {
  switch (e) {
    case JobError::kNone: return "none";
    case JobError::kInvalidRequest: return "invalid_request";
    case JobError::kContextLength: return "context_length_exceeded";
    case JobError::kTimeout: return "timeout";
    case JobError::kCancelled: return "cancelled";
    case JobError::kShutdown: return "shutdown";
    case JobError::kInternal: return "internal";
  }
  return "?";
}

// ---- JobNotifier ----------------------------------------------------------------------------------------

uint64_t JobNotifier::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

void JobNotifier::wait_past(uint64_t seen, std::chrono::milliseconds max_wait) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, max_wait, [&] { return count_ != seen; });
}

void JobNotifier::notify() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++count_;
  }
  cv_.notify_all();
}

// ---- Job ------------------------------------------------------------------------------------------------

Job::Job(InferenceRequest request) : request_(std::move(request)) {
  submitted_ = started_at_ = Clock::now();
  if (request_.timeout_s > 0) {
    has_deadline_ = true;
    deadline_ = request_.timeout_from.value_or(submitted_) +
                std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(request_.timeout_s));
  }
}

JobUpdate Job::wait(std::chrono::milliseconds max_wait) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, max_wait, [&] {
    return !pending_text_.empty() || !pending_logprobs_.empty() || finished_ || (started_ && !started_seen_);
  });
  JobUpdate u;
  if (finished_) u = final_;
  u.text = std::move(pending_text_);
  pending_text_.clear();
  u.logprobs = std::move(pending_logprobs_);
  pending_logprobs_.clear();
  u.started = started_;
  started_seen_ = started_;
  u.finished = finished_;
  return u;
}

bool Job::failed() {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_ && final_.error != JobError::kNone;
}

void Job::notify_also(std::shared_ptr<JobNotifier> notifier) {
  std::lock_guard<std::mutex> lock(mu_);
  notifier_ = std::move(notifier);
}

void Job::notify(const std::shared_ptr<JobNotifier>& also) {
  cv_.notify_all();
  if (also) also->notify();
}

void Job::mark_started() {
  std::shared_ptr<JobNotifier> also;
  {
    std::lock_guard<std::mutex> lock(mu_);
    started_ = true;
    also = notifier_;
  }
  notify(also);
}

void Job::push_text(const std::string& text, std::span<const TokenLogprob> logprobs) {
  std::shared_ptr<JobNotifier> also;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_text_ += text;
    pending_logprobs_.insert(pending_logprobs_.end(), logprobs.begin(), logprobs.end());
    also = notifier_;
  }
  notify(also);
}

JobUpdate Job::prepare_finish(JobError error, std::string message, const GenerateResult& result) {
  const Clock::time_point now = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  final_.finished = true;
  final_.started = started_;
  final_.error = error;
  final_.error_message = std::move(message);
  final_.result = result;
  final_.queue_ms = ms_between(submitted_, started_ ? started_at_ : now);
  final_.total_ms = ms_between(submitted_, now);
  return final_;
}

void Job::publish_finish() {
  std::shared_ptr<JobNotifier> also;
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = true;
    also = notifier_;
  }
  notify(also);
}

// ---- Scheduler ------------------------------------------------------------------------------------------

Scheduler::Scheduler(SchedulerOptions options)
    : options_(std::move(options)), image_cache_(options_.image_cache_bytes), prefix_cache_(options_.prefix_cache_bytes) {
  QVL_CHECK(options_.parallel >= 1 && options_.queue >= 0 && options_.threads >= 1 && options_.slice_tokens >= 1);
}

CacheStats Scheduler::cache_stats() const {
  return CacheStats{image_cache_.stats(), prefix_cache_.stats(), images_encoded_.load()};
}

Scheduler::~Scheduler() { stop(); }

void Scheduler::start() {
  QVL_CHECK(!thread_.joinable());
  thread_ = std::thread([this] { run(); });
}

Scheduler::Submitted Scheduler::submit(InferenceRequest request) { return submit_or_keep(request); }

Scheduler::Submitted Scheduler::submit_or_keep(InferenceRequest& request) {
  const LoadState st = state();
  if (st == LoadState::kLoading) return {nullptr, SubmitError::kLoading};
  if (st == LoadState::kFailed) return {nullptr, SubmitError::kLoadFailed};
  std::shared_ptr<Job> job;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!accepting_) return {nullptr, SubmitError::kShuttingDown};
    // Waiting room: --queue places, plus the free slots that the loop has not yet filled.
    const size_t capacity = static_cast<size_t>(options_.queue + std::max(0, options_.parallel - busy_));
    if (queue_.size() >= capacity) return {nullptr, SubmitError::kQueueFull};
    job = std::make_shared<Job>(std::move(request));
    queue_.push_back(job);
  }
  cv_.notify_all();
  return {job, SubmitError::kNone};
}

int Scheduler::queue_depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(queue_.size());
}

int Scheduler::busy_slots() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_;
}

bool Scheduler::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.empty() && busy_ == 0;
}

void Scheduler::stop_accepting() {
  std::lock_guard<std::mutex> lock(mu_);
  accepting_ = false;
}

void Scheduler::cancel_all() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancel_all_ = true;
  }
  cv_.notify_all();
}

void Scheduler::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    accepting_ = false;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Scheduler::run() {
  const auto t0 = std::chrono::steady_clock::now();
  auto load = [&]() -> Result<std::unique_ptr<Model>> {
    if (!options_.load) return Status::Error("no model to load");
    try {
      return options_.load();
    } catch (const std::exception& e) {
      return Status::Error(std::string("loading the model failed: ") + e.what());
    }
  };
  auto loaded = load();
  if (!loaded.ok()) {
    load_error_ = loaded.status().message();
    state_.store(LoadState::kFailed, std::memory_order_release);
    return;
  }
  model_ = std::move(loaded).value();
  load_ms_ = ms_between(t0, std::chrono::steady_clock::now());
  {
    const TextConfig& c = model_->config().text;
    const int64_t H = c.hidden_size, qd = c.num_attention_heads * c.head_dim, kvd = c.num_key_value_heads * c.head_dim;
    text_macs_per_token_ = c.num_hidden_layers * (H * qd + 2 * H * kvd + qd * H + 3 * H * c.intermediate_size);
  }
  ThreadPool pool(options_.threads);
  if (options_.pin) {
    auto cpus = pool.pin_to_cores();
    if (!cpus.ok()) std::fprintf(stderr, "qvl serve: %s; threads left unpinned\n", cpus.status().message().c_str());
  }
  state_.store(LoadState::kReady, std::memory_order_release);

  for (;;) {
    std::shared_ptr<Job> incoming;
    std::deque<std::shared_ptr<Job>> dropped;
    bool stopping = false, cancelling = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (active_.empty()) cv_.wait(lock, [&] { return stop_ || cancel_all_ || !queue_.empty(); });
      if (stop_ || cancel_all_) {
        stopping = stop_;
        cancelling = true;
        cancel_all_ = false;
        dropped.swap(queue_);
        busy_ = 0;
      } else {
        if (static_cast<int>(active_.size()) < options_.parallel) incoming = take_next_locked();
        if (incoming) incoming->in_slot_ = true;
        busy_ = static_cast<int>(active_.size()) + (incoming ? 1 : 0);
      }
    }
    if (cancelling) {
      // cancel_all() or stop(): everything queued or running ends now.
      const std::string msg = "the server is shutting down";
      for (auto& job : dropped) finish_job(*job, JobError::kShutdown, msg, GenerateResult{});
      for (Slot& s : active_) finish_slot(s, JobError::kShutdown, msg);
      active_.clear();
      encodings_.clear();
      if (stopping) return;
      continue;
    }
    drop_expired_queued();
    if (incoming) admit(std::move(incoming));
    round(pool);
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = static_cast<int>(active_.size());
  }
}

std::shared_ptr<Job> Scheduler::take_next_locked() {
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    std::shared_ptr<const Job>& first = (*it)->request_.same_prompt_as;
    // With no slot running, nothing is reading the prompt it waits for: it goes (so the loop never spins).
    if (first && !first->prompt_read() && !active_.empty()) continue;
    first.reset();  // the first choice's result is not kept alive by this one
    std::shared_ptr<Job> job = std::move(*it);
    queue_.erase(it);
    return job;
  }
  return nullptr;
}

// Queued jobs whose client left or whose time ran out are answered now, not when a slot frees up.
void Scheduler::drop_expired_queued() {
  std::vector<std::shared_ptr<Job>> expired;
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = queue_.begin(); it != queue_.end();) {
      if ((*it)->cancel_requested() || (*it)->past_deadline(now)) {
        expired.push_back(std::move(*it));
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& job : expired) {
    if (job->cancel_requested()) {
      finish_job(*job, JobError::kCancelled, "the client went away", GenerateResult{});
    } else {
      finish_job(*job, JobError::kTimeout,
                 "the request waited in the queue past the server's timeout of " +
                     seconds_text(job->request_.timeout_s) + " s; retry later or raise --timeout",
                 GenerateResult{});
    }
  }
}

void Scheduler::admit(std::shared_ptr<Job> job) {
  const auto now = std::chrono::steady_clock::now();
  if (job->cancel_requested()) return finish_job(*job, JobError::kCancelled, "the client went away", {});
  if (job->past_deadline(now)) {
    return finish_job(*job, JobError::kTimeout,
                      "the request waited in the queue past the server's timeout of " +
                          seconds_text(job->request_.timeout_s) + " s; retry later or raise --timeout",
                      {});
  }
  job->started_at_ = now;
  auto session = std::make_unique<Session>(*model_, SessionCaches{options_.image_cache_bytes ? &image_cache_ : nullptr,
                                                                  options_.prefix_cache_bytes ? &prefix_cache_ : nullptr});
  Status s;
  try {
    const InferenceRequest& r = job->request_;
    s = session->prepare(r.messages, r.images, r.videos, r.options);
  } catch (const std::exception& e) {
    return finish_job(*job, JobError::kInternal, std::string("the engine failed: ") + e.what(), {});
  }
  std::vector<ImageRGB>().swap(job->request_.images);  // what must be encoded is preprocessed now
  job->request_.videos.clear();                         // the session holds the frame groups it still needs
  if (!s.ok())
    return finish_job(*job, session->over_context() ? JobError::kContextLength : JobError::kInvalidRequest, s.message(),
                      session->result());
  job->mark_started();
  active_.push_back(Slot{std::move(job), std::move(session), {}, 0, false});
}

bool Scheduler::check_alive(Slot& slot) {
  if (slot.ended) return false;
  Job& job = *slot.job;
  if (job.cancel_requested()) {
    finish_slot(slot, JobError::kCancelled, "the client went away");
    return false;
  }
  if (job.past_deadline(std::chrono::steady_clock::now())) {
    const bool reading = slot.session->phase() == Session::Phase::kVision || slot.session->phase() == Session::Phase::kPrefill;
    finish_slot(slot, JobError::kTimeout,
                "the request ran past the server's timeout of " + seconds_text(job.request_.timeout_s) +
                    (reading ? " s while reading its prompt; use smaller images (max_pixels) or raise --timeout"
                             : " s; ask for fewer tokens (max_tokens) or raise --timeout"));
    return false;
  }
  return true;
}

void Scheduler::finish_slot(Slot& slot, JobError error, std::string message) {
  slot.ended = true;
  if (error != JobError::kNone) slot.session->cancel();
  finish_job(*slot.job, error, std::move(message), slot.session->result());
}

// One slice of an image's tower pass: as many blocks as take about as long as a prompt slice, from the
// times measured so far (before any measurement: one block, or the weight products' ratio).
void Scheduler::encode_slice(Encoding& e, ThreadPool& pool) {
  if (!e.encoder) {
    e.act = std::make_unique<VisionActivations>();
    e.encoder = std::make_unique<VisionEncoder>(*model_, pool, std::vector<const PreprocessedImage*>{e.pixels.get()}, *e.act);
    return;  // the patch embedding was this round's slice
  }
  const VisionConfig& vc = model_->config().vision;
  const double patches = static_cast<double>(e.encoder->patches());
  int blocks = 1;
  if (vision_ms_per_block_patch_ > 0) {
    const double block_ms = vision_ms_per_block_patch_ * patches;
    const double slice_ms =
        prefill_ms_per_token_ > 0
            ? options_.slice_tokens * prefill_ms_per_token_
            : block_ms * static_cast<double>(options_.slice_tokens) * static_cast<double>(text_macs_per_token_) /
                  static_cast<double>(std::max<int64_t>(1, VisionEncoder::block_macs(vc, e.encoder->patches())));
    blocks = static_cast<int>(std::clamp<double>(std::floor(slice_ms / block_ms), 1, vc.depth));
  }
  const int before = e.encoder->blocks_left();
  const auto t0 = std::chrono::steady_clock::now();
  const bool done = e.encoder->step(pool, blocks);
  // The decode rounds until the next slice do not hold the tower's scratch (the hidden states stay).
  if (!done) e.act->release_blocks();
  const int ran = before - e.encoder->blocks_left() - (done ? 1 : 0);  // blocks, the merger not counted
  if (ran > 0 && !done) {
    const double ms = ms_between(t0, std::chrono::steady_clock::now()) / (ran * patches);
    vision_ms_per_block_patch_ = vision_ms_per_block_patch_ > 0 ? 0.7 * vision_ms_per_block_patch_ + 0.3 * ms : ms;
  }
  if (!done) return;
  auto parts = split_encoded(e.encoder->take(), {e.pixels.get()});
  ++images_encoded_;
  if (options_.image_cache_bytes) image_cache_.put(e.key, parts[0]);
  for (Slot& s : active_) s.session->provide_image(e.key, parts[0]);
  e.encoder.reset();
  e.act.reset();
  e.pixels.reset();
}

void Scheduler::round(ThreadPool& pool) {
  // Slots whose client left or whose deadline passed end here. Slots that end are only marked during
  // the round (pointers into active_ stay valid) and erased at its end.
  for (Slot& s : active_) check_alive(s);

  // Images: taken from the cache when another request has encoded them meanwhile, else queued for
  // encoding once (however many slots wait for them); encodings nobody waits for any more are dropped.
  std::vector<bool> wanted(encodings_.size(), false);
  for (Slot& s : active_) {
    if (s.ended) continue;
    for (const Session::PendingImage& p : s.session->pending_images()) {
      if (options_.image_cache_bytes) {
        if (auto hit = image_cache_.find(p.key)) {
          s.session->provide_image(p.key, hit);
          continue;
        }
      }
      size_t e = 0;
      while (e < encodings_.size() && encodings_[e].key != p.key) ++e;
      if (e == encodings_.size()) {
        encodings_.push_back({p.key, p.pixels, nullptr});
        wanted.push_back(true);
      } else {
        wanted[e] = true;
      }
    }
  }
  for (size_t e = encodings_.size(); e-- > 0;)
    if (!wanted[e]) encodings_.erase(encodings_.begin() + static_cast<std::ptrdiff_t>(e));

  std::vector<TextSeq> batch;
  std::vector<Slot*> batch_slots;
  // The oldest slot still reading its prompt gets this round's slice: vision blocks of its first missing
  // image, or prompt tokens (which join the decode rows' batch).
  for (Slot& s : active_) {
    if (s.ended) continue;
    const Session::Phase ph = s.session->phase();
    if (ph == Session::Phase::kVision) {
      const std::vector<Session::PendingImage> pending = s.session->pending_images();
      if (pending.empty()) continue;  // provided above: it reads its prompt from the next round on
      for (Encoding& e : encodings_) {
        if (e.key != pending[0].key) continue;
        try {
          encode_slice(e, pool);
        } catch (const std::exception& ex) {
          // Every slot waiting for this image fails with it.
          for (Slot& w : active_) {
            if (w.ended) continue;
            bool waits = false;
            for (const auto& p : w.session->pending_images()) waits = waits || p.key == e.key;
            if (waits) finish_slot(w, JobError::kInternal, std::string("the engine failed: ") + ex.what());
          }
          e.pixels.reset();
        }
        break;
      }
      break;
    }
    if (ph == Session::Phase::kPrefill) {
      batch.push_back(s.session->prefill_slice(options_.slice_tokens));
      batch_slots.push_back(&s);
      break;
    }
  }
  for (size_t e = encodings_.size(); e-- > 0;)
    if (!encodings_[e].pixels) encodings_.erase(encodings_.begin() + static_cast<std::ptrdiff_t>(e));

  // Every answering slot: its next token (sampled from the logits of the previous round), then its row.
  const auto now = std::chrono::steady_clock::now();
  std::vector<double> gaps;
  int64_t generated = 0;
  for (Slot& s : active_) {
    if (s.ended || s.session->phase() != Session::Phase::kDecode) continue;
    Session::Step step;
    try {
      step = s.session->sample();
    } catch (const std::exception& e) {
      finish_slot(s, JobError::kInternal, std::string("the engine failed: ") + e.what());
      continue;
    }
    const std::vector<TokenLogprob>& lp = s.session->result().logprobs;
    if (!step.text.empty() || lp.size() > s.logprobs_seen) {
      s.job->push_text(step.text, std::span<const TokenLogprob>(lp).subspan(s.logprobs_seen));
      s.logprobs_seen = lp.size();
    }
    const int tokens = s.session->result().timings.generated_tokens;
    if (tokens > s.tokens_seen) {
      if (s.tokens_seen > 0) gaps.push_back(std::chrono::duration<double>(now - s.last_token).count());
      generated += tokens - s.tokens_seen;
      s.tokens_seen = tokens;
      s.last_token = now;
    }
    if (step.done) {
      finish_slot(s, JobError::kNone, "");
      continue;
    }
    batch.push_back(s.session->decode_row());
    batch_slots.push_back(&s);
  }
  int64_t prompt_read = 0;
  if (!batch.empty()) {
    try {
      const auto t0 = std::chrono::steady_clock::now();
      text_forward_batch(*model_, pool, batch, nullptr, &text_act_);
      // The costs that size the vision slices: a decode-only round, and a prompt token beyond it.
      const double ms = ms_between(t0, std::chrono::steady_clock::now());
      int64_t prompt_rows = 0;
      for (size_t b = 0; b < batch.size(); ++b)
        if (batch_slots[b]->session->phase() == Session::Phase::kPrefill) prompt_rows += batch[b].n;
      if (prompt_rows == 0) {
        decode_round_ms_ = decode_round_ms_ > 0 ? 0.7 * decode_round_ms_ + 0.3 * ms : ms;
      } else if (prompt_rows >= 16) {
        const double per = std::max(0.0, ms - decode_round_ms_) / static_cast<double>(prompt_rows);
        prefill_ms_per_token_ = prefill_ms_per_token_ > 0 ? 0.7 * prefill_ms_per_token_ + 0.3 * per : per;
      }
      for (size_t b = 0; b < batch.size(); ++b) {
        Session& session = *batch_slots[b]->session;
        if (session.phase() == Session::Phase::kPrefill) {
          prompt_read += batch[b].n;
          session.prefill_done(batch[b]);
          if (session.phase() != Session::Phase::kPrefill) batch_slots[b]->job->prompt_read_.store(true);
        } else {
          session.decode_done();
        }
      }
    } catch (const std::exception& e) {
      for (Slot* s : batch_slots)
        if (!s->ended) finish_slot(*s, JobError::kInternal, std::string("the engine failed: ") + e.what());
    }
  }
  // A session that ends a prompt with max_tokens 0 is done without a sample.
  for (Slot& s : active_)
    if (!s.ended && s.session->done()) finish_slot(s, JobError::kNone, "");
  active_.erase(std::remove_if(active_.begin(), active_.end(), [](const Slot& s) { return s.ended; }), active_.end());
  if (options_.on_round && (prompt_read > 0 || generated > 0)) options_.on_round(prompt_read, generated, gaps);
}

// The metrics hook and the slot count hear of the end before the client does, so /metrics already counts
// a request whose answer a client has received.
void Scheduler::finish_job(Job& job, JobError error, std::string message, const GenerateResult& result) {
  job.prompt_read_.store(true);  // the choices that wait for its prompt read it themselves if it never was
  const JobUpdate final = job.prepare_finish(error, std::move(message), result);
  if (options_.on_finish) options_.on_finish(final);
  if (job.in_slot_) {  // the slot is free before the client hears the end
    job.in_slot_ = false;
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = std::max(0, busy_ - 1);
  }
  job.publish_finish();
}

}  // namespace qvl
