// SDAR/DICE checkpoint loading: see dice/generator/checkpoint.h.
#include "dice/generator/checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <utility>

namespace dice::generator {
namespace {

using nlohmann::json;

constexpr const char* kConfigFile = "config.json";
constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Reads a whole text file. kNotFound when missing, kIoError when unreadable.
Expected<std::string> ReadTextFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status(StatusCode::kNotFound, path + ": no such file");
    return Status(StatusCode::kIoError, path + ": " + std::strerror(errno));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status(StatusCode::kIoError, path + ": cannot open: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status(StatusCode::kIoError, path + ": read failed");
  return ss.str();
}

bool ParseDtype(const std::string& s, WeightDtype* out) {
  if (s == "F32") return *out = WeightDtype::kF32, true;
  if (s == "F16") return *out = WeightDtype::kF16, true;
  if (s == "BF16") return *out = WeightDtype::kBF16, true;
  return false;
}

// ---- config.json field readers: each names the source and the field. ----

Status ReadInt(const json& j, const std::string& src, const char* field, bool required,
               int64_t* out) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) {
    if (required) {
      return Status(StatusCode::kInvalidArgument,
                    src + ": required field '" + field + "' is missing");
    }
    return Status::Ok();
  }
  if (!it->is_number_integer()) {
    return Status(StatusCode::kCorrupt,
                  src + ": field '" + field + "' must be an integer, got " + it->dump());
  }
  if (it->is_number_unsigned() &&
      it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return Status(StatusCode::kInvalidArgument,
                  src + ": field '" + field + "' is out of range: " + it->dump());
  }
  *out = it->get<int64_t>();
  return Status::Ok();
}

Status ReadDouble(const json& j, const std::string& src, const char* field, double* out) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_number()) {
    return Status(StatusCode::kCorrupt,
                  src + ": field '" + field + "' must be a number, got " + it->dump());
  }
  *out = it->get<double>();
  return Status::Ok();
}

Status ReadBool(const json& j, const std::string& src, const char* field, bool* out) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_boolean()) {
    return Status(StatusCode::kCorrupt,
                  src + ": field '" + field + "' must be true or false, got " + it->dump());
  }
  *out = it->get<bool>();
  return Status::Ok();
}

Status RequirePositive(const std::string& src, const char* field, int64_t v) {
  if (v > 0) return Status::Ok();
  return Status(StatusCode::kInvalidArgument,
                src + ": field '" + field + "' must be > 0, got " + std::to_string(v));
}

// Multiplies non-negative sizes; false on int64/size_t overflow.
bool CheckedMul(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return false;
  *out = a * b;
  return true;
}

}  // namespace

// ------------------------------------------------------------ dtypes ----

const char* WeightDtypeName(WeightDtype dtype) {
  switch (dtype) {
    case WeightDtype::kF32: return "F32";
    case WeightDtype::kF16: return "F16";
    case WeightDtype::kBF16: return "BF16";
  }
  return "?";
}

