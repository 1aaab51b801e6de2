// The wire forms of a WinnerRecord (dice/cache/http_server.h, API v1): the
// JSON object every route speaks, and the binary form a GET answers when
// its Accept header names kWinnerBinaryType. Notes:
//  - JSON: the cubin travels as base64 under "cubin_base64", spliced into
//    the text after the other fields (base64 needs no escaping); parsed by
//    the fast path of wire_scan.h where it applies, else by nlohmann alone,
//    with the same record or error either way.
//  - Binary: one line of JSON (the same fields, "source" included, and
//    "cubin_bytes" instead of "cubin_base64"), a '\n', then the cubin's raw
//    bytes. nlohmann's dump escapes every control character, so the first
//    '\n' of the body ends the header line. Measured cost of base64 on a GET
//    at 16 clients: ~15% of both cores (encode on the server, decode on the
//    client) and a third more bytes through the socket (docs/PERF.md,
//    session 25).
//  - Accept is read as RFC 9110 section 12.5.1 describes it, as far as the
//    one decision needs: a comma-separated list of media ranges with
//    parameters; the binary form is chosen only when the list names it
//    exactly (case-insensitive) without q=0. Wildcards keep JSON, so every
//    client that does not ask keeps the form it always had.
#include <openssl/evp.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>

#include "dice/cache/http_server.h"
#include "wire_scan.h"

namespace dice::cache {
namespace {

using json = nlohmann::json;

// How a parse finds the cubin.
enum class Payload {
  kNone,     // a list entry: no source, no cubin
  kBase64,   // "cubin_base64" holds it, encoded
  kSpliced,  // "cubin_base64" was cut out ("") and is already decoded
  kBinary,   // "cubin_bytes" gives its length; the bytes follow the header line
};

// Reads a required field of the given JSON type into `out`.
Status TakeString(const json& j, const char* name, std::string* out) {
  auto it = j.find(name);
  if (it == j.end()) return Status(StatusCode::kInvalidArgument, std::string("missing field '") + name + "'");
  if (!it->is_string()) return Status(StatusCode::kInvalidArgument, std::string("field '") + name + "' is not a string");
  *out = it->get<std::string>();
  return Status::Ok();
}

Status TakeNumber(const json& j, const char* name, double* out) {
  auto it = j.find(name);
  if (it == j.end()) return Status(StatusCode::kInvalidArgument, std::string("missing field '") + name + "'");
  if (!it->is_number()) return Status(StatusCode::kInvalidArgument, std::string("field '") + name + "' is not a number");
  *out = it->get<double>();
  if (!std::isfinite(*out)) return Status(StatusCode::kInvalidArgument, std::string("field '") + name + "' is not finite");
  return Status::Ok();
}

// Parses the JSON object `text` into a record. `payload` says where the
// cubin is; `cubin` holds it for kSpliced, and for kBinary the bytes after
// the header line (their count must equal "cubin_bytes").
Expected<WinnerRecord> ParseWireText(std::string_view text, Payload payload, std::string* cubin) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status(StatusCode::kInvalidArgument, "malformed JSON");
  if (!j.is_object()) return Status(StatusCode::kInvalidArgument, "JSON body is not an object");
  WinnerRecord r;
  DICE_RETURN_IF_ERROR(TakeString(j, "task_key", &r.task_key));
  DICE_RETURN_IF_ERROR(TakeString(j, "graph_canonical", &r.graph_canonical));
  DICE_RETURN_IF_ERROR(TakeString(j, "input_specs", &r.input_specs));
  DICE_RETURN_IF_ERROR(TakeString(j, "arch", &r.arch));
  DICE_RETURN_IF_ERROR(TakeString(j, "gpu_name", &r.gpu_name));
  DICE_RETURN_IF_ERROR(TakeString(j, "origin", &r.origin));
  DICE_RETURN_IF_ERROR(TakeString(j, "candidate_hash", &r.candidate_hash));
  DICE_RETURN_IF_ERROR(TakeString(j, "launch_plan_json", &r.launch_plan_json));
  DICE_RETURN_IF_ERROR(TakeString(j, "versions_json", &r.versions_json));
  DICE_RETURN_IF_ERROR(TakeString(j, "content_hash", &r.content_hash));
  DICE_RETURN_IF_ERROR(TakeNumber(j, "baseline_us", &r.baseline_us));
  DICE_RETURN_IF_ERROR(TakeNumber(j, "best_us", &r.best_us));
  DICE_RETURN_IF_ERROR(TakeNumber(j, "speedup", &r.speedup));
  auto rp = j.find("reduced_precision");
  if (rp == j.end() || !rp->is_boolean()) {
    return Status(StatusCode::kInvalidArgument, "missing or non-boolean field 'reduced_precision'");
  }
  r.reduced_precision = rp->get<bool>();
  auto ca = j.find("created_at");
  if (ca != j.end()) {
    if (!ca->is_number_integer()) return Status(StatusCode::kInvalidArgument, "field 'created_at' is not an integer");
    r.created_at = ca->get<int64_t>();
  }
  if (payload == Payload::kNone) return r;
  DICE_RETURN_IF_ERROR(TakeString(j, "source", &r.source));
  if (payload == Payload::kBinary) {
    auto n = j.find("cubin_bytes");
    if (n == j.end() || !n->is_number_unsigned()) {
      return Status(StatusCode::kInvalidArgument, "missing or non-integer field 'cubin_bytes'");
    }
    if (n->get<uint64_t>() != cubin->size()) {
      return Status(StatusCode::kInvalidArgument, "field 'cubin_bytes' says " + std::to_string(n->get<uint64_t>()) +
                                                      " bytes, the body holds " + std::to_string(cubin->size()));
    }
    r.cubin = std::move(*cubin);
    return r;
  }
  std::string b64;
  DICE_RETURN_IF_ERROR(TakeString(j, "cubin_base64", &b64));
  if (payload == Payload::kSpliced) {
    if (!b64.empty()) return Status(StatusCode::kInternal, "cubin_base64 was not cut out");
    r.cubin = std::move(*cubin);
  } else {
    auto decoded = Base64Decode(b64);
    if (!decoded.ok()) return decoded.status().WithContext("field 'cubin_base64'");
    r.cubin = std::move(*decoded);
  }
  return r;
}

// ParseWireText on `text`, by the fast path (wire_scan.h) where it applies
// and succeeds, else the whole text through nlohmann as before: the same
// record, and on any failure the same error, either way.
Expected<WinnerRecord> ParseWire(const std::string& text, bool with_payload) {
  if (with_payload) {
    std::string rest, cubin;
    std::string_view b64;
    if (wire::SplitPayload(text, &rest, &b64) && wire::DecodeBase64(b64, &cubin)) {
      auto fast = ParseWireText(rest, Payload::kSpliced, &cubin);
      if (fast.ok()) return fast;
    }
  }
  return ParseWireText(text, with_payload ? Payload::kBase64 : Payload::kNone, nullptr);
}

// Appends `s` as a JSON string, byte for byte as nlohmann's dump (no
// ensure_ascii, invalid UTF-8 replaced) writes it. ASCII is escaped here in
// one pass; a string with any byte >= 0x80 goes through nlohmann.
void AppendJsonString(const std::string& s, std::string* out) {
  for (unsigned char c : s) {
    if (c >= 0x80) {
      *out += json(s).dump(-1, ' ', false, json::error_handler_t::replace);
      return;
    }
  }
  out->push_back('"');
  size_t run = 0;  // start of the bytes not yet copied
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out->append(s, run, i - run);
    run = i + 1;
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\b': *out += "\\b"; break;
      case '\t': *out += "\\t"; break;
      case '\n': *out += "\\n"; break;
      case '\f': *out += "\\f"; break;
      case '\r': *out += "\\r"; break;
      default: {
        static const char* hex = "0123456789abcdef";
        const char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
        out->append(esc, 6);
      }
    }
  }
  out->append(s, run, std::string::npos);
  out->push_back('"');
}

