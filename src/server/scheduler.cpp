// The one inference thread: it loads the model, then admits queued requests into a fixed number of slots
// and interleaves their decode steps round-robin, streaming each request's text to its Job.
//
// Each round of the loop admits at most one new request (its image encoding and prefill run there, between
// the decode steps of the others) and then gives every active session one step. So a short request that
// arrives while a long one decodes waits for one prefill, not for the long one to end.
#include "server/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <exception>

namespace qvl::server {

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
    case JobError::kTimeout: return "timeout";
    case JobError::kCancelled: return "cancelled";
    case JobError::kShutdown: return "shutdown";
    case JobError::kInternal: return "internal";
  }
  return "?";
}

// ---- Job ------------------------------------------------------------------------------------------------

Job::Job(InferenceRequest request) : request_(std::move(request)) {
  submitted_ = started_at_ = Clock::now();
  if (request_.timeout_s > 0) {
    has_deadline_ = true;
    deadline_ = submitted_ + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(request_.timeout_s));
  }
}

JobUpdate Job::wait(std::chrono::milliseconds max_wait) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, max_wait, [&] { return !pending_text_.empty() || finished_ || (started_ && !started_seen_); });
  JobUpdate u;
  if (finished_) u = final_;
  u.text = std::move(pending_text_);
  pending_text_.clear();
  u.started = started_;
  started_seen_ = started_;
  u.finished = finished_;
  return u;
}

void Job::mark_started() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    started_ = true;
  }
  cv_.notify_all();
}

void Job::push_text(const std::string& text) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_text_ += text;
  }
  cv_.notify_all();
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = true;
  }
  cv_.notify_all();
}

// ---- Scheduler ------------------------------------------------------------------------------------------

Scheduler::Scheduler(SchedulerOptions options) : options_(std::move(options)) {
  QVL_CHECK(options_.parallel >= 1 && options_.queue >= 0 && options_.threads >= 1);
}

Scheduler::~Scheduler() { stop(); }

void Scheduler::start() {
  QVL_CHECK(!thread_.joinable());
  thread_ = std::thread([this] { run(); });
}

Scheduler::Submitted Scheduler::submit(InferenceRequest request) {
  const LoadState st = state();
  if (st == LoadState::kLoading) return {nullptr, SubmitError::kLoading};
  if (st == LoadState::kFailed) return {nullptr, SubmitError::kLoadFailed};
  auto job = std::make_shared<Job>(std::move(request));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!accepting_) return {nullptr, SubmitError::kShuttingDown};
    // Waiting room: --queue places, plus the free slots that the loop has not yet filled.
    const size_t capacity = static_cast<size_t>(options_.queue + std::max(0, options_.parallel - busy_));
    if (queue_.size() >= capacity) return {nullptr, SubmitError::kQueueFull};
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
        if (static_cast<int>(active_.size()) < options_.parallel && !queue_.empty()) {
          incoming = std::move(queue_.front());
          queue_.pop_front();
          incoming->in_slot_ = true;
        }
        busy_ = static_cast<int>(active_.size()) + (incoming ? 1 : 0);
      }
    }
    if (cancelling) {
      // cancel_all() or stop(): everything queued or running ends now.
      const std::string msg = "the server is shutting down";
      for (auto& job : dropped) finish_job(*job, JobError::kShutdown, msg, GenerateResult{});
      for (Slot& s : active_) {
        s.session->cancel();
        finish_job(*s.job, JobError::kShutdown, msg, s.session->result());
      }
      active_.clear();
      if (stopping) return;
      continue;
    }
    drop_expired_queued();
    if (incoming) admit(std::move(incoming), pool);
    for (size_t i = 0; i < active_.size();) {
      if (step_slot(active_[i], pool)) {
        ++i;
      } else {
        active_.erase(active_.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = static_cast<int>(active_.size());
  }
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

void Scheduler::admit(std::shared_ptr<Job> job, ThreadPool& pool) {
  const auto now = std::chrono::steady_clock::now();
  if (job->cancel_requested()) return finish_job(*job, JobError::kCancelled, "the client went away", {});
  if (job->past_deadline(now)) {
    return finish_job(*job, JobError::kTimeout,
                      "the request waited in the queue past the server's timeout of " +
                          seconds_text(job->request_.timeout_s) + " s; retry later or raise --timeout",
                      {});
  }
  job->started_at_ = now;
  auto session = std::make_unique<Session>(*model_);
  Status s;
  try {
    const InferenceRequest& r = job->request_;
    // A client gone or the deadline passed stops a long prompt between its prefill slices.
    GenerateCallbacks cb;
    cb.keep_going = [&job] {
      return !job->cancel_requested() && !job->past_deadline(std::chrono::steady_clock::now());
    };
    s = session->start(pool, r.messages, r.images, r.options, cb);
  } catch (const std::exception& e) {
    return finish_job(*job, JobError::kInternal, std::string("the engine failed: ") + e.what(), {});
  }
  std::vector<ImageRGB>().swap(job->request_.images);  // pixels are in the KV cache now
  if (!s.ok()) return finish_job(*job, JobError::kInvalidRequest, s.message(), session->result());
  if (session->result().finish == FinishReason::kCancelled) {
    if (job->cancel_requested()) return finish_job(*job, JobError::kCancelled, "the client went away", session->result());
    return finish_job(*job, JobError::kTimeout,
                      "the request ran past the server's timeout of " + seconds_text(job->request_.timeout_s) +
                          " s while reading its prompt; use smaller images (max_pixels) or raise --timeout",
                      session->result());
  }
  job->mark_started();
  if (session->done()) return finish_job(*job, JobError::kNone, "", session->result());  // max_tokens 0
  active_.push_back({std::move(job), std::move(session)});
}

bool Scheduler::step_slot(Slot& slot, ThreadPool& pool) {
  Job& job = *slot.job;
  Session& session = *slot.session;
  if (job.cancel_requested()) {
    session.cancel();
    finish_job(job, JobError::kCancelled, "the client went away", session.result());
    return false;
  }
  if (job.past_deadline(std::chrono::steady_clock::now())) {
    session.cancel();
    finish_job(job, JobError::kTimeout,
               "the request ran past the server's timeout of " + seconds_text(job.request_.timeout_s) +
                   " s; ask for fewer tokens (max_tokens) or raise --timeout",
               session.result());
    return false;
  }
  Session::Step step;
  try {
    step = session.step(pool);
  } catch (const std::exception& e) {
    session.cancel();
    finish_job(job, JobError::kInternal, std::string("the engine failed: ") + e.what(), session.result());
    return false;
  }
  if (!step.text.empty()) job.push_text(step.text);
  if (!step.done) return true;
  finish_job(job, JobError::kNone, "", session.result());
  return false;
}

// The metrics hook and the slot count hear of the end before the client does, so /metrics already counts
// a request whose answer a client has received.
void Scheduler::finish_job(Job& job, JobError error, std::string message, const GenerateResult& result) {
  const JobUpdate final = job.prepare_finish(error, std::move(message), result);
  if (options_.on_finish) options_.on_finish(final);
  if (job.in_slot_) {  // the slot is free before the client hears the end
    job.in_slot_ = false;
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = std::max(0, busy_ - 1);
  }
  job.publish_finish();
}

}  // namespace qvl::server
