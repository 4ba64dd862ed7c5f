// One request end to end on a fresh Session: start, then step until done, streaming the text.
#include "engine/generate.h"

#include "engine/session.h"

namespace qvl {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
  }
  return "?";
}

Result<GenerateResult> generate(const Model& model, ThreadPool& pool, const std::vector<ChatMessage>& messages,
                                const std::vector<ImageRGB>& images, const GenerateOptions& options,
                                const GenerateCallbacks& cb) {
  Session session(model);
  QVL_RETURN_IF_ERROR(session.start(pool, messages, images, options, cb));
  if (cb.progress) cb.progress("decode");
  while (!session.done()) {
    Session::Step s = session.step(pool);
    if (!s.text.empty() && cb.on_text && !cb.on_text(s.text)) session.cancel();
  }
  return session.result();
}

}  // namespace qvl
