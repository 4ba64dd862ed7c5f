// The schema compiler and the byte-level acceptor of json_grammar.h.
//
// Frames and their phases:
//   kValue  a value of `node` is due; whitespace (none before the root value), then its first byte starts
//           the concrete frame
//   kObj    0 after '{'   1 in a key   2 after the key   3 reading the value   4 after the value   5 after ','
//   kArr    0 after '['   1 after an item   2 after ','   3 reading an item
//   kStr    0 content     1 after '\'   2 in \uXXXX (aux: digits read, pos: the value)   3, 4, 5: the
//           "\u" and digits of the low surrogate a high one needs; in content, aux counts UTF-8
//           continuation bytes still due, pos the allowed range of the next one (after E0, ED, F0, F4)
//   kNum    0 start 1 '-' 2 '0' 3 integer digits 4 '.' 5 fraction 6 'e' 7 exponent sign 8 exponent digits
//           (aux: exponent digits, at most 2)
//   kLit    seen: the literals still matching, pos: bytes matched
// A number or literal ends at the first byte that cannot continue it, which then goes to the parent.
// A frame's ws is the whitespace of the gap it is at: 0 none, kWsSpace one space, else a newline and ws - 1
// bytes of indentation (spaces and tabs).
#include "engine/json_grammar.h"

#include <bitset>
#include <map>
#include <nlohmann/json.hpp>

namespace qvl {

using json = nlohmann::ordered_json;

namespace {

// Nodes every grammar has, for the parts of kAny values.
enum : int32_t { kAnyNode = 0, kAnyObjectNode = 1, kAnyArrayNode = 2, kAnyStringNode = 3, kNumberNode = 4, kWordNode = 5 };

void add_builtin_nodes(std::vector<JsonNode>& nodes) {
  nodes.resize(6);
  nodes[kAnyNode].kind = JsonNode::kAny;
  nodes[kAnyObjectNode].kind = JsonNode::kObject;
  nodes[kAnyObjectNode].any_keys = true;
  nodes[kAnyObjectNode].children = {kAnyNode};
  nodes[kAnyArrayNode].kind = JsonNode::kArray;
  nodes[kAnyArrayNode].children = {kAnyNode};
  nodes[kAnyStringNode].kind = JsonNode::kString;
  nodes[kNumberNode].kind = JsonNode::kNumber;
  nodes[kWordNode].kind = JsonNode::kLiterals;
  nodes[kWordNode].literals = {"true", "false", "null"};
}

// Exponents of at most two digits: every number stays within a double's range (parsers such as
// nlohmann's refuse 1e400; JavaScript and Python would read infinity).
constexpr int kMaxExponentDigits = 2;

// Frame::ws after the one space a gap may hold; a newline and k bytes of indentation are 1 + k.
constexpr uint8_t kWsSpace = 0xFF;
static_assert(1 + JsonGrammar::kIndentPerLevel * JsonGrammar::kMaxDepth < kWsSpace);

bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// The compiler

class SchemaCompiler {
 public:
  SchemaCompiler(const json& root, JsonGrammar& g) : root_(root), g_(g) {}

  Result<int32_t> compile(const json& s, const std::string& where) {
    // Nesting that a value must follow (objects' properties, arrays' items, $refs) is bounded so that the
    // acceptor's depth limit never leaves an answer without a way to go on.
    if (depth_ > JsonGrammar::kMaxDepth - 4)
      return Status::Error("schema at " + where + ": nested deeper than " + std::to_string(JsonGrammar::kMaxDepth - 4) + " levels");
    if (g_.nodes_.size() > kMaxNodes)
      return Status::Error("schema at " + where + ": over " + std::to_string(kMaxNodes) + " nodes");
    ++depth_;
    auto r = compile_at(s, where);
    --depth_;
    return r;
  }

 private:
  static constexpr size_t kMaxNodes = 20000;
  static constexpr size_t kMaxText = 4096;  // a property name or enum value, as JSON text (Frame::pos is 16-bit)