size_t WeightDtypeSize(WeightDtype dtype) {
  switch (dtype) {
    case WeightDtype::kF32: return 4;
    case WeightDtype::kF16: return 2;
    case WeightDtype::kBF16: return 2;
  }
  return 0;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// -------------------------------------------------------- SdarConfig ----

Expected<SdarConfig> SdarConfig::Parse(const std::string& json_text, const std::string& source) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    return Status(StatusCode::kCorrupt, source + ": malformed JSON: " + e.what());
  }
  if (!j.is_object()) {
    return Status(StatusCode::kCorrupt, source + ": top level is not a JSON object");
  }
  SdarConfig c;
  DICE_RETURN_IF_ERROR(ReadInt(j, source, "hidden_size", true, &c.hidden_size));
  DICE_RETURN_IF_ERROR(ReadInt(j, source, "num_hidden_layers", true, &c.num_hidden_layers));
  DICE_RETURN_IF_ERROR(ReadInt(j, source, "num_attention_heads", true, &c.num_attention_heads));
  DICE_RETURN_IF_ERROR(ReadInt(j, source, "num_key_value_heads", true, &c.num_key_value_heads));
  DICE_RETURN_IF_ERROR(ReadInt(j, source, "intermediate_size", true, &c.intermediate_size));
  DICE_RETURN_IF_ERROR(ReadInt(j, source, "vocab_size", true, &c.vocab_size));
  c.head_dim = 0;
  DICE_RETURN_IF_ERROR(ReadInt(j, source, "head_dim", false, &c.head_dim));
  const bool head_dim_given = j.contains("head_dim") && !j["head_dim"].is_null();
  DICE_RETURN_IF_ERROR(
      ReadInt(j, source, "max_position_embeddings", false, &c.max_position_embeddings));
  DICE_RETURN_IF_ERROR(ReadDouble(j, source, "rope_theta", &c.rope_theta));
  DICE_RETURN_IF_ERROR(ReadDouble(j, source, "rms_norm_eps", &c.rms_norm_eps));
  DICE_RETURN_IF_ERROR(ReadBool(j, source, "tie_word_embeddings", &c.tie_word_embeddings));
  DICE_RETURN_IF_ERROR(ReadInt(j, source, "block_size", false, &c.block_size));
  DICE_RETURN_IF_ERROR(ReadInt(j, source, "mask_token_id", false, &c.mask_token_id));

  DICE_RETURN_IF_ERROR(RequirePositive(source, "hidden_size", c.hidden_size));
  DICE_RETURN_IF_ERROR(RequirePositive(source, "num_hidden_layers", c.num_hidden_layers));
  DICE_RETURN_IF_ERROR(RequirePositive(source, "num_attention_heads", c.num_attention_heads));
  DICE_RETURN_IF_ERROR(RequirePositive(source, "num_key_value_heads", c.num_key_value_heads));
  DICE_RETURN_IF_ERROR(RequirePositive(source, "intermediate_size", c.intermediate_size));
  DICE_RETURN_IF_ERROR(RequirePositive(source, "vocab_size", c.vocab_size));
  DICE_RETURN_IF_ERROR(
      RequirePositive(source, "max_position_embeddings", c.max_position_embeddings));
  DICE_RETURN_IF_ERROR(RequirePositive(source, "block_size", c.block_size));
  if (head_dim_given) {
    DICE_RETURN_IF_ERROR(RequirePositive(source, "head_dim", c.head_dim));
  } else {
    if (c.hidden_size % c.num_attention_heads != 0) {
      return Status(StatusCode::kInvalidArgument,
                    source + ": field 'head_dim' is absent and hidden_size " +
                        std::to_string(c.hidden_size) + " is not divisible by num_attention_heads " +
                        std::to_string(c.num_attention_heads));
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return Status(StatusCode::kInvalidArgument,
                  source + ": field 'num_attention_heads' (" +
                      std::to_string(c.num_attention_heads) +
                      ") is not a multiple of 'num_key_value_heads' (" +
                      std::to_string(c.num_key_value_heads) + ")");
  }
  if (!(c.rope_theta > 0)) {
    return Status(StatusCode::kInvalidArgument,
                  source + ": field 'rope_theta' must be > 0, got " + std::to_string(c.rope_theta));
  }
  if (!(c.rms_norm_eps > 0)) {
    return Status(StatusCode::kInvalidArgument, source + ": field 'rms_norm_eps' must be > 0, got " +
                                                    std::to_string(c.rms_norm_eps));
  }
  if (c.mask_token_id < 0 || c.mask_token_id >= c.vocab_size) {
    return Status(StatusCode::kInvalidArgument,
                  source + ": field 'mask_token_id' (" + std::to_string(c.mask_token_id) +
                      ") is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
  }
  return c;
}

Expected<SdarConfig> SdarConfig::Load(const std::string& path) {
  auto text = ReadTextFile(path);
  if (!text.ok()) return text.status();
  return Parse(*text, path);
}

std::vector<TensorSpec> SdarConfig::ExpectedTensors() const {
  const int64_t h = hidden_size, q = num_attention_heads * head_dim,
                kv = num_key_value_heads * head_dim, inter = intermediate_size;
  std::vector<TensorSpec> out;
  out.reserve(static_cast<size_t>(num_hidden_layers) * 11 + 3);
  out.push_back({"model.embed_tokens.weight", {vocab_size, h}});
  for (int64_t i = 0; i < num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    out.push_back({p + "input_layernorm.weight", {h}});
    out.push_back({p + "self_attn.q_proj.weight", {q, h}});
    out.push_back({p + "self_attn.k_proj.weight", {kv, h}});
    out.push_back({p + "self_attn.v_proj.weight", {kv, h}});
    out.push_back({p + "self_attn.o_proj.weight", {h, q}});
    out.push_back({p + "self_attn.q_norm.weight", {head_dim}});
    out.push_back({p + "self_attn.k_norm.weight", {head_dim}});
    out.push_back({p + "post_attention_layernorm.weight", {h}});
    out.push_back({p + "mlp.gate_proj.weight", {inter, h}});
    out.push_back({p + "mlp.up_proj.weight", {inter, h}});
    out.push_back({p + "mlp.down_proj.weight", {h, inter}});
  }
  out.push_back({"model.norm.weight", {h}});
  if (!tie_word_embeddings) out.push_back({"lm_head.weight", {vocab_size, h}});
  return out;
}

// --------------------------------------------------- SafetensorsFile ----

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      map_size_(std::exchange(other.map_size_, 0)),
      entries_(std::move(other.entries_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    Unmap();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_size_ = std::exchange(other.map_size_, 0);
    entries_ = std::move(other.entries_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { Unmap(); }

void SafetensorsFile::Unmap() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
  map_ = nullptr;
  map_size_ = 0;
}

Expected<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status(StatusCode::kNotFound, path + ": no such file");
    return Status(StatusCode::kIoError, path + ": open failed: " + std::strerror(errno));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const std::string err = std::strerror(errno);
    ::close(fd);
    return Status(StatusCode::kIoError, path + ": fstat failed: " + err);
  }
  const auto file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    ::close(fd);
    return Status(StatusCode::kCorrupt, path + ": truncated: " + std::to_string(file_size) +
                                            " bytes, shorter than the 8-byte header length");
  }
  void* map = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  if (map == MAP_FAILED) {
    return Status(StatusCode::kIoError, path + ": mmap failed: " + std::strerror(map_errno));
  }
  SafetensorsFile f;  // owns the mapping from here on: every error path unmaps
  f.path_ = path;
  f.map_ = map;
  f.map_size_ = file_size;

  const auto* bytes = static_cast<const unsigned char*>(map);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > file_size - 8) {
    return Status(StatusCode::kCorrupt,
                  path + ": header length " + std::to_string(header_len) +
                      " exceeds the file (" + std::to_string(file_size) + " bytes): truncated or not safetensors");
  }
  const uint64_t buffer_start = 8 + header_len;
  const uint64_t buffer_size = file_size - buffer_start;

  json header;
  try {
    header = json::parse(reinterpret_cast<const char*>(bytes + 8),
                         reinterpret_cast<const char*>(bytes + buffer_start));
  } catch (const json::exception& e) {
    return Status(StatusCode::kCorrupt, path + ": malformed JSON header: " + e.what());
  }
  if (!header.is_object()) {
    return Status(StatusCode::kCorrupt, path + ": header is not a JSON object");
  }

  struct Span {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) {
        return Status(StatusCode::kCorrupt, path + ": __metadata__ is not a JSON object");
      }
      for (auto m = v.begin(); m != v.end(); ++m) {
        f.metadata_[m.key()] = m.value().is_string() ? m.value().get<std::string>() : m.value().dump();
      }
      continue;
    }
    const std::string where = path + ": tensor '" + name + "'";
    if (!v.is_object()) return Status(StatusCode::kCorrupt, where + ": entry is not a JSON object");
    auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) {
      return Status(StatusCode::kCorrupt, where + ": missing or non-string 'dtype'");
    }
    Entry e;
    if (!ParseDtype(dt->get<std::string>(), &e.dtype)) {
      return Status(StatusCode::kUnsupported, where + ": dtype " + dt->get<std::string>() +
                                                  " is not supported (F32, F16, BF16 are)");
    }
    auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) {
      return Status(StatusCode::kCorrupt, where + ": missing or non-array 'shape'");
    }
    uint64_t numel = 1;
    for (const json& d : *sh) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) {
        return Status(StatusCode::kCorrupt, where + ": shape " + sh->dump() +
                                                " has an entry that is not a non-negative integer");
      }
      e.shape.push_back(d.get<int64_t>());
      if (!CheckedMul(numel, static_cast<uint64_t>(d.get<int64_t>()), &numel)) {
        return Status(StatusCode::kCorrupt, where + ": shape " + sh->dump() + " overflows");
      }
    }
    uint64_t expect_bytes = 0;
    if (!CheckedMul(numel, WeightDtypeSize(e.dtype), &expect_bytes)) {
      return Status(StatusCode::kCorrupt, where + ": shape " + sh->dump() + " overflows");
    }
    auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned()) {
      return Status(StatusCode::kCorrupt,
                    where + ": 'data_offsets' must be two non-negative integers [begin, end]");
    }
    const uint64_t begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
    if (begin > end) {
      return Status(StatusCode::kCorrupt, where + ": data_offsets [" + std::to_string(begin) + ", " +
                                              std::to_string(end) + "] has begin > end");
    }
    if (end > buffer_size) {
      return Status(StatusCode::kCorrupt,
                    where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                        "] run past the data buffer (" + std::to_string(buffer_size) +
                        " bytes): file truncated or header wrong");
    }
    if (end - begin != expect_bytes) {
      return Status(StatusCode::kCorrupt,
                    where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                        "] hold " + std::to_string(end - begin) + " bytes but " +
                        WeightDtypeName(e.dtype) + " " + ShapeString(e.shape) + " needs " +
                        std::to_string(expect_bytes));
    }
    e.begin = static_cast<size_t>(buffer_start + begin);
    e.nbytes = static_cast<size_t>(expect_bytes);
    auto [pos, inserted] = f.entries_.emplace(name, std::move(e));
    (void)inserted;  // the JSON parser keeps the last of duplicate keys
    if (end > begin) spans.push_back({begin, end, &pos->first});
  }
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].begin < spans[i - 1].end) {
      return Status(StatusCode::kCorrupt, path + ": tensor '" + *spans[i].name +
                                              "' overlaps tensor '" + *spans[i - 1].name +
                                              "' in the data buffer");
    }
  }
  return f;
}

