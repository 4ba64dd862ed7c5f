// The OpenAI chat-completion request body (POST /v1/chat/completions) read into a plain request struct.
#include "server/openai_request.h"

#include "server/api.h"
#include "chat/chat_json.h"

namespace qvl::server {

namespace {

std::string type_of(const json& part) {
  auto it = part.find("type");
  return it != part.end() && it->is_string() ? it->get<std::string>() : "";
}

// The image reference of an image part: {"type": "image_url", "image_url": {"url": ...}} (OpenAI), with
// "image_url" a bare string, or {"type": "image", "image": ...} (transformers).
Result<std::string> image_ref(const json& part, const std::string& where) {
  const char* hint = "; expected {\"type\": \"image_url\", \"image_url\": {\"url\": \"data:image/jpeg;base64,...\"}}";
  if (auto it = part.find("image_url"); it != part.end()) {
    if (it->is_string()) return it->get<std::string>();
    if (it->is_object()) {
      auto url = it->find("url");
      if (url != it->end() && url->is_string()) return url->get<std::string>();
    }
    return Status::Error(where + ".image_url: expected an object with a string \"url\"" + hint);
  }
  if (auto it = part.find("image"); it != part.end() && it->is_string()) return it->get<std::string>();
  return Status::Error(where + ": an image part without an image" + hint);
}

// Collects the image references in the order the chat template emits them and refuses what the model
// cannot take (video, audio, files).
// An image part's own size (qwen-vl-utils' fields on the part, or inside image_url; OpenAI's detail):
// min_pixels, max_pixels, resized_height + resized_width (positive integers), detail low | high | auto
// (low: the smallest budget, marked max_pixels = 0 for image_options()).
Result<PreprocessOptions> image_size_fields(const json& part, const std::string& where) {
  PreprocessOptions o;
  for (const json* obj : {&part, part.contains("image_url") && part["image_url"].is_object() ? &part["image_url"] : nullptr}) {
    if (!obj) continue;
    const std::string w = obj == &part ? where : where + ".image_url";
    for (auto [key, field] : {std::pair<const char*, int64_t*>{"min_pixels", &o.min_pixels}, {"max_pixels", &o.max_pixels},
                              {"resized_height", &o.resized_height}, {"resized_width", &o.resized_width}}) {
      int64_t v = *field;
      QVL_RETURN_IF_ERROR(read_int(*obj, key, v, w));
      const bool side = key[0] == 'r';  // resized_height / resized_width: a side; else a pixel count
      const int64_t most = side ? int64_t{1} << 16 : int64_t{1} << 32;
      if (v != *field && (v < 1 || v > most))
        return Status::Error(w + "." + key + ": expected 1 to " + std::to_string(most) + (side ? " pixels" : " pixels in all") +
                             ", got " + std::to_string(v));
      *field = v;
    }
    std::string detail;
    QVL_RETURN_IF_ERROR(read_string(*obj, "detail", detail, w));
    if (!detail.empty() && detail != "low" && detail != "high" && detail != "auto")
      return Status::Error(w + ".detail: expected low, high or auto, got '" + detail.substr(0, 40) + "'");
    if (detail == "low") o.max_pixels = 0;
  }
  if ((o.resized_height > 0) != (o.resized_width > 0))
    return Status::Error(where + ": resized_height and resized_width go together; got only one");
  if (o.min_pixels > 0 && o.max_pixels > 0 && o.min_pixels > o.max_pixels)
    return Status::Error(where + ": min_pixels " + std::to_string(o.min_pixels) + " is over max_pixels " +
                         std::to_string(o.max_pixels) + "; give min_pixels <= max_pixels");
  return o;
}

// A qvl extension on an image part (or inside its image_url): "page", the page of a multi-page file (TIFF)
// to read, counting from 0; the first by default, as the reference opens such a file.
Result<int> image_page_field(const json& part, const std::string& where) {
  int64_t page = 0;
  for (const json* obj : {&part, part.contains("image_url") && part["image_url"].is_object() ? &part["image_url"] : nullptr}) {
    if (!obj) continue;
    const std::string w = obj == &part ? where : where + ".image_url";
    if (!obj->contains("page")) continue;
    int64_t v = 0;
    QVL_RETURN_IF_ERROR(read_int(*obj, "page", v, w));
    if (v < 0 || v > 9999) return Status::Error(w + ".page: expected 0 to 9999, got " + std::to_string(v));
    page = v;
  }
  return static_cast<int>(page);
}

// A video part: {"type": "video_url", "video_url": {"url": ...}} (vLLM's OpenAI extension), "video_url" a bare
// string, or {"type": "video", "video": ...} (transformers); its sampling on the part or inside video_url:
// fps, min_pixels, max_pixels (total_pixels: qwen-vl-utils' name for it), min_frames, max_frames.
Result<VideoRef> video_part(const json& part, const std::string& where) {
  VideoRef v;
  const char* hint = "; expected {\"type\": \"video_url\", \"video_url\": {\"url\": \"data:video/mp4;base64,...\"}}";
  const json* holder = nullptr;
  if (auto it = part.find("video_url"); it != part.end()) {
    v.where = where + ".video_url";
    if (it->is_string()) v.ref = it->get<std::string>();
    else if (it->is_object() && it->contains("url") && (*it)["url"].is_string()) {
      v.ref = (*it)["url"].get<std::string>();
      holder = &*it;
    } else return Status::Error(v.where + ": expected an object with a string \"url\"" + hint);
  } else if (auto vt = part.find("video"); vt != part.end() && vt->is_string()) {
    v.where = where + ".video";
    v.ref = vt->get<std::string>();
  } else {
    return Status::Error(where + ": a video part without a video" + hint);
  }
  for (const json* obj : {&part, holder}) {
    if (!obj) continue;
    const std::string w = obj == &part ? where : where + ".video_url";
    if (obj->contains("fps") && !(*obj)["fps"].is_null()) {
      const json& f = (*obj)["fps"];
      if (!f.is_number() || !(f.get<double>() > 0) || f.get<double>() > 1000)
        return Status::Error(w + ".fps: expected a number in (0, 1000], got " + f.dump());
      v.options.fps = f.get<double>();
    }
    for (auto [key, field] : {std::pair<const char*, int64_t*>{"min_pixels", &v.options.min_pixels},
                              {"max_pixels", &v.options.max_pixels}, {"total_pixels", &v.options.max_pixels}}) {
      int64_t x = *field;
      QVL_RETURN_IF_ERROR(read_int(*obj, key, x, w));
      if (x != *field && (x < 1 || x > (int64_t{1} << 40)))
        return Status::Error(w + "." + key + ": expected 1 to 2^40 pixels in all, got " + std::to_string(x));
      *field = x;
    }
    for (auto [key, field] : {std::pair<const char*, int*>{"min_frames", &v.options.min_frames},
                              {"max_frames", &v.options.max_frames}}) {
      int64_t x = *field;
      QVL_RETURN_IF_ERROR(read_int(*obj, key, x, w));
      if (x != *field && (x < 1 || x > 2048))
        return Status::Error(w + "." + key + ": expected 1 to 2048 frames, got " + std::to_string(x));
      *field = static_cast<int>(x);
    }
  }
  if (v.options.min_pixels > 0 && v.options.max_pixels > 0 && v.options.min_pixels > v.options.max_pixels)
    return Status::Error(where + ": min_pixels " + std::to_string(v.options.min_pixels) + " is over max_pixels " +
                         std::to_string(v.options.max_pixels) + "; give min_pixels <= max_pixels");
  return v;
}

// Images in system and assistant messages are dropped, as the chat template drops them (it shows images in
// user and tool messages only), with a warning in the response.
Status collect_images(const json& messages, ChatCompletionRequest& out) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& content = messages[i].is_object() && messages[i].contains("content") ? messages[i]["content"] : json();
    if (!content.is_array()) continue;
    const std::string role = messages[i].is_object() && messages[i].contains("role") && messages[i]["role"].is_string()
                                 ? messages[i]["role"].get<std::string>()
                                 : std::string();
    const bool shown = role == "user" || role == "tool";
    for (size_t j = 0; j < content.size(); ++j) {
      const json& part = content[j];
      const std::string where = "messages[" + std::to_string(i) + "].content[" + std::to_string(j) + "]";
      if (!part.is_object()) continue;  // chat_messages_from_json reports it
      const std::string type = type_of(part);
      auto dropped = [&](const char* what, const char* shows) {
        out.warnings.push_back(where + ": " + what + " in a " + role + " message is not shown to the model (the chat "
                               "template shows " + shows + " in user and tool messages only); it was dropped");
      };
      // The same test, in the same order, as the chat template (and chat_messages_from_json).
      if (type == "image" || type == "image_url" || part.contains("image") || part.contains("image_url")) {
        if (!shown) {
          dropped("an image", "images");
          continue;
        }
        QVL_ASSIGN_OR_RETURN(std::string ref, image_ref(part, where));
        out.images.emplace_back(std::move(ref), where + (part.contains("image_url") ? ".image_url" : ".image"));
        QVL_ASSIGN_OR_RETURN(PreprocessOptions size, image_size_fields(part, where));
        out.options.per_image.push_back(size);
        QVL_ASSIGN_OR_RETURN(int page, image_page_field(part, where));
        out.pages.push_back(page);
      } else if (type == "video" || part.contains("video") || type == "video_url" || part.contains("video_url")) {
        if (!shown) {
          dropped("a video", "videos");
          continue;
        }
        QVL_ASSIGN_OR_RETURN(VideoRef v, video_part(part, where));
        out.videos.push_back(std::move(v));
      } else if (type == "file") {
        if (!shown) {
          dropped("a document", "images");
          continue;
        }
        QVL_ASSIGN_OR_RETURN(DocumentRef d, document_part(part, where));
        out.documents.push_back(std::move(d));
      } else if (!type.empty() && type != "text") {
        return Status::Error(where + ".type: '" + type.substr(0, 40) + "' is not supported; use \"text\", \"image_url\", \"video_url\" or \"file\"");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Result<ChatCompletionRequest> parse_chat_completion(const json& body, const GenerateOptions& defaults) {
  ChatCompletionRequest r;
  r.options = defaults;
  QVL_RETURN_IF_ERROR(read_string(body, "model", r.model));
  if (auto kw = body.find("chat_template_kwargs"); kw != body.end() && !kw->is_null()) {
    if (!kw->is_object()) return Status::Error("chat_template_kwargs: expected an object, got " + kw->dump());
    if (auto t = kw->find("enable_thinking"); t != kw->end() && !t->is_null()) {
      if (!t->is_boolean()) return Status::Error("chat_template_kwargs.enable_thinking: expected true or false, got " + t->dump());
      r.think = t->get<bool>();
    }
  }
  auto msgs = body.find("messages");
  if (msgs == body.end()) return Status::Error("messages: missing; expected a list of {\"role\", \"content\"}");
  if (!msgs->is_array() || msgs->empty()) return Status::Error("messages: expected a non-empty list of messages");
  QVL_ASSIGN_OR_RETURN(r.messages, chat_messages_from_json(*msgs));
  for (size_t i = 0; i < r.messages.size(); ++i) {
    std::string& role = r.messages[i].role;
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return Status::Error("messages[" + std::to_string(i) + "].role: '" + role +
                           "' is not a role; expected system, user, assistant or tool");
    }
  }
  QVL_RETURN_IF_ERROR(collect_images(*msgs, r));
  if (auto tools = body.find("tools"); tools != body.end()) {
    QVL_ASSIGN_OR_RETURN(r.options.chat.tools, chat_tools_from_json(*tools));
    // OpenAI's shape only: a tool the template would paste in raw, or a call the model could never name, is refused.
    for (size_t i = 0; i < r.options.chat.tools.size(); ++i) {
      const json& t = r.options.chat.tools[i];
      const std::string where = "tools[" + std::to_string(i) + "]";
      if (type_of(t) != "function")
        return Status::Error(where + ".type: expected \"function\" (the only tool type a chat completion runs), got " +
                             (t.contains("type") ? t["type"].dump().substr(0, 40) : std::string("none")));
      const auto f = t.find("function");
      if (f == t.end() || !f->is_object() || !f->contains("name") || !(*f)["name"].is_string() ||
          (*f)["name"].get<std::string>().empty())
        return Status::Error(where + ".function: expected an object with a \"name\" (and \"parameters\", a JSON schema)");
    }
  }
  bool parallel = true;
  QVL_RETURN_IF_ERROR(read_bool(body, "parallel_tool_calls", parallel));  // accepted; calls come as the model writes them
  bool tool_required = false;
  QVL_RETURN_IF_ERROR(read_tool_choice(body, r.options, r.tool_calls, tool_required));

  QVL_RETURN_IF_ERROR(read_bool(body, "stream", r.stream));
  if (auto so = body.find("stream_options"); so != body.end() && !so->is_null()) {
    if (!so->is_object()) return Status::Error("stream_options: expected an object such as {\"include_usage\": true}");
    QVL_RETURN_IF_ERROR(read_bool(*so, "include_usage", r.include_usage, "stream_options"));
  }
  QVL_RETURN_IF_ERROR(read_max_tokens(body, "max_tokens", r.options.max_tokens));
  QVL_RETURN_IF_ERROR(read_max_tokens(body, "max_completion_tokens", r.options.max_tokens));
  SamplingParams& sp = r.options.sampling;
  QVL_RETURN_IF_ERROR(read_float(body, "temperature", sp.temperature));
  QVL_RETURN_IF_ERROR(read_float(body, "top_p", sp.top_p));
  QVL_RETURN_IF_ERROR(read_float(body, "min_p", sp.min_p));
  QVL_RETURN_IF_ERROR(read_float(body, "presence_penalty", sp.presence_penalty));
  QVL_RETURN_IF_ERROR(read_float(body, "frequency_penalty", sp.frequency_penalty));
  QVL_RETURN_IF_ERROR(read_float(body, "repetition_penalty", sp.repetition_penalty));
  int64_t top_k = sp.top_k;
  QVL_RETURN_IF_ERROR(read_int(body, "top_k", top_k));
  if (top_k == -1) top_k = 0;  // vLLM's "off"
  if (top_k < 0 || top_k > (1 << 30)) return Status::Error("top_k: must be >= 0 (or -1: off), got " + std::to_string(top_k));
  sp.top_k = static_cast<int>(top_k);
  int64_t seed = 0;
  sp.seed = random_seed();
  if (body.contains("seed") && !body["seed"].is_null()) {
    QVL_RETURN_IF_ERROR(read_int(body, "seed", seed));
    sp.seed = static_cast<uint64_t>(seed);
  }
  QVL_RETURN_IF_ERROR(read_stop(body, "stop", r.options.stop));
  if (Status s = sp.validate(); !s.ok()) return s;

  int64_t n = 1;
  QVL_RETURN_IF_ERROR(read_int(body, "n", n));
  if (n < 1 || n > kMaxChoices)
    return Status::Error("n: expected 1 to " + std::to_string(kMaxChoices) + " choices, got " + std::to_string(n));
  r.n = static_cast<int>(n);
  QVL_RETURN_IF_ERROR(read_logit_bias(body, "logit_bias", r.options.sampling.logit_bias));
  QVL_RETURN_IF_ERROR(read_logprobs(body, "logprobs", "top_logprobs", r.options.logprobs));
  r.logprobs = r.options.logprobs >= 0;
  if (auto rf = body.find("response_format"); rf != body.end() && !rf->is_null()) {
    if (tool_required && !type_of(*rf).empty() && type_of(*rf) != "text")
      return Status::Error("response_format: a JSON format cannot be combined with a required tool call (tool_choice)");
    if (!rf->is_object()) return Status::Error("response_format: expected an object such as {\"type\": \"json_object\"}, got " + std::string(rf->type_name()));
    const std::string type = type_of(*rf);
    if (type == "json_object") {
      r.options.json = JsonGrammar::any_object();
    } else if (type == "json_schema") {
      const auto js = rf->find("json_schema");
      if (js == rf->end() || !js->is_object())
        return Status::Error("response_format.json_schema: expected an object with \"name\" and \"schema\"");
      const auto schema = js->find("schema");
      if (schema == js->end()) return Status::Error("response_format.json_schema.schema: missing; give the JSON schema the answer must follow");
      auto g = JsonGrammar::from_schema(*schema);
      if (!g.ok()) return Status::Error("response_format.json_schema.schema: " + g.status().message());
      r.options.json = *g;
    } else if (!type.empty() && type != "text") {
      return Status::Error("response_format.type: expected text, json_object or json_schema, got '" + type + "'");
    }
  }
  return r;
}

}  // namespace qvl::server
