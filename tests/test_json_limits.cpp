// The scan that bounds a JSON body's depth, value count and string length before it is parsed.
#include <gtest/gtest.h>

#include <chrono>

#include "server/json_limits.h"
#include "chat/chat_json.h"

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

namespace qvl::test {
namespace {

// One object of many keys parses in quadratic time (an ordered object finds each key by a linear search):
// the scan refuses an object over max_object_keys, and a document whose objects add up to more than
// max_key_comparisons, in linear time; ordinary requests pass.
TEST(JsonLimits, KeysPerObjectAndInAllAreBounded) {
  auto object = [](size_t n) {
    std::string s = "{";
    for (size_t k = 0; k < n; ++k) s += (k ? ",\"k" : "\"k") + std::to_string(k) + "\":1";
    return s + "}";
  };
  JsonLimits l;
  EXPECT_TRUE(check_json_limits(object(4096), l).ok());
  Status s = check_json_limits(object(4097), l);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("more than 4096 keys"), std::string::npos) << s.message();
  // Keys inside strings and arrays do not count; keys of nested objects count for their own object.
  EXPECT_TRUE(check_json_limits("[\"a:b:c\"," + object(4000) + "," + object(4000) + "]", l).ok());
  // Many objects of many keys: 1M keys as 300 objects of ~3500 keys pass each object's bound but not the sum.
  std::string many = "[";
  for (int k = 0; k < 300; ++k) many += (k ? "," : "") + object(3500);
  many += "]";
  s = check_json_limits(many, l);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("key comparisons"), std::string::npos) << s.message();
  // 100k keys in one object: refused at once (the parser would take ~20 s).
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(check_json_limits(object(100000), l).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
}

}  // namespace
}  // namespace qvl::test
