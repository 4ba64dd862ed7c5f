// The phase clock's totals (util/phase_clock.h).
#include "util/phase_clock.h"

namespace qvl {

std::atomic<bool> PhaseClock::on_{false};
std::array<std::atomic<int64_t>, static_cast<int>(Phase::kCount)> PhaseClock::ns_{};

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kVisionGemm: return "vision_gemm";
    case Phase::kVisionAttention: return "vision_attention";
    case Phase::kVisionMerger: return "vision_merger";
    case Phase::kPrefillGemm: return "prefill_gemm";
    case Phase::kPrefillAttention: return "prefill_attention";
    case Phase::kDecodeGemm: return "decode_gemm";
    case Phase::kDecodeAttention: return "decode_attention";
    case Phase::kCount: break;
  }
  return "?";
}

void PhaseClock::reset() {
  for (auto& n : ns_) n.store(0, std::memory_order_relaxed);
}

std::array<double, static_cast<int>(Phase::kCount)> PhaseClock::totals_ms() {
  std::array<double, static_cast<int>(Phase::kCount)> ms{};
  for (size_t i = 0; i < ms.size(); ++i) ms[i] = static_cast<double>(ns_[i].load(std::memory_order_relaxed)) / 1e6;
  return ms;
}

}  // namespace qvl