std::vector<std::string> SafetensorsFile::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const auto& [name, e] : entries_) names.push_back(name);
  return names;
}

Expected<TensorView> SafetensorsFile::Get(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    return Status(StatusCode::kNotFound, path_ + ": no tensor '" + name + "'");
  }
  TensorView v;
  v.name = name;
  v.dtype = it->second.dtype;
  v.shape = it->second.shape;
  v.data = static_cast<const unsigned char*>(map_) + it->second.begin;
  v.nbytes = it->second.nbytes;
  return v;
}

// -------------------------------------------------------- Checkpoint ----

Expected<Checkpoint> Checkpoint::Open(const std::string& dir) {
  Checkpoint ck;
  ck.dir_ = dir;
  auto config = SdarConfig::Load(JoinPath(dir, kConfigFile));
  if (!config.ok()) return config.status();
  ck.config_ = std::move(config).value();

  const std::string single = JoinPath(dir, kSingleFile);
  const std::string index = JoinPath(dir, kIndexFile);
  if (FileExists(single)) {
    auto f = SafetensorsFile::Open(single);
    if (!f.ok()) return f.status();
    for (const auto& name : f->TensorNames()) ck.where_[name] = 0;
    ck.files_.push_back(std::move(f).value());
    ck.source_ = single;
    return ck;
  }
  if (!FileExists(index)) {
    return Status(StatusCode::kNotFound,
                  dir + ": no weights: neither " + kSingleFile + " nor " + kIndexFile + " exists");
  }
  ck.source_ = index;
  auto text = ReadTextFile(index);
  if (!text.ok()) return text.status();
  json j;
  try {
    j = json::parse(*text);
  } catch (const json::exception& e) {
    return Status(StatusCode::kCorrupt, index + ": malformed JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
    return Status(StatusCode::kCorrupt, index + ": no 'weight_map' object");
  }
  std::map<std::string, size_t> shard_index;  // shard file name -> files_ index
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    const std::string& tensor = it.key();
    if (!it.value().is_string()) {
      return Status(StatusCode::kCorrupt,
                    index + ": weight_map entry for tensor '" + tensor + "' is not a file name");
    }
    const std::string shard = it.value().get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..") {
      return Status(StatusCode::kCorrupt, index + ": tensor '" + tensor + "' maps to '" + shard +
                                              "', not a file name in the checkpoint directory");
    }
    auto found = shard_index.find(shard);
    if (found == shard_index.end()) {
      const std::string shard_path = JoinPath(dir, shard);
      if (!FileExists(shard_path)) {
        return Status(StatusCode::kNotFound, index + ": shard '" + shard + "' (holding tensor '" +
                                                 tensor + "') does not exist: " + shard_path);
      }
      auto f = SafetensorsFile::Open(shard_path);
      if (!f.ok()) return f.status();
      ck.files_.push_back(std::move(f).value());
      found = shard_index.emplace(shard, ck.files_.size() - 1).first;
    }
    const SafetensorsFile& file = ck.files_[found->second];
    if (!file.Contains(tensor)) {
      return Status(StatusCode::kCorrupt, file.path() + ": tensor '" + tensor + "' is missing, but " +
                                              index + " maps it to this shard");
    }
    ck.where_[tensor] = found->second;
  }
  return ck;
}

std::vector<std::string> Checkpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(where_.size());
  for (const auto& [name, i] : where_) names.push_back(name);
  return names;
}

std::string Checkpoint::FileOf(const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? std::string() : files_[it->second].path();
}

Expected<TensorView> Checkpoint::Get(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) {
    return Status(StatusCode::kNotFound, source_ + ": no tensor '" + name + "'");
  }
  return files_[it->second].Get(name);
}

Status Checkpoint::Validate() const {
  for (const TensorSpec& spec : config_.ExpectedTensors()) {
    auto it = where_.find(spec.name);
    if (it == where_.end()) {
      return Status(StatusCode::kNotFound, source_ + ": missing tensor '" + spec.name +
                                               "' (expected shape " + ShapeString(spec.shape) + ")");
    }
    auto view = files_[it->second].Get(spec.name);
    if (!view.ok()) return view.status();
    if (view->shape != spec.shape) {
      return Status(StatusCode::kCorrupt, files_[it->second].path() + ": tensor '" + spec.name +
                                              "' has shape " + ShapeString(view->shape) +
                                              ", config.json implies " + ShapeString(spec.shape));
    }
  }
  return Status::Ok();
}

}  // namespace dice::generator
