// The OpenAI Responses API request body (POST /v1/responses) read into a chat request: `input` (a string, or
// message items with input_text / input_image parts, function_call and function_call_output items),
// `instructions`, the previous response's conversation (previous_response_id), function tools, text.format,
// sampling and the fields a response object repeats. Field names in errors are the Responses API's.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "server/openai_request.h"

namespace qvl::server {

struct ResponsesRequest {
  ChatCompletionRequest chat;     // the conversation: instructions, the previous response's, this input
  nlohmann::ordered_json input;   // this request's input items in chat-completions form (kept for follow-ups)
  // This request's input as the Responses API's items (GET /v1/responses/{id}/input_items): a string input is one
  // user message; a message's string content becomes one input_text (output_text for the assistant) part; an
  // item without an id gets one (msg_, fc_, fco_, rs_).
  nlohmann::ordered_json input_items;
  std::string instructions;
  std::string previous_response_id;
  bool store = true;
  bool logprobs = false;          // include: ["message.output_text.logprobs"]
  // What a response object repeats of its request: tools, tool_choice, text, temperature, top_p,
  // max_output_tokens, metadata, parallel_tool_calls, truncation, top_logprobs.
  nlohmann::ordered_json echo;
};

// previous_response_id, read first: the handler looks it up before the rest is read. Empty when absent.
Result<std::string> read_previous_response_id(const nlohmann::ordered_json& body);

// Reads a parsed body (an object) over `defaults`; `history` is the previous response's conversation in
// chat-completions form (an empty array when there is none). An error names the Responses API field.
Result<ResponsesRequest> parse_responses(const nlohmann::ordered_json& body, const nlohmann::ordered_json& history,
                                         const GenerateOptions& defaults);

}  // namespace qvl::server
