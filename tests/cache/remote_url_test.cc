// The remote-cache URL (remote_url.h): the forms DICE_REMOTE_CACHE accepts,
// the causes a malformed one is refused for, and the masking that keeps
// passwords out of every message (issue 20 items 6 and 7).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "dice/cache/remote_cache.h"
#include "dice/cache/remote_url.h"

namespace dice::cache {
namespace {

// The error message ParseRemoteUrl gives for `url` (fails the test when it parses).
std::string ErrorOf(const std::string& url) {
  auto u = ParseRemoteUrl(url);
  EXPECT_FALSE(u.ok()) << url << " should be refused";
  if (u.ok()) return std::string();
  EXPECT_EQ(u.status().code(), StatusCode::kInvalidArgument) << url;
  return u.status().message();
}

TEST(RemoteUrlTest, HttpAndHttpsTakeTheirDefaultPorts) {
  auto plain = ParseRemoteUrl("http://ok");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->scheme, RemoteScheme::kHttp);
  EXPECT_EQ(plain->host, "ok");
  EXPECT_EQ(plain->port, 80);
  auto tls = ParseRemoteUrl("https://cache.example.org/");
  ASSERT_TRUE(tls.ok()) << tls.status().ToString();
  EXPECT_EQ(tls->scheme, RemoteScheme::kHttps);
  EXPECT_EQ(tls->port, 443);
  auto port = ParseRemoteUrl("HTTP://10.0.0.7:8470");
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  EXPECT_EQ(port->host, "10.0.0.7");
  EXPECT_EQ(port->port, 8470);
  EXPECT_TRUE(port->password.empty());
}

TEST(RemoteUrlTest, RedisTakesUserPasswordPortAndDatabase) {
  auto bare = ParseRemoteUrl("redis://cache-1");
  ASSERT_TRUE(bare.ok()) << bare.status().ToString();
  EXPECT_EQ(bare->scheme, RemoteScheme::kRedis);
  EXPECT_EQ(bare->port, 6379);
  EXPECT_EQ(bare->db, 0);
  EXPECT_TRUE(bare->user.empty());
  EXPECT_TRUE(bare->password.empty());

  auto full = ParseRemoteUrl("redis://alice:s3cret@cache-1:6380/3");
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_EQ(full->user, "alice");
  EXPECT_EQ(full->password, "s3cret");
  EXPECT_EQ(full->host, "cache-1");
  EXPECT_EQ(full->port, 6380);
  EXPECT_EQ(full->db, 3);

  auto password_only = ParseRemoteUrl("redis://:pa%40ss%3Aw%2Frd@[::1]:7000/");
  ASSERT_TRUE(password_only.ok()) << password_only.status().ToString();
  EXPECT_TRUE(password_only->user.empty());
  EXPECT_EQ(password_only->password, "pa@ss:w/rd") << "percent escapes are decoded";
  EXPECT_EQ(password_only->host, "::1");
  EXPECT_EQ(password_only->port, 7000);

  auto raw_at = ParseRemoteUrl("redis://bob:p@ss/word@host");
  ASSERT_TRUE(raw_at.ok()) << raw_at.status().ToString();
  EXPECT_EQ(raw_at->password, "p@ss/word") << "the last '@' ends the credentials";
  EXPECT_EQ(raw_at->host, "host");
}

TEST(RemoteUrlTest, MalformedUrlsAreRefusedNamingTheCause) {
  EXPECT_NE(ErrorOf("cache.example:8470").find("no scheme"), std::string::npos);
  EXPECT_NE(ErrorOf("cache.example:8470").find("cache.example:8470"), std::string::npos) << "quotes the URL";
  EXPECT_NE(ErrorOf("ftp://host:21").find("unknown scheme 'ftp'"), std::string::npos);
  EXPECT_NE(ErrorOf("memcached://host").find("unknown scheme 'memcached'"), std::string::npos);
  EXPECT_NE(ErrorOf("rediss://host:6380").find("not supported"), std::string::npos);
  EXPECT_NE(ErrorOf("http://").find("missing host"), std::string::npos);
  EXPECT_NE(ErrorOf("http://:8470").find("missing host"), std::string::npos);
  EXPECT_NE(ErrorOf("redis://:pw@:6379").find("missing host"), std::string::npos);
  EXPECT_NE(ErrorOf("http://host:").find("bad port ''"), std::string::npos);
  EXPECT_NE(ErrorOf("http://host:0").find("bad port '0'"), std::string::npos);
  EXPECT_NE(ErrorOf("http://host:65536").find("bad port '65536'"), std::string::npos);
  EXPECT_NE(ErrorOf("redis://host:63x9").find("bad port '63x9'"), std::string::npos);
  EXPECT_NE(ErrorOf("redis://host:-1").find("bad port"), std::string::npos);
  EXPECT_NE(ErrorOf("redis://host/abc").find("bad database 'abc'"), std::string::npos);
  EXPECT_NE(ErrorOf("redis://host/1/2").find("bad database"), std::string::npos);
  EXPECT_NE(ErrorOf("http://host:8470/v1").find("path"), std::string::npos);
  EXPECT_NE(ErrorOf("http://host:8470?x=1").find("query"), std::string::npos);
  EXPECT_NE(ErrorOf("http://ho st:8470").find("character"), std::string::npos);
  EXPECT_NE(ErrorOf("http://user:pw@host").find("DICE_REMOTE_TOKEN"), std::string::npos);
  EXPECT_NE(ErrorOf("redis://justpassword@host").find("without a ':'"), std::string::npos);
  EXPECT_NE(ErrorOf("redis://alice:@host").find("empty password"), std::string::npos);
  EXPECT_NE(ErrorOf("redis://alice:bad%zzescape@host").find("percent escape"), std::string::npos);
  EXPECT_NE(ErrorOf("redis://[::1:6379").find("unclosed"), std::string::npos);
}

TEST(RemoteUrlTest, MaskingHidesThePasswordInEveryForm) {
  EXPECT_EQ(MaskUrlCredentials("redis://alice:s3cret@host:6379/2"), "redis://alice:***@host:6379/2");
  EXPECT_EQ(MaskUrlCredentials("redis://:s3cret@host:6379"), "redis://:***@host:6379");
  EXPECT_EQ(MaskUrlCredentials("redis://s3cret@host"), "redis://***@host") << "a lone user part may be a password";
  EXPECT_EQ(MaskUrlCredentials("redis://bob:p@ss/word@host"), "redis://bob:***@host");
  EXPECT_EQ(MaskUrlCredentials("alice:s3cret@host:6379"), "alice:***@host:6379") << "no scheme";
  EXPECT_EQ(MaskUrlCredentials("http://host:8470"), "http://host:8470");
  EXPECT_EQ(MaskUrlCredentials("redis://host/0"), "redis://host/0");
  EXPECT_EQ(MaskUrlCredentials(""), "");
}

TEST(RemoteUrlTest, ErrorsNeverQuoteThePassword) {
  for (const char* url : {"redis://alice:s3cret@host:99999", "redis://alice:s3cret@:6379", "redis://alice:s3cret@host/x",
                          "redi://alice:s3cret@host", "redis://alice:s3cret@ho st", "http://alice:s3cret@host"}) {
    const std::string message = ErrorOf(url);
    EXPECT_EQ(message.find("s3cret"), std::string::npos) << message;
    EXPECT_NE(message.find("***"), std::string::npos) << message;
  }
}

TEST(RemoteUrlTest, FromEnvNamesTheVariableAndTheCauseWithThePasswordMasked) {
  ::setenv("DICE_REMOTE_CACHE", "redis://alice:s3cret@cache-1:notaport", 1);
  auto bad = RemoteCacheOptions::FromEnv();
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  const std::string message = bad.status().message();
  EXPECT_EQ(message.rfind("DICE_REMOTE_CACHE: ", 0), 0u) << message;
  EXPECT_NE(message.find("bad port 'notaport'"), std::string::npos) << message;
  EXPECT_NE(message.find("redis://alice:***@cache-1:notaport"), std::string::npos) << message;
  EXPECT_EQ(message.find("s3cret"), std::string::npos) << message;

  ::setenv("DICE_REMOTE_CACHE", "redis://:s3cret@cache-1:6379/1", 1);
  auto good = RemoteCacheOptions::FromEnv();
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->url, "redis://:s3cret@cache-1:6379/1");
  ::unsetenv("DICE_REMOTE_CACHE");
}

TEST(RemoteUrlTest, RemoteCacheWithAMalformedUrlRefusesEveryCallWithoutIo) {
  RemoteCacheOptions o;
  o.url = "redis://alice:s3cret@cache-1:0";
  RemoteCache remote(o);
  EXPECT_EQ(remote.shown_url(), "redis://alice:***@cache-1:0");
  std::string why;
  EXPECT_FALSE(remote.Lookup(std::string(64, 'a'), nullptr, &why).has_value());
  EXPECT_NE(why.find("bad port '0'"), std::string::npos) << why;
  EXPECT_EQ(why.find("s3cret"), std::string::npos) << why;
  WinnerRecord rec;
  rec.task_key = std::string(64, 'a');
  auto pushed = remote.Push(rec);
  EXPECT_FALSE(pushed.ok());
  EXPECT_EQ(remote.counters().requests, 0);
}

}  // namespace
}  // namespace dice::cache
