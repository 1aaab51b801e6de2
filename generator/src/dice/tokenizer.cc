// Qwen2/SDAR byte-level BPE tokenizer: see dice/generator/tokenizer.h (its
// UTF-8 and pre-split text layer: tokenizer_text.cc).
#include "dice/generator/tokenizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/uniset.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "tokenizer_text.h"

namespace dice::generator {
namespace {

using tokenizer_text::AppendUtf8;
using tokenizer_text::Cp;
using tokenizer_text::DecodeUtf8;
using tokenizer_text::IsLetter;
using tokenizer_text::IsNumber;
using tokenizer_text::IsWhiteSpace;
using tokenizer_text::MatchAt;
using tokenizer_text::SanitizeUtf8;

// ------------------------------------------------------ byte alphabet ----

// GPT-2 byte <-> printable code point table (bytes_to_unicode).
struct ByteAlphabet {
  std::string encode[256];                  // byte -> UTF-8 of its code point
  std::unordered_map<char32_t, uint8_t> decode;
  ByteAlphabet() {
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      AppendUtf8(cp, &encode[b]);
      decode[cp] = static_cast<uint8_t>(b);
    }
  }
};

const ByteAlphabet& Alphabet() {
  static const ByteAlphabet kAlphabet;
  return kAlphabet;
}

// ------------------------------------------------------------- loading ----

Expected<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return Status(StatusCode::kNotFound, path + ": no such file");
    return Status(StatusCode::kIoError, path + ": " + std::strerror(errno));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status(StatusCode::kIoError, path + ": read failed");
  return ss.str();
}

Expected<nlohmann::json> ReadJson(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  // nlohmann reports the byte position only through its exception; it does not
  // leave this function.
  try {
    return nlohmann::json::parse(*text);
  } catch (const nlohmann::json::exception& e) {
    return Status(StatusCode::kCorrupt, path + ": malformed JSON: " + e.what());
  }
}

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool lstrip = false, rstrip = false, single_word = false, normalized = false, special = false;
};

Status ParseAddedToken(const nlohmann::json& e, const std::string& where, AddedToken* t) {
  if (!e.is_object() || !e.contains("content") || !e["content"].is_string())
    return Status(StatusCode::kCorrupt, where + ": added token without a string \"content\"");
  t->content = e["content"].get<std::string>();
  if (t->content.empty()) return Status(StatusCode::kCorrupt, where + ": added token with empty content");
  auto flag = [&](const char* k, bool dflt) { return e.contains(k) && e[k].is_boolean() ? e[k].get<bool>() : dflt; };
  t->lstrip = flag("lstrip", false);
  t->rstrip = flag("rstrip", false);
  t->single_word = flag("single_word", false);
  t->special = flag("special", false);
  t->normalized = flag("normalized", !t->special);  // HF default: special tokens are not normalized
  return Status::Ok();
}

}  // namespace

// --------------------------------------------------------------- Impl ----

struct Tokenizer::Impl {
  std::unordered_map<std::string, int32_t> vocab;       // byte-alphabet token -> id
  std::vector<std::string> id_to_token;                 // id -> byte-alphabet token ("" if none)
  struct Merge {
    int32_t rank;    // line order in merges.txt, lower merges first
    int32_t merged;  // id of left+right
  };
  std::unordered_map<uint64_t, Merge> merges;           // (left id << 32 | right id) -> merge
  int32_t byte_id[256] = {};                            // id of each byte's alphabet token
  std::vector<AddedToken> added;                        // sorted by id
  std::unordered_map<int32_t, size_t> added_by_id;
  std::set<int32_t> special_ids;
  bool first_byte[2][256] = {};  // [normalized][b]: some added token starts with byte b
  int32_t mask = -1, eos = -1, pad = -1, size = 0;
  std::unique_ptr<icu::UnicodeSet> nfc_filter;
  std::unique_ptr<icu::FilteredNormalizer2> filtered_nfc;
  const icu::Normalizer2* nfc = nullptr;  // filtered_nfc

  mutable std::mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  // Splits [seg] by the added tokens whose `normalized` flag equals
  // `normalized`: emits ids for matches and calls `plain` for the text between.
  template <typename Plain>
  void SplitAdded(std::string_view seg, bool normalized, std::vector<int32_t>* ids, Plain&& plain) const;
  void EncodeSegment(std::string_view raw, std::vector<int32_t>* ids) const;
  void EncodeWord(std::string_view word, std::vector<int32_t>* ids) const;
};