  Result<int32_t> compile_at(const json& s, const std::string& where) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return kAnyNode;
      return Status::Error("schema at " + where + ": false accepts nothing");
    }
    if (!s.is_object()) return Status::Error("schema at " + where + ": expected an object, got " + std::string(s.type_name()));
    static const char* const kAllowed[] = {"type", "properties", "required", "additionalProperties", "items",
                                           "minItems", "maxItems", "minLength", "maxLength", "enum", "const",
                                           "anyOf", "$ref", "$defs", "definitions", "title", "description",
                                           "default", "examples", "$schema", "$id", "$comment", "strict"};
    for (auto it = s.begin(); it != s.end(); ++it) {
      bool ok = false;
      for (const char* k : kAllowed) ok = ok || it.key() == k;
      if (!ok)
        return Status::Error("schema at " + where + ": keyword '" + it.key() +
                             "' is not supported (supported: type, properties, required, items, minItems, maxItems, "
                             "minLength, maxLength, enum, const, anyOf, $ref to $defs)");
    }
    if (auto r = s.find("$ref"); r != s.end()) return compile_ref(*r, where);
    if (auto e = s.find("enum"); e != s.end()) {
      if (!e->is_array() || e->empty()) return Status::Error("schema at " + where + ".enum: expected a non-empty array");
      if (e->size() > JsonGrammar::kMaxLiterals)
        return Status::Error("schema at " + where + ".enum: at most " + std::to_string(JsonGrammar::kMaxLiterals) + " values");
      JsonNode n;
      n.kind = JsonNode::kLiterals;
      for (const json& v : *e) n.literals.push_back(v.dump());
      for (const std::string& l : n.literals)
        if (l.size() > kMaxText) return Status::Error("schema at " + where + ".enum: a value over " + std::to_string(kMaxText) + " bytes");
      return add(std::move(n));
    }
    if (auto c = s.find("const"); c != s.end()) {
      JsonNode n;
      n.kind = JsonNode::kLiterals;
      n.literals = {c->dump()};
      if (n.literals[0].size() > kMaxText) return Status::Error("schema at " + where + ".const: over " + std::to_string(kMaxText) + " bytes");
      return add(std::move(n));
    }
    if (auto a = s.find("anyOf"); a != s.end()) {
      if (!a->is_array() || a->empty()) return Status::Error("schema at " + where + ".anyOf: expected a non-empty array");
      std::vector<int32_t> alts;
      for (size_t i = 0; i < a->size(); ++i) {
        auto c = compile((*a)[i], where + ".anyOf[" + std::to_string(i) + "]");
        if (!c.ok()) return c.status();
        alts.push_back(*c);
      }
      return alternatives(std::move(alts), where + ".anyOf");
    }
    const auto t = s.find("type");
    if (t == s.end()) {
      if (s.contains("properties")) return typed(s, "object", where);
      if (s.contains("items")) return typed(s, "array", where);
      return kAnyNode;
    }
    if (t->is_string()) return typed(s, t->get<std::string>(), where);
    if (!t->is_array() || t->empty()) return Status::Error("schema at " + where + ".type: expected a name or a list of names");
    std::vector<int32_t> alts;
    for (const json& name : *t) {
      if (!name.is_string()) return Status::Error("schema at " + where + ".type: expected names, got " + name.dump());
      auto c = typed(s, name.get<std::string>(), where);
      if (!c.ok()) return c.status();
      alts.push_back(*c);
    }
    return alternatives(std::move(alts), where + ".type");
  }

  int32_t add(JsonNode n) {
    g_.nodes_.push_back(std::move(n));
    return static_cast<int32_t>(g_.nodes_.size() - 1);
  }

