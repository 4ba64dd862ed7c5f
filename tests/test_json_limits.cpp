// The scan that bounds a JSON body's depth, value count and string length before it is parsed.
#include <gtest/gtest.h>

#include "server/json_limits.h"
#include "tokenizer/chat_json.h"

namespace qvl::test {
namespace {

using server::check_json_limits;
using server::JsonLimits;

TEST(JsonLimits, DeepNestingIsRefusedWherePlainRequestsPass) {
  const std::string chat = R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"[[[{{{"}]}]})";
  EXPECT_TRUE(check_json_limits(chat).ok());
  std::string deep = "{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + ",\"b\":1}";
  Status s = check_json_limits(deep);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("more than 64"), std::string::npos) << s.message();
  // Exactly at the limit passes, one more fails; brackets inside strings do not count.
  JsonLimits l;
  l.max_depth = 3;
  EXPECT_TRUE(check_json_limits("[[[\"[[[[\"]]]", l).ok());
  EXPECT_FALSE(check_json_limits("[[[[]]]]", l).ok());
  EXPECT_TRUE(check_json_limits(R"(["\"[[[[[["])", l).ok());
}

TEST(JsonLimits, ValueCountAndStringLength) {
  JsonLimits l;
  l.max_values = 10;
  EXPECT_TRUE(check_json_limits("[1,2,3,true,null,\"x\"]", l).ok());
  EXPECT_FALSE(check_json_limits("[1,2,3,4,5,6,7,8,9,10,11]", l).ok());
  l = JsonLimits{};
  l.max_string_bytes = 8;
  EXPECT_TRUE(check_json_limits(R"({"k":"1234567"})", l).ok());
  Status s = check_json_limits(R"({"k":"123456789012"})", l);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("longer than 8"), std::string::npos) << s.message();
}

TEST(ChatJsonLimits, MessagesAndPartsAreCounted) {
  nlohmann::ordered_json msg = {{"role", "user"}, {"content", "hi"}};
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  for (size_t i = 0; i < kMaxChatMessages; ++i) msgs.push_back(msg);
  EXPECT_TRUE(chat_messages_from_json(msgs).ok());
  msgs.push_back(msg);
  auto r = chat_messages_from_json(msgs);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("over the limit of 1024"), std::string::npos) << r.status().message();

  nlohmann::ordered_json parts = nlohmann::ordered_json::array();
  for (size_t i = 0; i <= kMaxChatParts; ++i) parts.push_back({{"type", "text"}, {"text", "a"}});
  auto p = chat_messages_from_json(nlohmann::ordered_json::array({{{"role", "user"}, {"content", parts}}}));
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("messages[0].content"), std::string::npos) << p.status().message();
}

}  // namespace
}  // namespace qvl::test