template <typename Plain>
void Tokenizer::Impl::SplitAdded(std::string_view seg, bool normalized, std::vector<int32_t>* ids,
                                 Plain&& plain) const {
  size_t pos = 0;   // start of text not yet emitted
  size_t scan = 0;  // where to look for the next match
  auto ws_before = [&](size_t k, size_t* start) {
    // Moves *start left over White_Space code points, not before pos.
    size_t s = k;
    while (s > pos) {
      size_t b = s - 1;
      while (b > pos && (static_cast<unsigned char>(seg[b]) & 0xC0) == 0x80) --b;
      char32_t cp;
      size_t bad;
      if (DecodeUtf8(seg, b, &cp, &bad) != s - b || !IsWhiteSpace(cp)) break;
      s = b;
    }
    *start = s;
  };
  auto is_word_char = [&](char32_t c) { return IsLetter(c) || IsNumber(c) || c == '_' ||
                                               (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_M_MASK); };
  while (scan < seg.size()) {
    // Leftmost-longest match among the added tokens at or after `scan`.
    size_t best_at = std::string_view::npos, best_len = 0;
    const AddedToken* best = nullptr;
    for (size_t i = scan; i < seg.size() && best == nullptr; ++i) {
      if (!first_byte[normalized][static_cast<unsigned char>(seg[i])]) continue;
      for (const AddedToken& t : added) {
        if (t.normalized != normalized || t.content.size() <= best_len) continue;
        if (seg.compare(i, t.content.size(), t.content) != 0) continue;
        if (t.single_word) {
          char32_t cp;
          size_t bad;
          bool ok = true;
          if (i > 0) {
            size_t b = i - 1;
            while (b > 0 && (static_cast<unsigned char>(seg[b]) & 0xC0) == 0x80) --b;
            if (DecodeUtf8(seg, b, &cp, &bad) > 0 && is_word_char(cp)) ok = false;
          }
          const size_t e = i + t.content.size();
          if (e < seg.size() && DecodeUtf8(seg, e, &cp, &bad) > 0 && is_word_char(cp)) ok = false;
          if (!ok) continue;
        }
        best_at = i, best_len = t.content.size(), best = &t;
      }
      if (best != nullptr) break;
    }
    if (best == nullptr) break;
    size_t start = best_at, end = best_at + best_len;
    if (best->lstrip) ws_before(start, &start);
    if (best->rstrip) {
      while (end < seg.size()) {
        char32_t cp;
        size_t bad;
        const size_t n = DecodeUtf8(seg, end, &cp, &bad);
        if (n == 0 || !IsWhiteSpace(cp)) break;
        end += n;
      }
    }
    if (start > pos) plain(seg.substr(pos, start - pos));
    ids->push_back(best->id);
    pos = scan = end;
  }
  if (pos < seg.size()) plain(seg.substr(pos));
}

void Tokenizer::Impl::EncodeSegment(std::string_view raw, std::vector<int32_t>* ids) const {
  // NFC (ICU); the input was sanitised to valid UTF-8 by Encode.
  std::string normalized;
  UErrorCode err = U_ZERO_ERROR;
  const bool already = nfc->isNormalizedUTF8(icu::StringPiece(raw.data(), static_cast<int32_t>(raw.size())), err);
  if (U_FAILURE(err) || !already) {
    err = U_ZERO_ERROR;
    icu::StringByteSink<std::string> sink(&normalized, static_cast<int32_t>(raw.size()));
    nfc->normalizeUTF8(0, icu::StringPiece(raw.data(), static_cast<int32_t>(raw.size())), sink, nullptr, err);
    if (U_FAILURE(err)) normalized.assign(raw);  // cannot happen for valid UTF-8
  } else {
    normalized.assign(raw);
  }
  SplitAdded(normalized, /*normalized=*/true, ids, [&](std::string_view text) {
    std::vector<Cp> cps;
    cps.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
      char32_t cp;
      size_t bad = 1;
      size_t n = DecodeUtf8(text, i, &cp, &bad);
      if (n == 0) cp = 0xFFFD, n = bad;
      cps.push_back({cp, i});
      i += n;
    }
    for (size_t i = 0; i < cps.size();) {
      const size_t len = MatchAt(cps, i);
      const size_t b0 = cps[i].byte;
      const size_t b1 = i + len < cps.size() ? cps[i + len].byte : text.size();
      EncodeWord(text.substr(b0, b1 - b0), ids);
      i += len;
    }
  });
}

