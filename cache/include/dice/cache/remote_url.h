// dice/cache/remote_url.h — the URL of a shared kernel cache
// ($DICE_REMOTE_CACHE), checked before anything is sent, and the masked form
// every log line and error message shows instead of it.
//
// Accepted forms (RFC 3986 syntax, the subset a cache address needs):
//   http://host[:port][/]                          HTTP cache server (http_server.h), port 80 by default
//   https://host[:port][/]                         the same over TLS, port 443 by default
//   redis://[[user]:password@]host[:port][/db]     Redis (redis_cache.h), port 6379, database 0 by default
// `host` is a name, an IPv4 address or a bracketed IPv6 address ("[::1]").
// `user` and `password` are percent-decoded (RFC 3986 section 2.1), so a
// password holding '@', ':' or '/' is written %40, %3A, %2F. Credentials are
// accepted in redis:// URLs only: the HTTP server's token comes from
// $DICE_REMOTE_TOKEN, never from the URL.
//
// Thread-safety: free functions over values.
#pragma once

#include <string>

#include "dice/core/status.h"

namespace dice::cache {

/// Which kind of server a remote-cache URL names.
enum class RemoteScheme { kHttp, kHttps, kRedis };

/// A parsed remote-cache URL. Holds the password in clear: show it only as
/// MaskUrlCredentials(text) of the text it was parsed from.
struct RemoteUrl {
  RemoteScheme scheme = RemoteScheme::kHttp;
  std::string user;      ///< Redis ACL user, decoded ("" = AUTH with the password alone)
  std::string password;  ///< Redis AUTH password, decoded ("" = no AUTH)
  std::string host;      ///< host name or address (an IPv6 address without its brackets)
  int port = 0;          ///< 1..65535; the scheme's default when the URL has none
  int db = 0;            ///< Redis logical database (SELECT), >= 0; 0 for HTTP
};

/// Parses and checks `url` (the forms above). Errors: kInvalidArgument whose
/// message quotes the URL masked and names the cause: no scheme, an unknown
/// scheme (named; "rediss" is refused as unsupported TLS), a missing host, a
/// bad port (not an integer in 1..65535), a bad Redis database (not an
/// integer >= 0), a path, query or fragment on an HTTP URL, credentials on an
/// HTTP URL, a user without a password, an empty password or a bad percent
/// escape. No error message ever contains the password.
Expected<RemoteUrl> ParseRemoteUrl(const std::string& url);

/// `text` with the credentials of its "scheme://user:password@" part masked:
/// the password becomes "***" ("redis://alice:***@host:6379"), and a user
/// part without a ':' (which may be a password written in the wrong place)
/// becomes "***" entirely. Works on malformed URLs too; text without an '@'
/// in its authority comes back unchanged.
std::string MaskUrlCredentials(const std::string& text);

}  // namespace dice::cache