  Result<int32_t> compile_ref(const json& ref, const std::string& where) {
    if (!ref.is_string()) return Status::Error("schema at " + where + ".$ref: expected a string");
    const std::string r = ref.get<std::string>();
    std::string section, name;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p = prefix;
      if (r.rfind(p, 0) == 0) {
        section = p.substr(2, p.size() - 3);
        name = r.substr(p.size());
      }
    }
    if (r == "#") return Status::Error("schema at " + where + ".$ref: a recursive schema ('#') is not supported");
    if (section.empty()) return Status::Error("schema at " + where + ".$ref: only '#/$defs/NAME' and '#/definitions/NAME' are supported, got '" + r + "'");
    for (const std::string& open : refs_)
      if (open == r) return Status::Error("schema at " + where + ".$ref: '" + r + "' refers to itself; recursive schemas are not supported");
    if (auto m = compiled_refs_.find(r); m != compiled_refs_.end()) return m->second;  // nodes are shared, never copied
    const auto sec = root_.find(section);
    if (sec == root_.end() || !sec->is_object() || !sec->contains(name))
      return Status::Error("schema at " + where + ".$ref: '" + r + "' is not defined");
    refs_.push_back(r);
    auto c = compile((*sec)[name], section + "." + name);
    refs_.pop_back();
    if (c.ok()) compiled_refs_[r] = *c;
    return c;
  }

  Result<int32_t> typed(const json& s, const std::string& type, const std::string& where) {
    auto count = [&](const char* key, int64_t& out) -> Status {
      if (auto v = s.find(key); v != s.end()) {
        if (!v->is_number_integer() || v->get<int64_t>() < 0)
          return Status::Error("schema at " + where + "." + key + ": expected a count, got " + v->dump());
        out = v->get<int64_t>();
      }
      return Status::Ok();
    };
    JsonNode n;
    if (type == "object") {
      n.kind = JsonNode::kObject;
      const auto props = s.find("properties");
      const auto extra = s.find("additionalProperties");
      const bool extra_false = extra != s.end() && extra->is_boolean() && !extra->get<bool>();
      if ((props == s.end() || (props->is_object() && props->empty())) && s.contains("required") &&
          s["required"].is_array() && !s["required"].empty())
        return Status::Error("schema at " + where + ".required: names properties that 'properties' does not define");
      if (props == s.end() || (props->is_object() && props->empty())) {
        if (extra_false) {  // {} only
          n.any_keys = false;
          return add(std::move(n));
        }
        if (extra != s.end() && !(extra->is_boolean() && extra->get<bool>()))
          return Status::Error("schema at " + where + ".additionalProperties: a schema for extra properties is not supported");
        n.any_keys = true;
        n.children = {kAnyNode};
        return add(std::move(n));
      }
      if (!props->is_object()) return Status::Error("schema at " + where + ".properties: expected an object");
      if (extra != s.end() && !extra_false)
        return Status::Error("schema at " + where + ".additionalProperties: only false is supported beside properties (strict mode)");
      if (props->size() > JsonGrammar::kMaxProperties)
        return Status::Error("schema at " + where + ".properties: at most " + std::to_string(JsonGrammar::kMaxProperties) + " properties");
      for (auto it = props->begin(); it != props->end(); ++it) {
        auto c = compile(it.value(), where + ".properties." + it.key());
        if (!c.ok()) return c.status();
        const std::string quoted = json(it.key()).dump();
        if (quoted.size() > kMaxText) return Status::Error("schema at " + where + ".properties: a name over " + std::to_string(kMaxText) + " bytes");
        n.names.push_back(quoted.substr(1, quoted.size() - 2));
        n.children.push_back(*c);
      }
      if (auto req = s.find("required"); req != s.end()) {
        if (!req->is_array()) return Status::Error("schema at " + where + ".required: expected an array of names");
        for (const json& r : *req) {
          bool found = false;
          size_t i = 0;
          for (auto it = props->begin(); it != props->end(); ++it, ++i)
            if (r.is_string() && it.key() == r.get<std::string>()) {
              n.required |= uint64_t{1} << i;
              found = true;
            }
          if (!found) return Status::Error("schema at " + where + ".required: " + r.dump() + " is not one of the properties");
        }
      }
      return add(std::move(n));
    }
    if (type == "array") {
      n.kind = JsonNode::kArray;
      int32_t items = kAnyNode;
      if (auto it = s.find("items"); it != s.end()) {
        auto c = compile(*it, where + ".items");
        if (!c.ok()) return c.status();
        items = *c;
      }
      n.children = {items};
      QVL_RETURN_IF_ERROR(count("minItems", n.min_count));
      QVL_RETURN_IF_ERROR(count("maxItems", n.max_count));
      if (n.max_count >= 0 && n.max_count < n.min_count)
        return Status::Error("schema at " + where + ": maxItems is below minItems");
      return add(std::move(n));
    }
    if (type == "string") {
      n.kind = JsonNode::kString;
      QVL_RETURN_IF_ERROR(count("minLength", n.min_count));
      QVL_RETURN_IF_ERROR(count("maxLength", n.max_count));
      if (n.max_count >= 0 && n.max_count < n.min_count)
        return Status::Error("schema at " + where + ": maxLength is below minLength");
      return add(std::move(n));
    }
    if (type == "number" || type == "integer") {
      n.kind = type == "number" ? JsonNode::kNumber : JsonNode::kInteger;
      return add(std::move(n));
    }
    if (type == "boolean" || type == "null") {
      n.kind = JsonNode::kLiterals;
      n.literals = type == "null" ? std::vector<std::string>{"null"} : std::vector<std::string>{"true", "false"};
      return add(std::move(n));
    }
    return Status::Error("schema at " + where + ".type: unknown type '" + type + "'");
  }

  // The bytes a value of node i can begin with.
  std::bitset<256> first_bytes(int32_t i) const {
    const JsonNode& n = g_.nodes_[static_cast<size_t>(i)];
    std::bitset<256> b;
    switch (n.kind) {
      case JsonNode::kAny: b.set(); break;
      case JsonNode::kObject: b.set('{'); break;
      case JsonNode::kArray: b.set('['); break;
      case JsonNode::kString: b.set('"'); break;
      case JsonNode::kNumber:
      case JsonNode::kInteger:
        b.set('-');
        for (int c = '0'; c <= '9'; ++c) b.set(static_cast<size_t>(c));
        break;
      case JsonNode::kLiterals:
        for (const std::string& l : n.literals) b.set(static_cast<uint8_t>(l[0]));
        break;
      case JsonNode::kAlternatives:
        for (int32_t c : n.children) b |= first_bytes(c);
        break;
    }
    return b;
  }

  Result<int32_t> alternatives(std::vector<int32_t> alts, const std::string& where) {
    if (alts.size() == 1) return alts[0];
    std::bitset<256> all;
    for (int32_t a : alts) {
      const std::bitset<256> f = first_bytes(a);
      if ((all & f).any())
        return Status::Error("schema at " + where + ": alternatives that can begin with the same character are not supported "
                             "(e.g. two object schemas, or two strings); they must differ in type");
      all |= f;
    }
    JsonNode n;
    n.kind = JsonNode::kAlternatives;
    n.children = std::move(alts);
    return add(std::move(n));
  }

  const json& root_;
  JsonGrammar& g_;
  std::vector<std::string> refs_;              // the $refs being compiled (a cycle is refused)
  std::map<std::string, int32_t> compiled_refs_;  // each $ref compiled once: no exponential expansion
  int depth_ = 0;
};

