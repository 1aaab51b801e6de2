// cache/src/wire_scan.h — the fast path of the wire parser
// (WinnerFromWireJson, http_server.cc). Private to cache/src.
//
// Why: a GET answer is ~0.3 KB of fields and a base64 cubin of 66 KB (mean
// of the 100k-entry benchmark) to 680 KB. Parsed whole by nlohmann::json,
// the lexer copies that string one character at a time (push_back per
// byte), and dice::Base64Decode then checks its alphabet one branchy byte
// at a time before OpenSSL decodes it: together ~50% of all CPU in the
// 16-client GET benchmark (perf; docs/PERF.md, "16 clients after the wire
// fast path and the readers' page cache"), on the 2 cores the server uses. Here the cubin_base64
// value is cut out of the text by a scan for its closing quote (base64 has
// no quote or backslash), the remaining ~0.3 KB go through nlohmann as
// before, and the base64 is decoded by one table-driven pass.
//
// Both functions only ever say "yes, and here is the exact answer" or
// "not sure": on false the caller parses the original text the old way,
// which gives the same record or the same error message as before.
#pragma once

#include <string>
#include <string_view>

namespace dice::cache::wire {

/// Finds the member "cubin_base64" of the top-level JSON object `text`
/// whose value is a string without a backslash, and returns the text with
/// that value replaced by "" (`rest`) and the characters between its quotes
/// (`base64`, a view into `text`). False, touching nothing, when `text` is
/// not such an object: not an object, a key with an escape, the member
/// missing or present twice, its value not a plain string, or the text
/// malformed in a way the scan notices (it does not validate the rest:
/// the caller's parser of `rest` does).
bool SplitPayload(std::string_view text, std::string* rest, std::string_view* base64);

/// Decodes strict, padded base64 (RFC 4648 section 4: length a multiple of
/// 4, only A-Z a-z 0-9 + /, one or two '=' only at the end) into `out`.
/// Unused bits of the last group are ignored, as OpenSSL's EVP_DecodeBlock
/// (behind dice::Base64Decode) ignores them, so on success `out` equals
/// dice::Base64Decode(text). False on any other input (`out` unspecified).
/// One pass over the text; one allocation (the output).
bool DecodeBase64(std::string_view text, std::string* out);

}  // namespace dice::cache::wire
