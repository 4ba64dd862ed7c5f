// The Ollama request bodies (POST /api/chat and /api/generate) read into one plain request struct.
#include "server/ollama_request.h"

#include "server/api.h"
#include "chat/chat_json.h"

namespace qvl::server {

namespace {

// "options": Ollama's runtime options (load-time ones such as num_ctx or num_thread are ignored: the server
// fixes them).
Status parse_options(const json& body, OllamaRequest& r) {
  auto it = body.find("options");
  if (it == body.end() || it->is_null()) return Status::Ok();
  if (!it->is_object()) return Status::Error("options: expected an object such as {\"temperature\": 0.2}");
  const json& o = *it;
  SamplingParams& sp = r.options.sampling;
  QVL_RETURN_IF_ERROR(read_float(o, "temperature", sp.temperature, "options"));
  QVL_RETURN_IF_ERROR(read_float(o, "top_p", sp.top_p, "options"));
  QVL_RETURN_IF_ERROR(read_float(o, "min_p", sp.min_p, "options"));
  QVL_RETURN_IF_ERROR(read_float(o, "repeat_penalty", sp.repetition_penalty, "options"));
  QVL_RETURN_IF_ERROR(read_float(o, "presence_penalty", sp.presence_penalty, "options"));
  QVL_RETURN_IF_ERROR(read_float(o, "frequency_penalty", sp.frequency_penalty, "options"));
  int64_t top_k = sp.top_k;
  QVL_RETURN_IF_ERROR(read_int(o, "top_k", top_k, "options"));
  if (top_k < 0 || top_k > (1 << 30)) return Status::Error("options.top_k: must be >= 0, got " + std::to_string(top_k));
  sp.top_k = static_cast<int>(top_k);
  if (o.contains("seed") && !o["seed"].is_null()) {
    int64_t seed = 0;
    QVL_RETURN_IF_ERROR(read_int(o, "seed", seed, "options"));
    if (seed != -1) sp.seed = static_cast<uint64_t>(seed);  // -1: Ollama's default, a random seed (kept from parse_common)
  }
  int64_t num_predict = -1;
  QVL_RETURN_IF_ERROR(read_int(o, "num_predict", num_predict, "options"));
  if (num_predict >= 0) {
    if (num_predict > (1 << 20)) return Status::Error("options.num_predict: at most 1048576, got " + std::to_string(num_predict));
    r.options.max_tokens = static_cast<int>(num_predict);
  } else if (num_predict != -1 && num_predict != -2) {
    return Status::Error("options.num_predict: expected a count, -1 (no limit) or -2 (fill the context), got " +
                         std::to_string(num_predict));
  }
  QVL_RETURN_IF_ERROR(read_stop(o, "stop", r.options.stop, "options"));
  return sp.validate();
}

// The fields both endpoints refuse or ignore alike.
Status parse_common(const json& body, OllamaRequest& r) {
  QVL_RETURN_IF_ERROR(read_string(body, "model", r.model));
  QVL_RETURN_IF_ERROR(read_bool(body, "stream", r.stream));
  if (auto t = body.find("think"); t != body.end() && !t->is_null()) {
    if (t->is_boolean()) {
      r.think = t->get<bool>();
    } else if (t->is_string() && (*t == "high" || *t == "medium" || *t == "low")) {
      r.think = true;
    } else {
      return Status::Error("think: expected true, false, \"high\", \"medium\" or \"low\", got " + t->dump());
    }
  }
  if (auto f = body.find("format"); f != body.end() && !f->is_null() && !(f->is_string() && f->get<std::string>().empty())) {
    if (f->is_string() && f->get<std::string>() == "json") {
      r.options.json = JsonGrammar::any_object();
    } else if (f->is_object()) {
      auto g = JsonGrammar::from_schema(*f);
      if (!g.ok()) return Status::Error("format: " + g.status().message());
      r.options.json = *g;
    } else {
      return Status::Error("format: expected \"json\" or a JSON schema object, got " + f->dump());
    }
  }
  QVL_RETURN_IF_ERROR(read_logprobs(body, "logprobs", "top_logprobs", r.options.logprobs));
  r.logprobs = r.options.logprobs >= 0;
  r.options.sampling.seed = random_seed();
  return parse_options(body, r);
}

// "images": a list of base64 strings (the ollama client encodes files and bytes this way). An entry that
// is a video container becomes a video part. kinds: each entry's part, in order.
Status read_images(const json& obj, const std::string& where, OllamaRequest& r, std::vector<ContentPart::Kind>& kinds) {
  kinds.clear();
  auto it = obj.find("images");
  if (it == obj.end() || it->is_null()) return Status::Ok();
  if (!it->is_array()) return Status::Error(where + ".images: expected a list of base64 strings");
  for (size_t k = 0; k < it->size(); ++k) {
    const std::string w = where + ".images[" + std::to_string(k) + "]";
    if (!(*it)[k].is_string()) return Status::Error(w + ": expected a base64 string, got " + (*it)[k].type_name());
    const std::string& data = (*it)[k].get_ref<const std::string&>();
    if (base64_is_video(data)) {
      r.videos.push_back(VideoRef{data, w, {}});
      kinds.push_back(ContentPart::Kind::kVideo);
    } else if (base64_is_pdf(data)) {
      DocumentRef d;
      d.ref = data;
      d.where = w;
      r.documents.push_back(std::move(d));
      kinds.push_back(ContentPart::Kind::kDocument);
    } else {
      r.images.emplace_back(data, w);
      kinds.push_back(ContentPart::Kind::kImage);
    }
  }
  return Status::Ok();
}

// An Ollama message {role, content, images, tool_calls} as the chat-template JSON: images become image
// parts placed before the text, as Ollama places them.
Result<json> to_template_message(const json& m, const std::string& where, OllamaRequest& r) {
  if (!m.is_object()) return Status::Error(where + ": expected an object {\"role\", \"content\"}");
  json out = json::object();
  out["role"] = m.contains("role") ? m["role"] : json();
  std::string content;
  QVL_RETURN_IF_ERROR(read_string(m, "content", content, where));
  std::vector<ContentPart::Kind> kinds;
  const size_t before = r.images.size(), before_videos = r.videos.size(), before_docs = r.documents.size();
  QVL_RETURN_IF_ERROR(read_images(m, where, r, kinds));
  size_t n_images = kinds.size();
  // Images of system and assistant messages are dropped, as the chat template drops them.
  const bool shown = out["role"] == "user" || out["role"] == "tool";
  if (n_images > 0 && !shown) {
    r.images.resize(before);
    r.videos.resize(before_videos);
    r.documents.resize(before_docs);
    r.warnings.push_back(where + ".images: " + std::to_string(n_images) + " image(s) in a " +
                         (out["role"].is_string() ? out["role"].get<std::string>() : std::string("role-less")) +
                         " message are not shown to the model (the chat template shows images in user and tool "
                         "messages only); dropped");
    n_images = 0;
  }
  if (n_images == 0) {
    out["content"] = content;
  } else {
    json parts = json::array();
    for (ContentPart::Kind kind : kinds)
      parts.push_back(json{{"type", kind == ContentPart::Kind::kVideo      ? "video"
                                    : kind == ContentPart::Kind::kDocument ? "file"
                                                                           : "image"}});
    if (!content.empty()) parts.push_back(json{{"type", "text"}, {"text", content}});
    out["content"] = parts;
  }
  if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null()) out["tool_calls"] = *tc;
  // Ollama's name for an assistant message's reasoning, which the Thinking template reads back.
  if (auto th = m.find("thinking"); th != m.end() && th->is_string()) out["reasoning_content"] = *th;
  return out;
}

Status check_roles(const std::vector<ChatMessage>& messages) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return Status::Error("messages[" + std::to_string(i) + "].role: '" + role +
                           "' is not a role; expected system, user, assistant or tool");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<OllamaRequest> parse_ollama_chat(const json& body, const GenerateOptions& defaults, bool& empty) {
  OllamaRequest r;
  r.options = defaults;
  QVL_RETURN_IF_ERROR(parse_common(body, r));
  auto msgs = body.find("messages");
  empty = msgs == body.end() || msgs->is_null() || (msgs->is_array() && msgs->empty());
  if (empty) return r;
  if (!msgs->is_array()) return Status::Error("messages: expected a list of {\"role\", \"content\", \"images\"}");
  json converted = json::array();
  for (size_t i = 0; i < msgs->size(); ++i) {
    QVL_ASSIGN_OR_RETURN(json m, to_template_message((*msgs)[i], "messages[" + std::to_string(i) + "]", r));
    converted.push_back(std::move(m));
  }
  QVL_ASSIGN_OR_RETURN(r.messages, chat_messages_from_json(converted));
  QVL_RETURN_IF_ERROR(check_roles(r.messages));
  if (auto tools = body.find("tools"); tools != body.end()) {
    QVL_ASSIGN_OR_RETURN(r.options.chat.tools, chat_tools_from_json(*tools));
  }
  bool required = false;
  QVL_RETURN_IF_ERROR(read_tool_choice(body, r.options, r.tool_calls, required));
  if (required && r.options.json && body.contains("format") && !body["format"].is_null() &&
      !(body["format"].is_string() && body["format"].get<std::string>().empty()))
    return Status::Error("format: a JSON format cannot be combined with a required tool call (tool_choice)");
  return r;
}

Result<OllamaRequest> parse_ollama_generate(const json& body, const GenerateOptions& defaults, bool& empty) {
  OllamaRequest r;
  r.options = defaults;
  QVL_RETURN_IF_ERROR(parse_common(body, r));
  std::string prompt, system, suffix, tmpl;
  bool raw = false;
  QVL_RETURN_IF_ERROR(read_string(body, "prompt", prompt));
  QVL_RETURN_IF_ERROR(read_string(body, "system", system));
  QVL_RETURN_IF_ERROR(read_string(body, "suffix", suffix));
  QVL_RETURN_IF_ERROR(read_string(body, "template", tmpl));
  QVL_RETURN_IF_ERROR(read_bool(body, "raw", raw));
  if (!suffix.empty()) return Status::Error("suffix: fill-in-the-middle is not supported by this model");
  if (!tmpl.empty()) return Status::Error("template: custom templates are not supported; the model's chat template is used");
  if (raw) return Status::Error("raw: raw prompts are not supported; the model's chat template is always applied");
  if (auto c = body.find("context"); c != body.end() && c->is_array() && !c->empty()) {
    return Status::Error("context: continuing from token context is not supported; use /api/chat with the history");
  }
  std::vector<ContentPart::Kind> kinds;
  QVL_RETURN_IF_ERROR(read_images(body, "", r, kinds));
  for (auto& img : r.images) img.second = img.second.substr(1);  // "images[0]", not ".images[0]"
  for (auto& v : r.videos) v.where = v.where.substr(1);
  for (auto& d : r.documents) d.where = d.where.substr(1);
  const size_t n_images = kinds.size();
  empty = prompt.empty() && n_images == 0;
  if (empty) return r;
  if (!system.empty()) {
    ChatMessage s;
    s.role = "system";
    s.content_string = system;
    r.messages.push_back(std::move(s));
  }
  ChatMessage u;
  u.role = "user";
  u.content_is_string = false;
  for (ContentPart::Kind kind : kinds) u.content_parts.push_back({kind, ""});
  if (!prompt.empty()) u.content_parts.push_back({ContentPart::Kind::kText, prompt});
  r.messages.push_back(std::move(u));
  return r;
}

Result<std::string> ollama_pull_spec(const std::string& name) {
  const std::string hint = "; name a hub repository: hf.co/ORG/NAME (a GGUF repository with :QUANT, e.g. "
                           "hf.co/Qwen/Qwen3-VL-2B-Instruct-GGUF:Q4_K_M) or modelscope.cn/ORG/NAME";
  if (name.empty()) return Status::Error("model: empty" + hint);
  if (name.size() > 300) return Status::Error("model: " + std::to_string(name.size()) + " characters, over 300" + hint);
  std::string rest = name, prefix;
  auto lower = [](std::string s) {
    for (char& c : s) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    return s;
  };
  for (const auto& [host, source] : {std::pair<std::string, std::string>{"hf.co/", ""}, {"huggingface.co/", ""},
                                     {"https://huggingface.co/", ""}, {"modelscope.cn/", "modelscope:"}}) {
    if (lower(rest.substr(0, host.size())) == host) {
      rest = rest.substr(host.size());
      prefix = source;
      break;
    }
  }
  std::string tag;
  if (const size_t colon = rest.find(':'); colon != std::string::npos) {
    tag = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
  }
  auto word = [](const std::string& s, size_t most) {
    if (s.empty() || s.size() > most || s.find("..") != std::string::npos || s.front() == '.') return false;
    for (char c : s)
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.'))
        return false;
    return true;
  };
  const size_t slash = rest.find('/');
  if (slash == std::string::npos)
    return Status::Error("model: '" + name.substr(0, 80) + "' is an Ollama library name, which qvl cannot pull" + hint);
  if (rest.find('/', slash + 1) != std::string::npos || !word(rest.substr(0, slash), 96) || !word(rest.substr(slash + 1), 96))
    return Status::Error("model: '" + name.substr(0, 80) + "' is not ORG/NAME (letters, digits, '-', '_', '.')" + hint);
  if (!tag.empty() && !word(tag, 64)) return Status::Error("model: the tag '" + tag.substr(0, 40) + "' is not a quantization name" + hint);
  if (lower(tag) == "latest") tag.clear();
  return prefix + rest + (tag.empty() ? "" : ":" + tag);
}

}  // namespace qvl::server