void Tokenizer::Impl::EncodeWord(std::string_view word, std::vector<int32_t>* ids) const {
  std::string key(word);
  {
    std::lock_guard<std::mutex> lock(cache_mu);
    auto it = cache.find(key);
    if (it != cache.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  // BPE as HF's Word::merge_all: a min-heap of candidate pairs keyed by
  // (rank, position); pop the lowest, skip it if either side has changed
  // since it was pushed, merge, push the new neighbour pairs. O(n log n).
  struct Sym {
    int32_t id;
    int32_t prev, next;  // -1 at the ends
    bool alive;
  };
  std::vector<Sym> syms(word.size());
  for (size_t i = 0; i < word.size(); ++i)
    syms[i] = {byte_id[static_cast<unsigned char>(word[i])], static_cast<int32_t>(i) - 1,
               i + 1 < word.size() ? static_cast<int32_t>(i + 1) : -1, true};
  struct Cand {
    int32_t rank, pos, left, right, merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Cand> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0 || syms[pos].next < 0) return;
    const int32_t l = syms[pos].id, r = syms[syms[pos].next].id;
    auto it = merges.find((static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r));
    if (it == merges.end()) return;
    heap.push_back({it->second.rank, pos, l, r, it->second.merged});
    std::push_heap(heap.begin(), heap.end(), std::greater<Cand>());
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<Cand>());
    const Cand c = heap.back();
    heap.pop_back();
    Sym& a = syms[c.pos];
    if (!a.alive || a.id != c.left || a.next < 0) continue;
    Sym& b = syms[a.next];
    if (b.id != c.right) continue;
    a.id = c.merged;
    b.alive = false;
    a.next = b.next;
    if (b.next >= 0) syms[b.next].prev = c.pos;
    push(a.prev);
    push(c.pos);
  }
  std::vector<int32_t> out;
  for (int32_t i = syms.empty() ? -1 : 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
  ids->insert(ids->end(), out.begin(), out.end());
  if (key.size() > 256) return;  // long words are rare; keep the cache small
  std::lock_guard<std::mutex> lock(cache_mu);
  if (cache.size() > (1u << 16)) cache.clear();  // bound memory on adversarial input
  cache.emplace(std::move(key), std::move(out));
}

// --------------------------------------------------------- Tokenizer ----

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Expected<Tokenizer> Tokenizer::Load(const std::string& dir) {
  auto impl = std::make_unique<Impl>();
  const std::string vocab_path = dir + "/vocab.json";
  const std::string merges_path = dir + "/merges.txt";
  const std::string config_path = dir + "/tokenizer_config.json";
  const std::string tokjson_path = dir + "/tokenizer.json";

  // vocab.json
  auto vocab_json = ReadJson(vocab_path);
  if (!vocab_json.ok()) return vocab_json.status();
  if (!vocab_json->is_object()) return Status(StatusCode::kCorrupt, vocab_path + ": expected a JSON object token -> id");
  int32_t max_id = -1;
  impl->vocab.reserve(vocab_json->size());
  for (auto it = vocab_json->begin(); it != vocab_json->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > std::numeric_limits<int32_t>::max() / 2)
      return Status(StatusCode::kCorrupt, vocab_path + ": token '" + it.key() + "' has no valid integer id");
    const auto id = static_cast<int32_t>(it.value().get<int64_t>());
    impl->vocab.emplace(it.key(), id);
    max_id = std::max(max_id, id);
  }
  vocab_json = Status(StatusCode::kInternal, "released");  // free the DOM
  for (int b = 0; b < 256; ++b) {
    auto it = impl->vocab.find(Alphabet().encode[b]);
    if (it == impl->vocab.end())
      return Status(StatusCode::kCorrupt, vocab_path + ": byte-level alphabet incomplete (no token for byte " +
                                              std::to_string(b) + ")");
    impl->byte_id[b] = it->second;
  }

  // merges.txt
  auto merges = ReadFile(merges_path);
  if (!merges.ok()) return merges.status();
  {
    std::string_view text = *merges;
    size_t line_no = 0, pos = 0;
    int32_t rank = 0;
    while (pos < text.size()) {
      size_t eol = text.find('\n', pos);
      if (eol == std::string_view::npos) eol = text.size();
      std::string_view line = text.substr(pos, eol - pos);
      pos = eol + 1;
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
      const size_t sp = line.find(' ');
      if (sp == std::string_view::npos || sp == 0 || sp + 1 >= line.size() || line.find(' ', sp + 1) != std::string_view::npos)
        return Status(StatusCode::kCorrupt, merges_path + ":" + std::to_string(line_no) +
                                                ": expected two tokens separated by one space, got '" +
                                                std::string(line) + "'");
      const std::string left(line.substr(0, sp)), right(line.substr(sp + 1));
      auto l = impl->vocab.find(left), r = impl->vocab.find(right), m = impl->vocab.find(left + right);
      if (l == impl->vocab.end() || r == impl->vocab.end() || m == impl->vocab.end())
        return Status(StatusCode::kCorrupt, merges_path + ":" + std::to_string(line_no) + ": merge '" +
                                                std::string(line) + "' uses a token not in vocab.json");
      const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(l->second)) << 32) |
                           static_cast<uint32_t>(r->second);
      impl->merges[key] = Impl::Merge{rank++, m->second};  // a repeated pair: the last line wins, as in HF
    }
  }

  // Added tokens: tokenizer.json (optional) first, then tokenizer_config.json.
  std::map<int32_t, AddedToken> added;
  {
    std::ifstream probe(tokjson_path);
    if (probe.good()) {
      auto tj = ReadJson(tokjson_path);
      if (!tj.ok()) return tj.status();
      if (tj->contains("added_tokens") && (*tj)["added_tokens"].is_array()) {
        for (const auto& e : (*tj)["added_tokens"]) {
          AddedToken t;
          DICE_RETURN_IF_ERROR(ParseAddedToken(e, tokjson_path, &t));
          if (!e.contains("id") || !e["id"].is_number_integer())
            return Status(StatusCode::kCorrupt, tokjson_path + ": added token '" + t.content + "' has no integer id");
          t.id = e["id"].get<int32_t>();
          added[t.id] = t;
        }
      }
    }
  }
  auto config = ReadJson(config_path);
  if (!config.ok()) return config.status();
  if (!config->is_object()) return Status(StatusCode::kCorrupt, config_path + ": expected a JSON object");
  if (config->contains("added_tokens_decoder")) {
    const auto& dec = (*config)["added_tokens_decoder"];
    if (!dec.is_object()) return Status(StatusCode::kCorrupt, config_path + ": added_tokens_decoder is not an object");
    for (auto it = dec.begin(); it != dec.end(); ++it) {
      AddedToken t;
      DICE_RETURN_IF_ERROR(ParseAddedToken(it.value(), config_path + ": added_tokens_decoder[" + it.key() + "]", &t));
      char* endp = nullptr;
      const long id = std::strtol(it.key().c_str(), &endp, 10);
      if (endp == it.key().c_str() || *endp != '\0' || id < 0 || id > std::numeric_limits<int32_t>::max() / 2)
        return Status(StatusCode::kCorrupt, config_path + ": added_tokens_decoder key '" + it.key() + "' is not an id");
      t.id = static_cast<int32_t>(id);
      added[t.id] = t;
    }
  }
  // Names of the special roles: a string or {"content": ...}.
  auto role = [&](const char* key) -> std::string {
    if (!config->contains(key)) return "";
    const auto& v = (*config)[key];
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
    return "";
  };
  std::set<std::string> special_names;
  for (const char* k : {"mask_token", "eos_token", "pad_token", "bos_token", "unk_token"}) {
    const std::string n = role(k);
    if (!n.empty()) special_names.insert(n);
  }
  if (config->contains("additional_special_tokens") && (*config)["additional_special_tokens"].is_array()) {
    for (const auto& v : (*config)["additional_special_tokens"])
      if (v.is_string()) special_names.insert(v.get<std::string>());
  }
  for (auto& [id, t] : added) {
    impl->added_by_id[id] = impl->added.size();
    impl->added.push_back(t);
    impl->first_byte[t.normalized][static_cast<unsigned char>(t.content[0])] = true;
    if (t.special || special_names.count(t.content)) impl->special_ids.insert(id);
    max_id = std::max(max_id, id);
  }
  impl->size = max_id + 1;
  impl->id_to_token.assign(static_cast<size_t>(impl->size), std::string());
  for (const auto& [tok, id] : impl->vocab) impl->id_to_token[static_cast<size_t>(id)] = tok;

  Tokenizer out(std::move(impl));
  out.impl_->mask = out.TokenToId(role("mask_token"));
  out.impl_->eos = out.TokenToId(role("eos_token"));
  out.impl_->pad = out.TokenToId(role("pad_token"));

  // NFC restricted to code points assigned by Unicode 9.0: the reference's
  // normaliser (the unicode-normalization-alignments crate in HF tokenizers)
  // carries Unicode 9.0 data, so to it later characters (e.g. the combining
  // marks U+1AC1..U+1ACE) are inert starters that neither reorder nor
  // compose. Characters outside the filter pass through unchanged and bound
  // the normalised spans, which is the same thing. Decompositions and
  // combining classes of already-assigned characters never change (Unicode
  // stability policy), so ICU's newer data agrees on the rest.
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(err);
  if (U_FAILURE(err) || nfc == nullptr)
    return Status(StatusCode::kInternal, std::string("ICU NFC normaliser unavailable: ") + u_errorName(err));
  out.impl_->nfc_filter = std::make_unique<icu::UnicodeSet>(icu::UnicodeString(u"[:Age=9.0:]"), err);
  if (U_FAILURE(err))
    return Status(StatusCode::kInternal, std::string("ICU UnicodeSet [:Age=9.0:]: ") + u_errorName(err));
  out.impl_->nfc_filter->freeze();
  out.impl_->filtered_nfc = std::make_unique<icu::FilteredNormalizer2>(*nfc, *out.impl_->nfc_filter);
  out.impl_->nfc = out.impl_->filtered_nfc.get();
  return out;
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text) const {
  std::vector<int32_t> ids;
  const std::string clean = SanitizeUtf8(text);
  impl_->SplitAdded(clean, /*normalized=*/false, &ids,
                    [&](std::string_view seg) { impl_->EncodeSegment(seg, &ids); });
  return ids;
}