Result<std::shared_ptr<const JsonGrammar>> JsonGrammar::from_schema(const json& schema) {
  auto g = std::make_shared<JsonGrammar>();
  add_builtin_nodes(g->nodes_);
  SchemaCompiler c(schema, *g);
  auto root = c.compile(schema, "the root");
  if (!root.ok()) return root.status();
  g->root_ = *root;
  return std::shared_ptr<const JsonGrammar>(std::move(g));
}

Result<std::shared_ptr<const JsonGrammar>> JsonGrammar::tool_call(
    const std::vector<std::pair<std::string, const json*>>& functions) {
  if (functions.empty() || functions.size() > kMaxLiterals)
    return Status::Error("a tool call needs 1 to " + std::to_string(kMaxLiterals) + " functions, got " + std::to_string(functions.size()));
  auto g = std::make_shared<JsonGrammar>();
  add_builtin_nodes(g->nodes_);
  JsonNode names;
  names.kind = JsonNode::kLiterals;
  JsonNode obj;
  obj.kind = JsonNode::kObject;
  obj.names = {"name", "arguments"};
  obj.required = 3;
  obj.chooser = 0;
  obj.chosen = 1;
  for (const auto& [name, params] : functions) {
    names.literals.push_back(json(name).dump());
    int32_t args = kAnyObjectNode;
    if (params) {
      // The parameters compiled into this grammar; refused ones (a "format", a "pattern") leave any object.
      SchemaCompiler c(*params, *g);
      const size_t before = g->nodes_.size();
      auto node = c.compile(*params, "parameters of " + name);
      if (node.ok() && g->nodes_[static_cast<size_t>(*node)].kind == JsonNode::kObject) args = *node;
      else g->nodes_.resize(before);
    }
    obj.chosen_nodes.push_back(args);
  }
  g->nodes_.push_back(std::move(names));
  obj.children = {static_cast<int32_t>(g->nodes_.size() - 1), kAnyObjectNode};
  g->nodes_.push_back(std::move(obj));
  g->root_ = static_cast<int32_t>(g->nodes_.size() - 1);
  return std::shared_ptr<const JsonGrammar>(std::move(g));
}

