// The wire parser's fast path (cache/src/wire_scan.h) and the streamed
// content hash: WinnerFromWireJson gives the same record, or the same
// error, as parsing the whole text with nlohmann did; ContentHash is the
// SHA-256 of the length-prefixed fields as before.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "../../cache/src/wire_scan.h"
#include "dice/cache/http_server.h"
#include "dice/cache/store.h"
#include "dice/core/ir.h"

namespace dice::cache {
namespace {

using json = nlohmann::json;

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng() & 0xff);
  return out;
}

WinnerRecord Record(std::string cubin) {
  WinnerRecord r;
  r.task_key = std::string(64, 'a');
  r.graph_canonical = "dice-ir v1\ninput %0 f32 rank=2\n%1 = relu(%0)\noutput %1\n";
  r.input_specs = "f32[8,8]";
  r.arch = "sm_90";
  r.gpu_name = "NVIDIA H200";
  r.origin = "template:x";
  r.candidate_hash = "c1";
  r.source = "extern \"C\" __global__ void k() { /* \"cubin_base64\":\"AAAA\" } */ }";
  r.cubin = std::move(cubin);
  r.launch_plan_json = R"({"grid":[1,1,1],"block":[32,1,1]})";
  r.baseline_us = 10;
  r.best_us = 5;
  r.speedup = 2;
  r.versions_json = "{}";
  r.created_at = 1764000000;
  r.content_hash = ContentHash(r);
  return r;
}

// The record the whole-text parse gives for `text` (nlohmann, then
// dice::Base64Decode), for the fields the fast path touches.
void ExpectSameAsWholeParse(const std::string& text, const WinnerRecord& got) {
  const json j = json::parse(text);
  auto cubin = Base64Decode(j.at("cubin_base64").get<std::string>());
  ASSERT_TRUE(cubin.ok());
  EXPECT_EQ(got.cubin, *cubin);
  EXPECT_EQ(got.source, j.at("source").get<std::string>());
  EXPECT_EQ(got.task_key, j.at("task_key").get<std::string>());
  EXPECT_EQ(got.content_hash, j.at("content_hash").get<std::string>());
}

TEST(WireFastPathTest, RoundTripsCubinsOfEveryPaddingAndSize) {
  for (size_t n : {0, 1, 2, 3, 4, 5, 6, 7, 64, 65536, 66001, 500000}) {
    const WinnerRecord want = Record(RandomBytes(n, n + 1));
    const std::string text = WinnerToWireJson(want, true);
    std::string rest, cubin;  // the server's own answers take the fast path
    std::string_view b64;
    ASSERT_TRUE(wire::SplitPayload(text, &rest, &b64)) << n;
    ASSERT_TRUE(wire::DecodeBase64(b64, &cubin)) << n;
    EXPECT_EQ(cubin, want.cubin);
    EXPECT_EQ(rest.size(), text.size() - b64.size());  // only the payload was cut out
    auto got = WinnerFromWireJson(text);
    ASSERT_TRUE(got.ok()) << n << ": " << got.status().ToString();
    EXPECT_EQ(got->cubin, want.cubin) << n;
    EXPECT_EQ(got->source, want.source);
    EXPECT_EQ(got->launch_plan_json, want.launch_plan_json);
    EXPECT_EQ(got->content_hash, want.content_hash);
    EXPECT_EQ(ContentHash(*got), want.content_hash);
  }
}

TEST(WireFastPathTest, OtherClientsLayoutsParseAsTheWholeTextDoes) {
  const WinnerRecord want = Record(RandomBytes(3000, 7));
  json j = json::parse(WinnerToWireJson(want, true));
  const std::string b64 = j["cubin_base64"].get<std::string>();
  std::vector<std::string> texts;
  texts.push_back(j.dump(2));  // pretty-printed, keys sorted: cubin_base64 before source
  // "\/" is a JSON escape of '/': the value holds a backslash, so the
  // fast path steps aside and the whole-text parse decodes it.
  std::string escaped;
  for (char c : b64) escaped += c == '/' ? std::string("\\/") : std::string(1, c);
  ASSERT_NE(escaped, b64);
  std::string t = j.dump();
  t.replace(t.find(b64), b64.size(), escaped);
  texts.push_back(t);
  // Nested values holding braces, quotes and the key name inside strings.
  json nested = j;
  nested["extra"] = json{{"a", "}\"cubin_base64\":\"QQ==\"{"}, {"b", json::array({1, "]", json::object()})}};
  texts.push_back(nested.dump());
  // An escaped key that spells cubin_base64 ("cubin\u005fbase64").
  std::string k = j.dump();
  k.replace(k.find("\"cubin_base64\""), 14, "\"cubin\\u005fbase64\"");
  texts.push_back(k);
  for (const std::string& text : texts) {
    auto got = WinnerFromWireJson(text);
    ASSERT_TRUE(got.ok()) << got.status().ToString() << "\n" << text.substr(0, 200);
    EXPECT_EQ(got->cubin, want.cubin);
    ExpectSameAsWholeParse(text, *got);
  }
}

