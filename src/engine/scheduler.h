// The one inference thread: it loads the model, then admits queued requests into a fixed number of slots
// and runs them in rounds: each round decodes one token for every slot that is answering, in one batched
// forward pass, and gives one bounded slice of work (vision blocks or prompt tokens) to the oldest slot
// still reading its prompt. Encoded images and finished requests' KV caches are kept for later requests.
// No HTTP here: the server submits plain requests and reads Jobs.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "engine/generate.h"
#include "engine/image_cache.h"
#include "engine/prefix_cache.h"
#include "engine/session.h"
#include "model/vision.h"

namespace qvl {

class Job;

// One request as the engine sees it: plain structs, no JSON.
struct InferenceRequest {
  std::vector<ChatMessage> messages;
  std::vector<ImageRGB> images;
  GenerateOptions options;
  double timeout_s = 0;  // 0: none; counted from submission, queueing included
  // Where set (a later choice of a request): timeout_s counts from here instead of from submission.
  std::optional<std::chrono::steady_clock::time_point> timeout_from;
  std::vector<std::shared_ptr<const PreprocessedVideo>> videos;  // sampled and preprocessed, in prompt order
  // Another choice of the same request (an API's n), submitted before this one with the same prompt and
  // options.share_prompt: this one is admitted only once that one has read its prompt (or ended), so that it
  // restores the prompt from the prefix cache instead of reading it, and its images, again.
  std::shared_ptr<const Job> same_prompt_as;
};

enum class JobError {
  kNone,
  kInvalidRequest,  // Session::prepare refused it (bad image size, bad options)
  kContextLength,   // Session::prepare refused it: the prompt does not fit the context
  kTimeout,         // past its timeout, queued or running
  kCancelled,       // the client went away
  kShutdown,        // the server stopped before the request finished
  kInternal,        // an exception in the engine (a bug or out of memory)
};

// What the HTTP side learns from a job at each Job::wait().
struct JobUpdate {
  std::string text;       // text produced since the previous wait()
  std::vector<TokenLogprob> logprobs;  // the generated tokens' since the previous wait() (options.logprobs >= 0)
  bool started = false;   // the request was admitted and its prompt built: it is valid
  bool finished = false;
  JobError error = JobError::kNone;
  std::string error_message;
  GenerateResult result;  // once finished (text so far on timeout or cancel)
  double queue_ms = 0;    // submission to admission into a slot
  double total_ms = 0;    // submission to the end
};

// Wakes a thread that waits on several jobs at once (a request's choices streamed together): every job it is
// given to counts its news here too.
class JobNotifier {
 public:
  uint64_t count() const;
  // Waits until count() is past `seen` or `max_wait` passes.
  void wait_past(uint64_t seen, std::chrono::milliseconds max_wait);
  void notify();

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t count_ = 0;
};

// A request in flight, shared by the HTTP thread that waits for it and the inference thread that runs it.
class Job {
 public:
  explicit Job(InferenceRequest request);

  // Waits until there is new text, the job starts or finishes, or `max_wait` passes; returns the news.
  JobUpdate wait(std::chrono::milliseconds max_wait);
  // From any thread: the inference thread stops the work at its next step and finishes the job as kCancelled.
  void cancel() { cancel_.store(true); }
  bool cancel_requested() const { return cancel_.load(); }
  // It has ended with an error (without taking its news, as wait() does).
  bool failed();
  // From now on its news (text, start, end) also goes to `notifier`; news it had before is still there for wait().
  void notify_also(std::shared_ptr<JobNotifier> notifier);
  // Its prompt has been read (it is answering) or it has ended: a job with the same prompt can be admitted.
  bool prompt_read() const { return prompt_read_.load(); }

 private:
  friend class Scheduler;
  using Clock = std::chrono::steady_clock;

  // Inference-thread side.
  void mark_started();
  void push_text(const std::string& text, std::span<const TokenLogprob> logprobs = {});
  // Records the end (returned) without telling the waiter yet; publish_finish() then wakes it.
  JobUpdate prepare_finish(JobError error, std::string message, const GenerateResult& result);
  void publish_finish();
  bool past_deadline(Clock::time_point now) const { return has_deadline_ && now >= deadline_; }

  InferenceRequest request_;
  Clock::time_point submitted_, started_at_;
  Clock::time_point deadline_;
  bool has_deadline_ = false;
  bool in_slot_ = false;  // counted in the scheduler's busy slots (inference thread only)
  std::atomic<bool> cancel_{false};
  std::atomic<bool> prompt_read_{false};

  // Wakes the waiters and `also` (the notifier read with the news, under mu_; called after mu_ is released).
  void notify(const std::shared_ptr<JobNotifier>& also);