namespace {

// Appends the raw bytes a byte-level vocabulary token stands for (each of its
// code points maps back through the GPT-2 byte alphabet); malformed UTF-8 in
// the token is skipped.
void AppendTokenBytes(const std::string& tok, std::string* bytes) {
  const ByteAlphabet& abc = Alphabet();
  for (size_t i = 0; i < tok.size();) {
    char32_t cp;
    size_t bad = 1;
    const size_t n = DecodeUtf8(tok, i, &cp, &bad);
    if (n == 0) {
      i += bad;
      continue;
    }
    auto b = abc.decode.find(cp);
    if (b != abc.decode.end()) bytes->push_back(static_cast<char>(b->second));
    i += n;
  }
}

}  // namespace

std::string Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string out, bytes;
  auto flush = [&]() {
    out += SanitizeUtf8(bytes);
    bytes.clear();
  };
  for (int32_t id : ids) {
    auto a = impl_->added_by_id.find(id);
    if (a != impl_->added_by_id.end()) {
      flush();
      out += impl_->added[a->second].content;
      continue;
    }
    if (id < 0 || id >= impl_->size) continue;
    AppendTokenBytes(impl_->id_to_token[static_cast<size_t>(id)], &bytes);
  }
  flush();
  return out;
}

std::string Tokenizer::TokenBytes(int32_t id) const {
  auto a = impl_->added_by_id.find(id);
  if (a != impl_->added_by_id.end()) return impl_->added[a->second].content;
  if (id < 0 || id >= impl_->size) return "";
  std::string bytes;
  AppendTokenBytes(impl_->id_to_token[static_cast<size_t>(id)], &bytes);
  return bytes;
}

int32_t Tokenizer::TokenToId(std::string_view token) const {
  if (token.empty()) return -1;
  for (const AddedToken& t : impl_->added)
    if (t.content == token) return t.id;
  auto it = impl_->vocab.find(std::string(token));
  return it == impl_->vocab.end() ? -1 : it->second;
}

int32_t Tokenizer::mask_id() const { return impl_->mask; }
int32_t Tokenizer::eos_id() const { return impl_->eos; }
int32_t Tokenizer::pad_id() const { return impl_->pad; }

std::vector<int32_t> Tokenizer::eos_ids() const {
  std::set<int32_t> s;
  if (impl_->eos >= 0) s.insert(impl_->eos);
  for (const char* name : {"<|endoftext|>", "<|im_end|>"}) {
    const int32_t id = TokenToId(name);
    if (id >= 0) s.insert(id);
  }
  return {s.begin(), s.end()};
}

bool Tokenizer::IsSpecial(int32_t id) const { return impl_->special_ids.count(id) != 0; }
int32_t Tokenizer::vocab_size() const { return impl_->size; }

}  // namespace dice::generator