std::shared_ptr<const JsonGrammar> JsonGrammar::any_object() {
  static const std::shared_ptr<const JsonGrammar> g = [] {
    auto m = std::make_shared<JsonGrammar>();
    add_builtin_nodes(m->nodes_);
    m->root_ = kAnyObjectNode;
    return std::shared_ptr<const JsonGrammar>(std::move(m));
  }();
  return g;
}

// ---------------------------------------------------------------------------------------------------------
// The acceptor

JsonAcceptor::JsonAcceptor(std::shared_ptr<const JsonGrammar> grammar) : grammar_(std::move(grammar)) {
  stack_.resize(JsonGrammar::kMaxDepth + 1);
  Frame f;
  f.kind = kValue;
  f.node = grammar_->root();
  stack_[0] = f;
  n_ = 1;
}

JsonAcceptor::Frame& JsonAcceptor::mut(int i) {
  if (logging_) log_.push_back(Undo{static_cast<int16_t>(i), 0, stack_[static_cast<size_t>(i)]});
  return stack_[static_cast<size_t>(i)];
}

void JsonAcceptor::set_n(int n) {
  if (logging_) log_.push_back(Undo{-1, static_cast<int16_t>(n_), Frame{}});
  n_ = n;
}

bool JsonAcceptor::push(const Frame& f) {
  if (n_ >= JsonGrammar::kMaxDepth) return false;
  mut(n_) = f;
  set_n(n_ + 1);
  return true;
}

void JsonAcceptor::undo_to(size_t mark) {
  while (log_.size() > mark) {
    const Undo& u = log_.back();
    if (u.index < 0) n_ = u.n;
    else stack_[static_cast<size_t>(u.index)] = u.frame;
    log_.pop_back();
  }
}

// A gap holds nothing, one space, or a newline and at most kIndentPerLevel spaces and tabs per frame open:
// the gaps of the container at stack index i are at nesting level i + 1 (its closing bracket at i, a value
// after ':' at i - 1: both given room to spare).
bool JsonAcceptor::whitespace(int i, uint8_t c) {
  const uint8_t ws = stack_[static_cast<size_t>(i)].ws;
  uint8_t next = 0;
  if (ws == 0) next = c == ' ' ? kWsSpace : c == '\n' ? 1 : 0;
  else if (ws != kWsSpace && ws <= JsonGrammar::kIndentPerLevel * (i + 1) && (c == ' ' || c == '\t'))
    next = static_cast<uint8_t>(ws + 1);
  if (next == 0) return false;
  mut(i).ws = next;
  return true;
}

bool JsonAcceptor::number_can_end(uint8_t phase) { return phase == 2 || phase == 3 || phase == 5 || phase == 8; }

bool JsonAcceptor::accepting() const {
  if (n_ == 0) return true;
  if (n_ != 1) return false;
  const Frame& f = stack_[0];
  if (f.kind == kNum) return number_can_end(f.phase);
  if (f.kind == kLit) {
    const JsonNode& n = grammar_->node(f.node);
    for (size_t i = 0; i < n.literals.size(); ++i)
      if ((f.seen >> i & 1) && n.literals[i].size() == f.pos) return true;
  }
  return false;
}

bool JsonAcceptor::in_plain_string(int64_t& room) const {
  if (n_ == 0) return false;
  const Frame& f = stack_[static_cast<size_t>(n_ - 1)];
  if (f.kind != kStr || f.phase != 0 || f.aux != 0) return false;
  const JsonNode& n = grammar_->node(f.node);
  room = n.max_count < 0 ? -1 : n.max_count - f.count;
  return true;
}

bool JsonAcceptor::feed(uint8_t c) {
  if (n_ == 0) return false;  // the root value is closed: only the end may follow
  return feed_top(c);
}

bool JsonAcceptor::feed_top(uint8_t c) {
  const int top = n_ - 1;
  Frame& f = stack_[static_cast<size_t>(top)];
  switch (f.kind) {
    case kValue: {
      // Not before the root value: the text before it (the assistant header, "<tool_call>\n") ends a line.
      if (top > 0 && whitespace(top, c)) return true;
      const int32_t node = f.node;
      set_n(top);  // the concrete frame replaces it
      return start_value(node, c);
    }
    case kObj: return feed_object(c);
    case kArr: return feed_array(c);
    case kStr: return feed_string(mut(top), c);
    case kNum: return feed_number(c);
    case kLit: return feed_literal(c);
  }
  return false;
}