  std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<JobNotifier> notifier_;
  std::string pending_text_;
  std::vector<TokenLogprob> pending_logprobs_;
  bool started_ = false, started_seen_ = false, finished_ = false;
  JobUpdate final_;  // filled by prepare_finish()
};

using ModelLoader = std::function<Result<std::unique_ptr<Model>>()>;

struct SchedulerOptions {
  int threads = 1;    // the ThreadPool of the inference thread
  bool pin = false;   // its threads pinned one per physical core (ThreadPool::pin_to_cores)
  int parallel = 1;   // slots
  int queue = 16;     // waiting requests at most
  // The work given to a reading prompt per round, in prompt tokens (a vision slice is the blocks that take
  // about as long, as measured): bounds how long answering streams wait between tokens. 64 tokens take
  // about 0.75 s on 2 AVX2 cores with the 2B model (BENCHMARKS.md).
  int slice_tokens = 64;
  size_t image_cache_bytes = size_t{256} << 20;   // encoded images kept (0: none)
  size_t prefix_cache_bytes = size_t{512} << 20;  // finished requests' KV caches kept (0: none)
  ModelLoader load;   // runs first on the inference thread
  // Hears every finished job on the inference thread (metrics); must be quick and thread-safe.
  std::function<void(const JobUpdate&)> on_finish;
  // Hears every round: prompt tokens read, tokens generated, and each answering slot's gap since its
  // previous token (seconds); on the inference thread, quick and thread-safe.
  std::function<void(int64_t prompt_tokens, int64_t generated_tokens, const std::vector<double>& token_gaps_s)> on_round;
};

struct CacheStats {
  ImageCache::Stats images;
  PrefixCache::Stats prefixes;
  uint64_t images_encoded = 0;  // tower passes run (one per distinct image not in the cache)
};

enum class LoadState { kLoading, kReady, kFailed };
enum class SubmitError { kNone, kLoading, kLoadFailed, kQueueFull, kShuttingDown };

class Scheduler {
 public:
  explicit Scheduler(SchedulerOptions options);
  ~Scheduler();  // stop()
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Starts the inference thread, which loads the model and then serves the queue.
  void start();

  LoadState state() const { return state_.load(std::memory_order_acquire); }
  const std::string& load_error() const { return load_error_; }  // valid once kFailed
  const Model* model() const { return state() == LoadState::kReady ? model_.get() : nullptr; }
  double load_ms() const { return load_ms_; }  // valid once kReady

  struct Submitted {
    std::shared_ptr<Job> job;
    SubmitError error = SubmitError::kNone;
  };
  // Queues a request, or says why not (still loading, queue full, shutting down).
  Submitted submit(InferenceRequest request);
  // The same, `request` moved from only when it is queued (so a refused one can be submitted again).
  Submitted submit_or_keep(InferenceRequest& request);

  int queue_depth() const;
  int busy_slots() const;
  int slots() const { return options_.parallel; }
  CacheStats cache_stats() const;
  bool idle() const;  // nothing queued or running

  // Refuses new requests from now on (graceful shutdown); running and queued ones continue.
  void stop_accepting();
  // Finishes every queued and running job as kShutdown.
  void cancel_all();
  // cancel_all() and joins the inference thread (after the model load, if it is still loading).
  void stop();

 private:
  struct Slot {
    std::shared_ptr<Job> job;
    std::unique_ptr<Session> session;
    std::chrono::steady_clock::time_point last_token;  // when its latest token was sampled
    int tokens_seen = 0;  // generated tokens counted so far
    size_t logprobs_seen = 0;  // of the session's log-probabilities, those pushed to the job
    bool ended = false;   // its job is finished; erased at the end of the round
  };
  // An image's tower pass in progress, shared by every slot that waits for it.
  struct Encoding {
    ImageKey key;
    std::shared_ptr<const PreprocessedImage> pixels;
    std::unique_ptr<VisionActivations> act;  // the encoder's buffers (it is destroyed first)
    std::unique_ptr<VisionEncoder> encoder;  // created at its first slice
  };
  void run();
  // The first queued job that may start: the oldest, passing over choices whose first choice (running) has not
  // yet read the prompt they share (null: none; mu_ held, on the inference thread).
  std::shared_ptr<Job> take_next_locked();
  void admit(std::shared_ptr<Job> job);
  // false: the slot's job ended (cancelled or past its deadline) and the slot is free again.
  bool check_alive(Slot& slot);
  void round(ThreadPool& pool);
  void encode_slice(Encoding& e, ThreadPool& pool);
  void drop_expired_queued();
  void finish_job(Job& job, JobError error, std::string message, const GenerateResult& result);
  void finish_slot(Slot& slot, JobError error, std::string message);

  SchedulerOptions options_;
  std::unique_ptr<Model> model_;
  std::string load_error_;
  double load_ms_ = 0;
  std::atomic<LoadState> state_{LoadState::kLoading};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::vector<Slot> active_;  // touched only by the inference thread, oldest first; its size mirrored in busy_
  std::vector<Encoding> encodings_;  // inference thread only
  TextActivations text_act_;         // the batched passes' buffers, inference thread only
  ImageCache image_cache_;
  PrefixCache prefix_cache_;
  std::atomic<uint64_t> images_encoded_{0};
  int64_t text_macs_per_token_ = 0;  // weight products of one prompt token (sizes vision slices)
  // Measured costs (moving averages; 0 until measured), inference thread only.
  double prefill_ms_per_token_ = 0, decode_round_ms_ = 0, vision_ms_per_block_patch_ = 0;
  int busy_ = 0;
  bool accepting_ = true, stop_ = false, cancel_all_ = false;
  std::thread thread_;
};

const char* job_error_name(JobError e);

}  // namespace qvl