// Appends `v` as nlohmann writes a double (shortest round trip, "2.0",
// null for NaN and infinities).
void AppendJsonNumber(double v, std::string* out) { *out += json(v).dump(); }

// The record's fields but source and cubin as one JSON object, byte for
// byte what nlohmann's dump of the object with these fields writes (keys
// sorted as its std::map holds them, invalid UTF-8 replaced), without
// building the object: a list page writes 50 of them, and the object's map nodes and the serializer's
// per-character walk were ~20% of a keyset page's CPU (perf, session 25).
std::string SummaryText(const WinnerRecord& rec) {
  std::string out;
  out.reserve(256 + rec.arch.size() + rec.graph_canonical.size() + rec.input_specs.size() + rec.origin.size() +
              rec.launch_plan_json.size() + rec.versions_json.size() + rec.gpu_name.size());
  auto key = [&out](const char* name) {
    out += out.empty() ? "{\"" : ",\"";
    out += name;
    out += "\":";
  };
  key("arch");
  AppendJsonString(rec.arch, &out);
  key("baseline_us");
  AppendJsonNumber(rec.baseline_us, &out);
  key("best_us");
  AppendJsonNumber(rec.best_us, &out);
  key("candidate_hash");
  AppendJsonString(rec.candidate_hash, &out);
  key("content_hash");
  AppendJsonString(rec.content_hash, &out);
  key("created_at");
  out += std::to_string(rec.created_at);
  key("gpu_name");
  AppendJsonString(rec.gpu_name, &out);
  key("graph_canonical");
  AppendJsonString(rec.graph_canonical, &out);
  key("input_specs");
  AppendJsonString(rec.input_specs, &out);
  key("launch_plan_json");
  AppendJsonString(rec.launch_plan_json, &out);
  key("origin");
  AppendJsonString(rec.origin, &out);
  key("reduced_precision");
  out += rec.reduced_precision ? "true" : "false";
  key("speedup");
  AppendJsonNumber(rec.speedup, &out);
  key("task_key");
  AppendJsonString(rec.task_key, &out);
  key("versions_json");
  AppendJsonString(rec.versions_json, &out);
  out += '}';
  return out;
}