bool JsonAcceptor::may_start(int32_t node_id, uint8_t c) const {
  const JsonNode& a = grammar_->node(node_id);
  switch (a.kind) {
    case JsonNode::kAny: return true;
    case JsonNode::kObject: return c == '{';
    case JsonNode::kArray: return c == '[';
    case JsonNode::kString: return c == '"';
    case JsonNode::kNumber:
    case JsonNode::kInteger: return c == '-' || is_digit(c);
    case JsonNode::kLiterals:
      for (const std::string& l : a.literals)
        if (static_cast<uint8_t>(l[0]) == c) return true;
      return false;
    case JsonNode::kAlternatives:
      for (int32_t child : a.children)
        if (may_start(child, c)) return true;
      return false;
  }
  return false;
}

bool JsonAcceptor::start_value(int32_t node_id, uint8_t c) {
  const JsonNode& n = grammar_->node(node_id);
  Frame f;
  f.node = node_id;
  switch (n.kind) {
    case JsonNode::kAny:
      if (c == '{') return start_value(kAnyObjectNode, c);
      if (c == '[') return start_value(kAnyArrayNode, c);
      if (c == '"') return start_value(kAnyStringNode, c);
      if (c == '-' || is_digit(c)) return start_value(kNumberNode, c);
      return start_value(kWordNode, c);
    case JsonNode::kObject:
      if (c != '{') return false;
      f.kind = kObj;
      return push(f);
    case JsonNode::kArray:
      if (c != '[') return false;
      f.kind = kArr;
      return push(f);
    case JsonNode::kString:
      if (c != '"') return false;
      f.kind = kStr;
      return push(f);
    case JsonNode::kNumber:
    case JsonNode::kInteger:
      if (c != '-' && !is_digit(c)) return false;
      f.kind = kNum;
      return push(f) && feed_number(c);
    case JsonNode::kLiterals:
      f.kind = kLit;
      f.seen = n.literals.size() >= 64 ? ~uint64_t{0} : (uint64_t{1} << n.literals.size()) - 1;
      return push(f) && feed_literal(c);
    case JsonNode::kAlternatives:
      // The alternatives begin with different bytes (checked when compiled): the one that may take c.
      for (int32_t child : n.children)
        if (may_start(child, c)) return start_value(child, c);
      return false;
  }
  return false;
}

// The top frame is complete: pop it and move its parent past the value.
bool JsonAcceptor::value_done() {
  const Frame done = stack_[static_cast<size_t>(n_ - 1)];
  set_n(n_ - 1);
  if (n_ == 0) return true;
  Frame& p = mut(n_ - 1);
  p.ws = 0;
  if (p.kind == kObj) {
    // A chooser property's literal: which one it was (the one matched whole).
    const JsonNode& on = grammar_->node(p.node);
    if (on.chooser >= 0 && p.prop == on.chooser && done.kind == kLit) {
      const JsonNode& ln = grammar_->node(done.node);
      for (size_t i = 0; i < ln.literals.size(); ++i)
        if ((done.seen >> i & 1) && ln.literals[i].size() == done.pos) p.choice = static_cast<int16_t>(i);
    }
    p.phase = p.phase == 1 ? 2 : 4;  // a free key read, or a value
  }
  else if (p.kind == kArr) {
    p.phase = 1;
    ++p.count;
  }
  return true;
}

