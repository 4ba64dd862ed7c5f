// Where a forward pass's time goes: the wall time of each kind of step (the vision tower's GEMMs, its attention,
// its mergers; the text decoder's GEMMs and attention, in prefill and in decode), summed while switched on.
// qvl bench switches it on for its first-token breakdown; off (the default), a scope costs one relaxed load.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace qvl {

enum class Phase : int {
  kVisionGemm,
  kVisionAttention,
  kVisionMerger,
  kPrefillGemm,  // text passes of more than one row (a prompt, a prompt slice); the LM head included
  kPrefillAttention,
  kDecodeGemm,  // one-row passes
  kDecodeAttention,
  kCount
};
const char* phase_name(Phase p);  // "vision_gemm", "vision_attention", ...

class PhaseClock {
 public:
  static void enable(bool on) { on_.store(on, std::memory_order_relaxed); }
  static bool enabled() { return on_.load(std::memory_order_relaxed); }
  static void reset();
  static void add(Phase p, int64_t ns) { ns_[static_cast<int>(p)].fetch_add(ns, std::memory_order_relaxed); }
  // Milliseconds per phase since the last reset.
  static std::array<double, static_cast<int>(Phase::kCount)> totals_ms();

 private:
  static std::atomic<bool> on_;
  static std::array<std::atomic<int64_t>, static_cast<int>(Phase::kCount)> ns_;
};

// Adds the wall time from construction to destruction to phase p, when the clock is on.
class ScopedPhase {
 public:
  explicit ScopedPhase(Phase p) : p_(p), on_(PhaseClock::enabled()) {
    if (on_) t0_ = std::chrono::steady_clock::now();
  }
  ~ScopedPhase() { stop(); }
  // Ends the scope early (later calls and the destructor add nothing).
  void stop() {
    if (on_) PhaseClock::add(p_, std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_).count());
    on_ = false;
  }
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;

 private:
  Phase p_;
  bool on_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace qvl
