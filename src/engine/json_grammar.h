// Structured output: a JSON schema compiled into a table of nodes, and a byte-level acceptor that says,
// byte by byte, whether the text so far can still become a JSON value the schema accepts. The token mask
// (json_constraint.h) runs the acceptor over the vocabulary at each decode step, so the answer always parses and
// validates.
//
// Supported (what OpenAI's strict structured outputs and Ollama's `format` are used with): `type` (one or a
// list: object, array, string, number, integer, boolean, null), `properties` + `required` (no other keys:
// additionalProperties false, as strict mode requires), `items`, `minItems`/`maxItems`, `minLength`/
// `maxLength`, `enum`, `const`, `anyOf` and `$ref` to `#/$defs/...` or `#/definitions/...` where the
// alternatives begin with different characters, and annotations (`title`, `description`, `default`,
// `examples`, `$schema`, `$id`, `strict`). Refused with the keyword named: `pattern`, `format`,
// `minimum`/`maximum` and the other numeric bounds, `oneOf`/`allOf`/`not`, `if`, `patternProperties`,
// `additionalProperties` with a schema or true beside `properties`, recursive `$ref`, and alternatives that
// begin alike. The any-JSON-object mode (`json_object`, Ollama's "json") takes any keys and any values.
//
// Whitespace in the form of llama.cpp's JSON grammars (`ws ::= | " " | "\n" [ \t]{0,20}`): a gap between
// tokens holds nothing, one space, or one newline and indentation of spaces and tabs; never '\r', never two
// spaces or two newlines; none before the root value (the text before it, the assistant header or
// "<tool_call>\n", ends a line) and none after it (the end, or the forced text after it, follows). The
// indentation is at most kIndentPerLevel bytes per nesting level, where llama.cpp allows 20 at any depth:
// json.dumps(indent=4), nlohmann's dump(4) and tab indentation pass at every depth, while a gap near the
// root, where most gaps are, holds a few bytes. Sampled at temperature 1 from the random-weight test model
// (20 seeds), a forced tool call took about 53 tokens on average and a schema answer 35; with a flat 20,
// 63 and 42; with the earlier rule (any 8 bytes of \t \r \n and spaces per gap), 64 and 43.
//
// Termination with any model (even random weights): a gap holds at most 1 + kIndentPerLevel * kMaxDepth
// bytes, numbers at most kMaxNumberChars characters (exponents two digits: every number fits a double;
// integers kMaxIntegerChars: every one fits 64 bits), nesting at most kMaxDepth levels; strings end where
// the model closes them or at maxLength.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "util/status.h"

namespace qvl {

struct JsonNode {
  enum Kind : uint8_t {
    kAny,        // any JSON value
    kObject,     // properties (by their JSON-escaped names) with required ones; or, with any_keys, any object
    kArray,      // items of one node, min/max count
    kString,     // min/max length in code points
    kNumber,     // a JSON number
    kInteger,    // a JSON number without fraction or exponent
    kLiterals,   // one of a few JSON texts: enum / const values, true/false, null
    kAlternatives,  // one of several nodes, told apart by their first character
  };
  Kind kind = kAny;
  bool any_keys = false;                 // kObject: any keys, values kAny
  std::vector<std::string> names;        // kObject: property names as they appear between the quotes
  std::vector<int32_t> children;         // kObject: the properties' nodes; kArray: {items}; kAlternatives
  uint64_t required = 0;                 // kObject: bit i: names[i] must appear
  int64_t min_count = 0, max_count = -1; // kArray: items; kString: code points (-1: no limit)
  std::vector<std::string> literals;     // kLiterals: the compact JSON texts
  // kObject: the value of property `chooser` (a kLiterals node) picks the node of property `chosen`, which
  // may only follow it: chosen_nodes[i] for literal i (a tool call's name picks its arguments' schema).
  int32_t chooser = -1, chosen = -1;
  std::vector<int32_t> chosen_nodes;
};

class JsonGrammar {
 public:
  static constexpr int kMaxDepth = 32;
  static constexpr int kIndentPerLevel = 4;  // json.dumps(indent=4): the widest indentation in common use
  static constexpr int kMaxNumberChars = 24;
  // '-' and 18 digits fit int64, 19 digits uint64: nlohmann's parser (and so the tool-call parser) reads a
  // longer integer as a double, 1.1111111111155555e+23, which is no longer an integer.
  static constexpr int kMaxIntegerChars = 19;
  static constexpr int kMaxProperties = 64;
  static constexpr int kMaxLiterals = 64;