bool JsonAcceptor::feed_string(Frame& f, uint8_t c) {
  const JsonNode& n = grammar_->node(f.node);
  const bool room = n.max_count < 0 || f.count < n.max_count;
  if (f.aux > 0 && f.phase == 0) {  // a UTF-8 continuation byte is due
    uint8_t lo = 0x80, hi = 0xBF;
    switch (f.pos) {
      case 1: lo = 0xA0; break;  // after E0: no overlong
      case 2: hi = 0x9F; break;  // after ED: no surrogate
      case 3: lo = 0x90; break;  // after F0: no overlong
      case 4: hi = 0x8F; break;  // after F4: at most U+10FFFF
    }
    if (c < lo || c > hi) return false;
    f.pos = 0;
    --f.aux;
    return true;
  }
  if (f.phase == 1) {  // after a backslash
    if (c == 'u') {
      f.phase = 2;
      f.aux = 0;
      f.pos = 0;
      return true;
    }
    if (c != '"' && c != '\\' && c != '/' && c != 'b' && c != 'f' && c != 'n' && c != 'r' && c != 't') return false;
    f.phase = 0;
    return true;
  }
  if (f.phase == 2 || f.phase == 5) {  // \uXXXX (pos: the value so far); 5: the low half of a surrogate pair
    if (!is_hex(c)) return false;
    const uint16_t v = static_cast<uint16_t>(f.pos * 16 + (is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10));
    // Refused at the first digit that makes a parser refuse the string: a lone low surrogate (DC00-DFFF),
    // or a pair's second half outside DC00-DFFF.
    if (f.phase == 2 && f.aux == 1 && v >= 0xDC && v <= 0xDF) return false;
    if (f.phase == 5 && ((f.aux == 0 && v != 0xD) || (f.aux == 1 && v < 0xDC))) return false;
    f.pos = v;
    if (++f.aux < 4) return true;
    f.aux = 0;
    f.phase = f.phase == 2 && v >= 0xD800 && v <= 0xDBFF ? 3 : 0;  // a high surrogate: its pair must follow
    f.pos = 0;
    return true;
  }
  if (f.phase == 3) {  // after a high surrogate: "\u" of the low one (one character with it, counted once)
    if (c != '\\') return false;
    f.phase = 4;
    return true;
  }
  if (f.phase == 4) {
    if (c != 'u') return false;
    f.phase = 5;
    f.aux = 0;
    f.pos = 0;
    return true;
  }
  if (c == '"') {
    if (f.count < n.min_count) return false;
    return value_done();
  }
  if (c < 0x20 || !room) return false;
  if (c == '\\') {
    f.phase = 1;
    ++f.count;
    return true;
  }
  if (c < 0x80) {
    ++f.count;
    return true;
  }
  // A UTF-8 lead byte: C2-DF one continuation, E0-EF two, F0-F4 three.
  if (c >= 0xC2 && c <= 0xDF) f.aux = 1;
  else if (c >= 0xE0 && c <= 0xEF) f.aux = 2;
  else if (c >= 0xF0 && c <= 0xF4) f.aux = 3;
  else return false;
  f.pos = c == 0xE0 ? 1 : c == 0xED ? 2 : c == 0xF0 ? 3 : c == 0xF4 ? 4 : 0;
  ++f.count;
  return true;
}

bool JsonAcceptor::feed_number(uint8_t c) {
  const int top = n_ - 1;
  const Frame& f = stack_[static_cast<size_t>(top)];
  const bool integer = grammar_->node(f.node).kind == JsonNode::kInteger;
  int next = -1;
  switch (f.phase) {
    case 0: next = c == '-' ? 1 : c == '0' ? 2 : is_digit(c) ? 3 : -1; break;
    case 1: next = c == '0' ? 2 : is_digit(c) ? 3 : -1; break;
    case 2:
    case 3:
      if (f.phase == 3 && is_digit(c)) next = 3;
      else if (c == '.' && !integer) next = 4;
      else if ((c == 'e' || c == 'E') && !integer) next = 6;
      break;
    case 4: next = is_digit(c) ? 5 : -1; break;
    case 5: next = is_digit(c) ? 5 : (c == 'e' || c == 'E') ? 6 : -1; break;
    case 6: next = (c == '+' || c == '-') ? 7 : is_digit(c) ? 8 : -1; break;
    case 7:
    case 8: next = is_digit(c) && f.aux < kMaxExponentDigits ? 8 : -1; break;
  }
  if (next >= 0) {
    // Within kMaxNumberChars (kMaxIntegerChars), with room left for the digit that '-', '.', 'e' or a sign
    // must be followed by.
    const bool needs_digit = next == 1 || next == 4 || next == 6 || next == 7;
    const int most = integer ? JsonGrammar::kMaxIntegerChars : JsonGrammar::kMaxNumberChars;
    if (f.pos + 1 + (needs_digit ? 1 : 0) > most) return false;
    Frame& m = mut(top);
    m.phase = static_cast<uint8_t>(next);
    ++m.pos;
    if (next == 8) ++m.aux;  // exponent digits
    return true;
  }
  if (!number_can_end(f.phase) || top == 0) return false;  // nothing follows a root value
  return value_done() && feed_top(c);
}

