// Implementation of dice/cache/remote_url.h.
#include "dice/cache/remote_url.h"

#include <cctype>
#include <cstdint>
#include <limits>
#include <string>

namespace dice::cache {
namespace {

// Where the authority of `text` begins: after "scheme://", 0 without one.
size_t AuthorityBegin(const std::string& text) {
  const size_t sep = text.find("://");
  return sep == std::string::npos ? 0 : sep + 3;
}
// The '@' that ends the credentials: the last '@' after `begin`, so a
// password holding an unescaped '/', '?', '#' or '@' is still taken (and
// masked) whole. npos when there are no credentials.
size_t CredentialsEnd(const std::string& text, size_t begin) {
  const size_t at = text.rfind('@');
  return at == std::string::npos || at < begin ? std::string::npos : at;
}

// A decimal integer of at most 10 digits (no sign) in [lo, hi].
bool ParseInt(const std::string& s, int64_t lo, int64_t hi, int* out) {
  if (s.empty() || s.size() > 10) return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// RFC 3986 percent-decoding; false on a '%' not followed by two hex digits.
bool PercentDecode(const std::string& s, std::string* out) {
  out->clear();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out->push_back(s[i]);
      continue;
    }
    const int hi = i + 1 < s.size() ? HexDigit(s[i + 1]) : -1;
    const int lo = i + 2 < s.size() ? HexDigit(s[i + 2]) : -1;
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return true;
}

bool HostChar(char c, bool ipv6) {
  if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_') return true;
  return ipv6 && (c == ':' || c == '%');
}

// Splits "host[:port]" / "[v6][:port]" into u->host and u->port.
Status ParseHostPort(const std::string& hostport, RemoteUrl* u) {
  std::string port_text;
  bool has_port = false;
  bool ipv6 = false;
  if (!hostport.empty() && hostport[0] == '[') {
    const size_t close = hostport.find(']');
    if (close == std::string::npos) return Status(StatusCode::kInvalidArgument, "unclosed '[' in the host");
    ipv6 = true;
    u->host = hostport.substr(1, close - 1);
    const std::string after = hostport.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return Status(StatusCode::kInvalidArgument, "unexpected '" + after + "' after the host");
      has_port = true;
      port_text = after.substr(1);
    }
  } else {
    const size_t colon = hostport.rfind(':');
    u->host = hostport.substr(0, colon);
    if (colon != std::string::npos) {
      has_port = true;
      port_text = hostport.substr(colon + 1);
    }
  }
  if (u->host.empty()) return Status(StatusCode::kInvalidArgument, "missing host");
  for (char c : u->host) {
    if (!HostChar(c, ipv6)) {
      return Status(StatusCode::kInvalidArgument, "host '" + u->host + "' has a character a host name cannot have");
    }
  }
  if (has_port && !ParseInt(port_text, 1, 65535, &u->port)) {
    return Status(StatusCode::kInvalidArgument, "bad port '" + port_text + "' (expected an integer in 1..65535)");
  }
  return Status::Ok();
}

// "user:password" (already cut at its '@') into u->user / u->password.
Status ParseCredentials(const std::string& info, RemoteUrl* u) {
  const size_t colon = info.find(':');
  if (colon == std::string::npos) {
    return Status(StatusCode::kInvalidArgument,
                  "credentials without a ':' (write redis://user:password@host or redis://:password@host)");
  }
  if (!PercentDecode(info.substr(0, colon), &u->user) || !PercentDecode(info.substr(colon + 1), &u->password)) {
    return Status(StatusCode::kInvalidArgument, "bad percent escape in the user or password (write %XX)");
  }
  if (u->password.empty()) return Status(StatusCode::kInvalidArgument, "empty password");
  return Status::Ok();
}

// The path, query and fragment after the authority: "" or "/" for HTTP,
// "", "/" or "/<db>" for Redis.
Status ParsePath(const std::string& path, RemoteUrl* u) {
  if (path.find_first_of("?#") != std::string::npos) {
    return Status(StatusCode::kInvalidArgument, "a query or fragment is not supported");
  }
  if (u->scheme != RemoteScheme::kRedis) {
    if (path.find_first_not_of('/') != std::string::npos) {
      return Status(StatusCode::kInvalidArgument,
                    "a path ('" + path + "') is not supported: the cache server's API lives at its root");
    }
    return Status::Ok();
  }
  if (path.empty() || path == "/") return Status::Ok();
  const std::string db = path.substr(1);
  if (!ParseInt(db, 0, std::numeric_limits<int>::max(), &u->db)) {
    return Status(StatusCode::kInvalidArgument, "bad database '" + db + "' (expected /N, an integer >= 0)");
  }
  return Status::Ok();
}

}  // namespace

std::string MaskUrlCredentials(const std::string& text) {
  const size_t begin = AuthorityBegin(text);
  const size_t at = CredentialsEnd(text, begin);
  if (at == std::string::npos) return text;
  const size_t colon = text.find(':', begin);
  std::string out = text;
  if (colon == std::string::npos || colon > at) return out.replace(begin, at - begin, "***");
  return out.replace(colon + 1, at - colon - 1, "***");
}

Expected<RemoteUrl> ParseRemoteUrl(const std::string& url) {
  auto bad = [&url](const std::string& why) {
    return Status(StatusCode::kInvalidArgument, "remote cache URL '" + MaskUrlCredentials(url) + "': " + why);
  };
  const size_t sep = url.find("://");
  if (sep == std::string::npos) return bad("no scheme (expected http://, https:// or redis://)");
  std::string scheme = url.substr(0, sep);
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  RemoteUrl u;
  if (scheme == "http") {
    u.scheme = RemoteScheme::kHttp;
    u.port = 80;
  } else if (scheme == "https") {
    u.scheme = RemoteScheme::kHttps;
    u.port = 443;
  } else if (scheme == "redis") {
    u.scheme = RemoteScheme::kRedis;
    u.port = 6379;
  } else if (scheme == "rediss") {
    return bad("TLS to Redis (rediss://) is not supported: use redis:// on a trusted network, or the HTTPS server");
  } else {
    return bad("unknown scheme '" + scheme + "' (expected http://, https:// or redis://)");
  }
  const size_t begin = sep + 3;
  const size_t at = CredentialsEnd(url, begin);
  size_t host_begin = begin;
  if (at != std::string::npos) {
    if (u.scheme != RemoteScheme::kRedis) {
      return bad("credentials in an http(s) URL are not supported (the server's token comes from DICE_REMOTE_TOKEN)");
    }
    Status st = ParseCredentials(url.substr(begin, at - begin), &u);
    if (!st.ok()) return bad(st.message());
    host_begin = at + 1;
  }
  size_t end = url.find_first_of("/?#", host_begin);
  if (end == std::string::npos) end = url.size();
  Status st = ParseHostPort(url.substr(host_begin, end - host_begin), &u);
  if (!st.ok()) return bad(st.message());
  st = ParsePath(url.substr(end), &u);
  if (!st.ok()) return bad(st.message());
  return u;
}

}  // namespace dice::cache