// Leading and trailing spaces and tabs (HTTP's OWS) off `s`.
std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool EqualsNoCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

// True when the parameters of a media range (the text after its first ';')
// hold q=0 (0, 0., 0.0, 0.00, 0.000): "not acceptable".
bool RefusedByWeight(std::string_view params) {
  while (!params.empty()) {
    const size_t semi = params.find(';');
    const std::string_view param = TrimOws(params.substr(0, semi));
    params = semi == std::string_view::npos ? std::string_view() : params.substr(semi + 1);
    const size_t eq = param.find('=');
    if (eq == std::string_view::npos || !EqualsNoCase(TrimOws(param.substr(0, eq)), "q")) continue;
    std::string_view q = TrimOws(param.substr(eq + 1));
    if (q.empty() || q.front() != '0') return false;
    q.remove_prefix(1);
    if (!q.empty() && q.front() == '.') q.remove_prefix(1);
    return q.find_first_not_of('0') == std::string_view::npos;
  }
  return false;
}

}  // namespace

std::string WinnerToWireJson(const WinnerRecord& rec, bool with_payload) {
  // Invalid UTF-8 in a text field is replaced rather than thrown on.
  std::string out = SummaryText(rec);
  if (!with_payload) return out;
  // The payload is spliced in after the other fields: base64 text needs no
  // JSON escaping, so the serialiser never walks the cubin character by
  // character (it was the server's largest cost per GET).
  // It is encoded straight into the answer (no base64 string of its own to
  // copy), and the answer is allocated once.
  std::string source;
  AppendJsonString(rec.source, &source);
  const size_t b64_len = 4 * ((rec.cubin.size() + 2) / 3);
  out.reserve(out.size() + b64_len + source.size() + 32);
  out.pop_back();  // the closing '}'
  out += ",\"cubin_base64\":\"";
  const size_t at = out.size();
  out.resize(at + b64_len + 1);  // EVP_EncodeBlock writes a NUL after the text
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data() + at),
                                reinterpret_cast<const unsigned char*>(rec.cubin.data()),
                                static_cast<int>(rec.cubin.size()));
  out.resize(at + static_cast<size_t>(n));
  out += "\",\"source\":";
  out += source;
  out += '}';
  return out;
}

Expected<WinnerRecord> WinnerFromWireJson(const std::string& text) { return ParseWire(text, true); }

Expected<WinnerRecord> WinnerSummaryFromWireJson(const std::string& text) { return ParseWire(text, false); }

std::string WinnerToWireBinary(const WinnerRecord& rec) {
  std::string out = SummaryText(rec);
  out.reserve(out.size() + rec.source.size() + 64 + rec.cubin.size());
  out.pop_back();  // the closing '}'
  out += ",\"cubin_bytes\":" + std::to_string(rec.cubin.size()) + ",\"source\":";
  AppendJsonString(rec.source, &out);
  out += "}\n";
  out.append(rec.cubin);
  return out;
}

Expected<WinnerRecord> WinnerFromWireBinary(std::string body) {
  const size_t nl = body.find('\n');
  if (nl == std::string::npos) return Status(StatusCode::kInvalidArgument, "binary winner without its header line");
  std::string cubin = body.substr(nl + 1);
  body.resize(nl);
  return ParseWireText(body, Payload::kBinary, &cubin);
}

bool AcceptsWinnerBinary(std::string_view accept) {
  if (accept.size() > kMaxAcceptBytes) return false;
  while (!accept.empty()) {
    const size_t comma = accept.find(',');
    const std::string_view range = accept.substr(0, comma);
    accept = comma == std::string_view::npos ? std::string_view() : accept.substr(comma + 1);
    const size_t semi = range.find(';');
    if (!EqualsNoCase(TrimOws(range.substr(0, semi)), kWinnerBinaryType)) continue;
    if (semi == std::string_view::npos || !RefusedByWeight(range.substr(semi + 1))) return true;
  }
  return false;
}

bool IsWinnerBinaryType(std::string_view content_type) {
  const size_t semi = content_type.find(';');
  return EqualsNoCase(TrimOws(content_type.substr(0, semi)), kWinnerBinaryType);
}

}  // namespace dice::cache
