// Splitting a Thinking model's answer into reasoning and answer: whole, and streamed in every chunking.
#include <gtest/gtest.h>

#include <random>

#include "chat/reasoning.h"

namespace qvl {
namespace {

TEST(Reasoning, SplitsAtTheCloseTag) {
  ReasoningSplit s = split_reasoning("The user asks 2+2.\nIt is 4.\n</think>\n\nFour.");
  EXPECT_TRUE(s.closed);
  EXPECT_EQ(s.reasoning, "The user asks 2+2.\nIt is 4.");
  EXPECT_EQ(s.content, "Four.");
  s = split_reasoning("\n\nstill thinking when the tokens ran out\n");
  EXPECT_FALSE(s.closed);
  EXPECT_EQ(s.reasoning, "still thinking when the tokens ran out");
  EXPECT_EQ(s.content, "");
  s = split_reasoning("</think>\n\n{\"a\": 1}\n");  // a constrained answer: no reasoning
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "{\"a\": 1}\n");
  s = split_reasoning("r</think>a</think>b");  // only the first tag ends the reasoning
  EXPECT_EQ(s.reasoning, "r");
  EXPECT_EQ(s.content, "a</think>b");
  s = split_reasoning("r </thin");
  EXPECT_EQ(s.reasoning, "r </thin");
}

// Streamed in pieces of every size (and random cuts), the deltas add up to the whole split, and no
// reasoning reaches the answer or the reverse.
TEST(Reasoning, StreamingEqualsTheWholeSplit) {
  const std::vector<std::string> texts = {
      "The user asks 2+2.\nIt is 4.\n</think>\n\nFour.",
      "\n\nlead\n\n\nnewlines\n\n</think>\n\n\n\nanswer\n\nwith breaks\n",
      "no close tag at all </thi",
      "</think>\n\n{\"a\": 1}",
      "a</think",
      "x</think>y</think>z",
      "<</</t</think>\n<</think>",
      "",
      "\n\n\n",
  };
  std::mt19937 rng(5);
  for (const std::string& t : texts) {
    const ReasoningSplit want = split_reasoning(t);
    for (int trial = 0; trial < 40; ++trial) {
      ReasoningStream s;
      std::string reasoning, content;
      size_t i = 0;
      const size_t fixed = static_cast<size_t>(trial % 8) + 1;
      while (i < t.size()) {
        const size_t n = trial < 8 ? fixed : 1 + rng() % 6;
        ReasoningStream::Delta d = s.push(std::string_view(t).substr(i, n));
        reasoning += d.reasoning;
        content += d.content;
        i += n;
      }
      ReasoningStream::Delta d = s.finish();
      reasoning += d.reasoning;
      content += d.content;
      EXPECT_EQ(reasoning, want.reasoning) << "text " << testing::PrintToString(t) << " trial " << trial;
      EXPECT_EQ(content, want.content) << "text " << testing::PrintToString(t) << " trial " << trial;
    }
  }
}

}  // namespace
}  // namespace qvl