bool JsonAcceptor::feed_literal(uint8_t c) {
  const int top = n_ - 1;
  const Frame& f = stack_[static_cast<size_t>(top)];
  const JsonNode& n = grammar_->node(f.node);
  uint64_t keep = 0;
  bool complete = false;
  for (size_t i = 0; i < n.literals.size(); ++i) {
    if (!(f.seen >> i & 1)) continue;
    const std::string& l = n.literals[i];
    if (l.size() == f.pos) complete = true;
    else if (static_cast<uint8_t>(l[f.pos]) == c) keep |= uint64_t{1} << i;
  }
  if (keep) {
    Frame& m = mut(top);
    m.seen = keep;
    ++m.pos;
    return true;
  }
  if (!complete || top == 0) return false;
  return value_done() && feed_top(c);
}

bool JsonAcceptor::feed_object(uint8_t c) {
  const int top = n_ - 1;
  const Frame& f = stack_[static_cast<size_t>(top)];
  const JsonNode& n = grammar_->node(f.node);
  const uint64_t all = n.names.size() >= 64 ? ~uint64_t{0} : (uint64_t{1} << n.names.size()) - 1;
  auto start_key = [&]() -> bool {
    Frame& m = mut(top);
    m.ws = 0;
    m.phase = 1;
    if (n.any_keys) {
      Frame k;
      k.kind = kStr;
      k.node = kAnyStringNode;
      return push(k);
    }
    m.cand = all & ~m.seen;
    if (n.chosen >= 0 && m.choice < 0) m.cand &= ~(uint64_t{1} << n.chosen);  // only after its chooser
    m.pos = 0;
    return m.cand != 0;
  };
  switch (f.phase) {
    case 0:
    case 5:
      if (whitespace(top, c)) return true;
      if (c == '"') return start_key();
      if (c == '}' && f.phase == 0 && (n.required & ~f.seen) == 0) return value_done();
      return false;
    case 1: {  // a schema key, matched against the properties not given yet
      // A name's next byte first: an escaped name (a\"b) has quotes inside, always after a backslash, so
      // a '"' that continues a name never also closes one.
      uint64_t keep = 0;
      for (size_t i = 0; i < n.names.size(); ++i)
        if ((f.cand >> i & 1) && f.pos < n.names[i].size() && static_cast<uint8_t>(n.names[i][f.pos]) == c)
          keep |= uint64_t{1} << i;
      if (keep) {
        Frame& m = mut(top);
        m.cand = keep;
        ++m.pos;
        return true;
      }
      if (c == '"') {
        for (size_t i = 0; i < n.names.size(); ++i)
          if ((f.cand >> i & 1) && n.names[i].size() == f.pos) {
            Frame& m = mut(top);
            m.prop = static_cast<int16_t>(i);
            m.seen |= uint64_t{1} << i;
            m.phase = 2;
            m.ws = 0;
            return true;
          }
      }
      return false;
    }
    case 2: {
      if (whitespace(top, c)) return true;
      if (c != ':') return false;
      Frame& m = mut(top);
      m.phase = 3;
      m.ws = 0;
      Frame v;
      v.kind = kValue;
      v.node = n.any_keys ? n.children[0]
               : (f.prop == n.chosen && f.choice >= 0) ? n.chosen_nodes[static_cast<size_t>(f.choice)]
                                                       : n.children[static_cast<size_t>(f.prop)];
      return push(v);
    }
    case 4:
      if (whitespace(top, c)) return true;
      if (c == ',' && (n.any_keys || (all & ~f.seen) != 0)) {
        Frame& m = mut(top);
        m.phase = 5;
        m.ws = 0;
        return true;
      }
      if (c == '}' && (n.required & ~f.seen) == 0) return value_done();
      return false;
  }
  return false;
}

bool JsonAcceptor::feed_array(uint8_t c) {
  const int top = n_ - 1;
  const Frame& f = stack_[static_cast<size_t>(top)];
  const JsonNode& n = grammar_->node(f.node);
  const bool more = n.max_count < 0 || f.count < n.max_count;
  switch (f.phase) {
    case 0:
    case 2: {
      if (whitespace(top, c)) return true;
      if (c == ']' && f.phase == 0 && n.min_count == 0) return value_done();
      if (!more) return false;
      Frame& m = mut(top);
      m.phase = 3;
      m.ws = 0;
      return start_value(n.children[0], c);
    }
    case 1:
      if (whitespace(top, c)) return true;
      if (c == ',' && more) {
        Frame& m = mut(top);
        m.phase = 2;
        m.ws = 0;
        return true;
      }
      if (c == ']' && f.count >= n.min_count) return value_done();
      return false;
  }
  return false;
}

}  // namespace qvl