TEST(WireFastPathTest, ErrorsAreTheWholeTextParsesErrors) {
  const std::string text = WinnerToWireJson(Record(RandomBytes(300, 9)), true);
  const size_t at = text.find("\"cubin_base64\":\"") + 16;
  std::string bad_char = text;
  bad_char[at + 10] = '-';
  auto got = WinnerFromWireJson(bad_char);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("field 'cubin_base64'"), std::string::npos) << got.status().ToString();
  EXPECT_NE(got.status().message().find("malformed base64 text (character 10)"), std::string::npos)
      << got.status().ToString();

  std::string bad_length = text;
  bad_length.erase(at, 1);
  got = WinnerFromWireJson(bad_length);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("not a multiple of 4"), std::string::npos) << got.status().ToString();

  std::string control = text;  // a raw newline inside a JSON string is not JSON
  control[at + 4] = '\n';
  got = WinnerFromWireJson(control);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().message(), "malformed JSON");

  got = WinnerFromWireJson(text.substr(0, text.size() - 1));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().message(), "malformed JSON");

  json no_source = json::parse(text);
  no_source.erase("source");
  got = WinnerFromWireJson(no_source.dump());
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().message(), "missing field 'source'");
}

TEST(WireFastPathTest, SplitPayloadRefusesWhatItCannotBeSureOf) {
  std::string rest;
  std::string_view b64;
  EXPECT_TRUE(wire::SplitPayload(R"( {"a":1, "cubin_base64" : "QUJD" ,"b":[{}]} )", &rest, &b64));
  EXPECT_EQ(b64, "QUJD");
  EXPECT_EQ(rest, R"( {"a":1, "cubin_base64" : "" ,"b":[{}]} )");
  for (const char* t : {R"({"cubin_base64":"QUJD","cubin_base64":"QUJD"})", R"({"cubin_base64":"QU\/D"})",
                        R"({"cubin_base64":1})", R"(["cubin_base64","QUJD"])", R"({"a":"QUJD"})",
                        R"({"cubin_base64":"QUJD"} x)", R"({"cubin_base64":"QUJD")", R"({"a\"":1,"cubin_base64":"QUJD"})"}) {
    EXPECT_FALSE(wire::SplitPayload(t, &rest, &b64)) << t;
  }
}

// Every text of length 4 and 8 over an alphabet with the awkward
// characters: the fast decoder accepts exactly what dice::Base64Decode
// accepts, with the same bytes.
TEST(WireFastPathTest, DecodeBase64AgreesWithCoreBase64Decode) {
  const std::string chars = "AQw+/=-\n";
  std::vector<std::string> texts;
  for (int n = 0; n < 8 * 8 * 8 * 8; ++n) {
    std::string t;
    for (int k = 0, v = n; k < 4; ++k, v /= 8) t += chars[static_cast<size_t>(v % 8)];
    texts.push_back(t);
    texts.push_back("QUJD" + t);
    texts.push_back(t + "QUJD");
  }
  texts.push_back("");
  texts.push_back("QUJ");
  int accepted = 0;
  for (const std::string& t : texts) {
    std::string fast;
    const bool ok = wire::DecodeBase64(t, &fast);
    auto core = Base64Decode(t);
    ASSERT_EQ(ok, core.ok()) << "'" << t << "'";
    if (ok) {
      EXPECT_EQ(fast, *core) << "'" << t << "'";
      ++accepted;
    }
  }
  EXPECT_GT(accepted, 100);
  const std::string big = RandomBytes(100001, 3);
  std::string back;
  ASSERT_TRUE(wire::DecodeBase64(Base64Encode(big), &back));
  EXPECT_EQ(back, big);
}

// The hash is fed to SHA-256 field by field now: the same digest as the
// concatenation "<n>:source<n>:cubin<n>:launch_plan" it was computed over.
TEST(ContentHashTest, IsTheSha256OfTheLengthPrefixedFields) {
  for (size_t n : {0, 1, 65536}) {
    WinnerRecord r = Record(RandomBytes(n, 11));
    const std::string concat = std::to_string(r.source.size()) + ":" + r.source + std::to_string(r.cubin.size()) +
                               ":" + r.cubin + std::to_string(r.launch_plan_json.size()) + ":" + r.launch_plan_json;
    EXPECT_EQ(ContentHash(r), ir::Sha256Hex(concat));
  }
  WinnerRecord empty;
  EXPECT_EQ(ContentHash(empty), ir::Sha256Hex("0:0:0:"));
  EXPECT_EQ(ContentHash(empty), "63cab8e921e413242a44bf4e8fdc999d3834c0883aed7afd6199c1ffa98c1948");  // sha256sum of the 6 bytes
}

}  // namespace
}  // namespace dice::cache