  // A schema (a JSON object); an error names the keyword and where it is ("properties.items.pattern").
  static Result<std::shared_ptr<const JsonGrammar>> from_schema(const nlohmann::ordered_json& schema);
  // Any JSON object (OpenAI json_object, Ollama format "json").
  static std::shared_ptr<const JsonGrammar> any_object();
  // {"name": <one of the names>, "arguments": <that function's parameters>}, name first: a tool call. A
  // function whose parameters the compiler refuses gets any object as its arguments.
  static Result<std::shared_ptr<const JsonGrammar>> tool_call(
      const std::vector<std::pair<std::string, const nlohmann::ordered_json*>>& functions);

  const JsonNode& node(int32_t i) const { return nodes_[static_cast<size_t>(i)]; }
  int32_t root() const { return root_; }

 private:
  friend class SchemaCompiler;
  std::vector<JsonNode> nodes_;
  int32_t root_ = 0;
};

// The acceptor's state: a stack of frames, one per value being read. feed() changes it and says whether the
// byte was acceptable (a refused byte leaves the state unspecified: mark() before and undo() after, as the
// token mask does, or copy). Every change is logged while logging is on, so undo_to(mark) restores an
// earlier state in time proportional to the bytes fed since.
class JsonAcceptor {
 public:
  explicit JsonAcceptor(std::shared_ptr<const JsonGrammar> grammar);

  bool feed(uint8_t c);
  bool feed(const std::string& bytes) {
    for (char c : bytes)
      if (!feed(static_cast<uint8_t>(c))) return false;
    return true;
  }
  // The text so far is a whole value the schema accepts (the answer may end here).
  bool accepting() const;
  // Only the end may follow (the root value is closed).
  bool finished() const { return n_ == 0; }

  // The top frame reads string content, with no escape or UTF-8 sequence pending: bytes the token mask can
  // judge from a token's precomputed class. Returns the code points still allowed (-1: no limit).
  bool in_plain_string(int64_t& room) const;

  void set_logging(bool on) { logging_ = on; log_.clear(); }
  size_t mark() const { return log_.size(); }
  void undo_to(size_t mark);

 private:
  // Frame kinds and their phases (see json_grammar.cpp).
  struct Frame {
    int32_t node = 0;
    uint8_t kind = 0;   // FrameKind
    uint8_t phase = 0;
    uint8_t ws = 0;     // the whitespace in the current gap (json_grammar.cpp)
    uint8_t aux = 0;    // string: UTF-8 continuation bytes still due; \u digits read
    uint16_t pos = 0;   // object key / literal: bytes matched; number: characters
    int16_t prop = -1;  // object: the property whose value is being read
    int16_t choice = -1;  // object: the literal its chooser property took
    int64_t count = 0;  // string: code points; array: items
    uint64_t seen = 0;  // object: properties given; literal: candidates
    uint64_t cand = 0;  // object: key candidates
  };
  enum : uint8_t { kValue, kObj, kArr, kStr, kNum, kLit };

  Frame& mut(int i);
  void set_n(int n);
  bool push(const Frame& f);
  bool may_start(int32_t node, uint8_t c) const;
  bool start_value(int32_t node, uint8_t c);
  bool value_done();
  bool feed_top(uint8_t c);
  bool feed_string(Frame& f, uint8_t c);
  bool feed_number(uint8_t c);
  bool feed_literal(uint8_t c);
  bool feed_object(uint8_t c);
  bool feed_array(uint8_t c);
  bool whitespace(int i, uint8_t c);
  static bool number_can_end(uint8_t phase);

  struct Undo {
    int16_t index;  // -1: the stack size changed to `n`
    int16_t n;
    Frame frame;
  };

  std::shared_ptr<const JsonGrammar> grammar_;
  std::vector<Frame> stack_;  // stack_[0..n_) in use
  int n_ = 0;
  bool logging_ = false;
  std::vector<Undo> log_;
};

}  // namespace qvl
