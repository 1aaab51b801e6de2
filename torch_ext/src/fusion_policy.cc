// The grouping policy of both frontends (fusion_policy.h). No torch headers.
#include "fusion_policy.h"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <unordered_set>
#include <utility>

#include <nlohmann/json.hpp>

namespace dice::torch_ext {
namespace {

// Ops with a `dim` argument (or none: whole-tensor) that reduce over it.
const std::unordered_set<std::string_view>& DimReductions() {
  static const std::unordered_set<std::string_view> kinds = {
      "aten::sum",     "aten::mean",        "aten::amax",       "aten::amin",     "aten::max",
      "aten::min",     "aten::softmax",     "aten::log_softmax", "aten::_softmax", "aten::_log_softmax",
      "aten::logsumexp", "aten::norm",      "aten::linalg_vector_norm", "aten::prod", "aten::var",
      "aten::std",     "aten::var_mean",    "aten::argmax",     "aten::argmin",   "aten::all",
      "aten::any"};
  return kinds;
}

// Norms over the last len(normalized_shape) axes.
const std::unordered_set<std::string_view>& LastAxesNorms() {
  static const std::unordered_set<std::string_view> kinds = {"aten::layer_norm", "aten::native_layer_norm",
                                                             "aten::rms_norm"};
  return kinds;
}

// Norms over axes no signature can name (group_norm's channel groups).
const std::unordered_set<std::string_view>& OpaqueNorms() {
  static const std::unordered_set<std::string_view> kinds = {"aten::group_norm", "aten::native_group_norm",
                                                             "aten::instance_norm"};
  return kinds;
}

// Windowed pools: a reduction over windows of the spatial dims, which no
// other op of a group can share (lowering.h: they split the pooled axes).
const std::unordered_set<std::string_view>& WindowPools() {
  static const std::unordered_set<std::string_view> kinds = {"aten::avg_pool1d", "aten::avg_pool2d",
                                                             "aten::avg_pool3d", "aten::max_pool1d",
                                                             "aten::max_pool2d", "aten::max_pool3d"};
  return kinds;
}

std::string DimsSignature(const std::vector<int64_t>& dims) {
  std::string sig = "dims:";
  for (size_t i = 0; i < dims.size(); ++i) sig += (i ? "," : "") + std::to_string(dims[i]);
  return sig;
}

// Reduction signatures of a node, or of every node inside a group formed earlier.
void CollectSignatures(const PolicyNode& node, const std::string& unique, std::set<std::string>* sigs) {
  if (!node.inner.empty()) {
    for (size_t j = 0; j < node.inner.size(); ++j)
      CollectSignatures(node.inner[j], unique + "." + std::to_string(j), sigs);
    return;
  }
  std::string sig = ReductionSignature(node, unique);
  if (!sig.empty()) sigs->insert(std::move(sig));
}

int NontrivialCount(const PolicyNode& node) {
  if (node.inner.empty()) return IsCastOrProjection(node.kind) ? 0 : 1;
  int n = 0;
  for (const PolicyNode& p : node.inner) n += NontrivialCount(p);
  return n;
}

// True when no path leaves `members` and comes back into it. Edges run from a
// lower index to a higher one, so only nodes before the last member matter.
class ConvexityCheck {
 public:
  explicit ConvexityCheck(const std::vector<PolicyNode>& nodes)
      : users_(nodes.size()), in_set_(nodes.size(), 0), seen_(nodes.size(), 0) {
    for (size_t i = 0; i < nodes.size(); ++i)
      for (int p : nodes[i].inputs) users_[p].push_back(static_cast<int>(i));
  }

  bool Convex(const std::vector<int>& members) {
    int last = -1;
    for (int m : members) {
      in_set_[m] = 1;
      last = std::max(last, m);
    }
    ++stamp_;
    std::vector<int>& frontier = frontier_;
    frontier.clear();
    for (int m : members)
      for (int u : users_[m])
        if (!in_set_[u]) frontier.push_back(u);
    bool convex = true;
    while (convex && !frontier.empty()) {
      int n = frontier.back();
      frontier.pop_back();
      if (seen_[n] == stamp_ || n > last) continue;
      seen_[n] = stamp_;
      for (int u : users_[n]) {
        if (in_set_[u]) {
          convex = false;
          break;
        }
        frontier.push_back(u);
      }
    }
    for (int m : members) in_set_[m] = 0;
    return convex;
  }

 private:
  std::vector<std::vector<int>> users_;
  std::vector<char> in_set_;
  std::vector<unsigned> seen_;
  std::vector<int> frontier_;
  unsigned stamp_ = 0;
};

// A group being grown by ProposeFusionGroups.
struct Group {
  std::vector<int> members;
  std::set<std::string> sigs;  // reduction signatures of the members
  bool gemm = false;           // rule 4: starts with a GEMM node
};

bool HoldsGemm(const PolicyNode& node) {
  if (IsGemmKind(node.kind)) return true;
  for (const PolicyNode& p : node.inner)
    if (HoldsGemm(p)) return true;
  return false;
}

// True when `node` may compute one more value of a GEMM epilogue whose
// members so far are marked in `member` (rule 4): an elementwise op whose
// tensor operands are members (each read once; with two operands, both of the
// output's full shape) or, at most one of them, the group's extra tensor: a
// row vector in add / in sub after a member, or a full-size residual in add,
// beside a full-size member. *adds_extra: it brings the extra tensor.
bool FitsGemmEpilogue(const PolicyNode& node, const std::vector<char>& member, bool group_has_extra,
                      bool* adds_extra) {
  *adds_extra = false;
  if (!node.epilogue_op || !node.inner.empty()) return false;
  const std::vector<TensorOperand>& ops = node.epilogue_operands;
  if (ops.empty() || ops.size() > 2) return false;
  auto is_member = [&](const TensorOperand& o) { return o.source >= 0 && member[o.source]; };
  if (ops.size() == 1) return is_member(ops[0]);  // unary, or binary with a scalar
  const bool m0 = is_member(ops[0]), m1 = is_member(ops[1]);
  if (m0 && m1) {  // both operands from inside: y * sigmoid(y), s * y + y
    if (ops[0].source == ops[1].source) return false;  // the same value twice (y * y): kept split
    return ops[0].extent == Extent::kFull && ops[1].extent == Extent::kFull;
  }
  if (!m0 && !m1) return false;
  const int at = m0 ? 0 : 1;
  if (group_has_extra || ops[at].extent != Extent::kFull) return false;
  const Extent other = ops[1 - at].extent;
  const bool fits = (other == Extent::kRow && (node.kind == "aten::add" || (node.kind == "aten::sub" && at == 0))) ||
                    (other == Extent::kFull && node.kind == "aten::add");
  *adds_extra = fits;
  return fits;
}

// The GEMM groups the chain rule (before epilogues were DAGs) forms: each
// epilogue node reads its group's last node, which has no other reader and
// is no graph output; a node two groups could take goes to the group of its
// first input. Returns, per node, the GEMM node whose chain holds it, or -1.
// PlanGemmGroup leaves a node chained to another GEMM to that GEMM, so every
// chain stays grouped exactly as before.
std::vector<int> ChainGemmOf(const std::vector<PolicyNode>& nodes, const std::vector<std::vector<int>>& readers) {
  const int n = static_cast<int>(nodes.size());
  std::vector<int> chain_of(n, -1), tail(n, -1);
  std::vector<char> has_extra(n, 0), only(n, 0);
  for (int i = 0; i < n; ++i) {
    if (!nodes[i].fusible) continue;
    for (int p : nodes[i].inputs) {
      const int g = chain_of[p];
      if (g < 0 || tail[g] != p || nodes[p].escapes || readers[p].size() != 1) continue;
      only[p] = 1;
      bool adds_extra = false;
      const bool fits = FitsGemmEpilogue(nodes[i], only, has_extra[g] != 0, &adds_extra);
      only[p] = 0;
      if (!fits) continue;
      chain_of[i] = g;
      tail[g] = i;
      has_extra[g] |= adds_extra ? 1 : 0;
      break;
    }
    if (chain_of[i] < 0 && IsGemmKind(nodes[i].kind)) chain_of[i] = tail[i] = i;
  }
  return chain_of;
}

// Rule 4: the members of the GEMM group that GEMM node `gemm` starts, in
// ascending order. Scans the later nodes once, taking each fusible node not
// yet `claimed` by an earlier GEMM group nor chained to another GEMM
// (`chain_of`, ChainGemmOf) that reads a taken node and fits
// (FitsGemmEpilogue); then keeps the largest single-output part: the taken
// nodes that the latest possible last node t depends on, where every kept
// node but t has all its readers kept and is no graph output. (Such parts
// are nested, so the latest valid t gives the largest.) A chain of single
// readers gives the group the chain rule gave before epilogues were DAGs.
std::vector<int> PlanGemmGroup(const std::vector<PolicyNode>& nodes, const std::vector<std::vector<int>>& readers,
                               int gemm, const std::vector<int>& claimed, const std::vector<int>& chain_of,
                               ConvexityCheck* convexity) {
  const int n = static_cast<int>(nodes.size());
  std::vector<char> taken(n, 0);
  taken[gemm] = 1;
  std::vector<int> order = {gemm};
  int horizon = readers[gemm].empty() ? gemm : readers[gemm].back();  // last node reading a taken one
  bool has_extra = false;
  for (int j = gemm + 1; j < n && j <= horizon; ++j) {
    if (!nodes[j].fusible || claimed[j] >= 0 || (chain_of[j] >= 0 && chain_of[j] != gemm)) continue;
    bool reads_taken = false;
    for (int p : nodes[j].inputs) reads_taken |= taken[p] != 0;
    bool adds_extra = false;
    if (!reads_taken || !FitsGemmEpilogue(nodes[j], taken, has_extra, &adds_extra)) continue;
    taken[j] = 1;
    order.push_back(j);
    has_extra |= adds_extra;
    if (!readers[j].empty()) horizon = std::max(horizon, readers[j].back());
  }
  // Latest valid last node t: its ancestors among the taken nodes.
  std::vector<char> kept(n, 0);  // set only at taken nodes
  for (size_t k = order.size(); k-- > 1;) {
    const int t = order[k];
    for (int m : order) kept[m] = 0;
    kept[t] = 1;
    std::vector<int> part;
    for (size_t q = k + 1; q-- > 0;) {  // descending: readers before the nodes they read
      const int m = order[q];
      if (!kept[m]) continue;
      part.push_back(m);
      for (int p : nodes[m].inputs)
        if (taken[p]) kept[p] = 1;
    }
    if (!kept[gemm]) continue;
    bool single_output = true;
    for (int m : part) {
      if (m == t) continue;
      if (nodes[m].escapes) single_output = false;
      for (int r : readers[m]) single_output = single_output && kept[r];
    }
    std::reverse(part.begin(), part.end());
    if (single_output && convexity->Convex(part)) return part;
  }
  return {gemm};
}

// The "dim" value of the JSON form into out->dim / out->dims; false when malformed.
bool ParseDim(const nlohmann::json& v, PolicyNode* out) {
  if (v.is_null()) {
    out->dim = DimArg::kNone;
  } else if (v.is_number_integer()) {
    out->dim = DimArg::kList;
    out->dims = {v.get<int64_t>()};
  } else if (v.is_array()) {
    out->dim = DimArg::kList;
    for (const auto& e : v) {
      if (!e.is_number_integer()) return false;
      out->dims.push_back(e.get<int64_t>());
    }
  } else if (v.is_string() && v.get<std::string>() == "?") {
    out->dim = DimArg::kUnknown;
  } else {
    return false;
  }
  return true;
}

// The GEMM rule's facts (PolicyNode::escapes, epilogue_op, epilogue_operands):
// "escapes": bool, "epilogue_op": bool, "epilogue_operands": [{"source": int,
// "extent": "full" | "row" | "other" | "unknown"}, ...]. Absent keys keep the
// defaults (a node no GEMM group takes).
template <typename Bad>
Status ParseGemmFacts(const nlohmann::json& j, const Bad& bad, PolicyNode* out) {
  const std::pair<const char*, bool*> flags[] = {
      {"escapes", &out->escapes}, {"epilogue_op", &out->epilogue_op}, {"needs_epilogue", &out->needs_epilogue}};
  for (const auto& flag : flags) {
    auto it = j.find(flag.first);
    if (it == j.end()) continue;
    if (!it->is_boolean()) return bad(std::string("\"") + flag.first + "\" must be a boolean");
    *flag.second = it->template get<bool>();
  }
  auto it = j.find("epilogue_operands");
  if (it == j.end()) return Status::Ok();
  const char* shape = "\"epilogue_operands\" must be a list of {\"source\": int, \"extent\": full|row|other|unknown}";
  if (!it->is_array()) return bad(shape);
  for (const auto& e : *it) {
    auto src = e.is_object() ? e.find("source") : e.end();
    auto ext = e.is_object() ? e.find("extent") : e.end();
    if (src == e.end() || !src->is_number_integer() || ext == e.end() || !ext->is_string()) return bad(shape);
    const std::string x = ext->get<std::string>();
    Extent extent;
    if (x == "full") extent = Extent::kFull;
    else if (x == "row") extent = Extent::kRow;
    else if (x == "other") extent = Extent::kOther;
    else if (x == "unknown") extent = Extent::kUnknown;
    else return bad(shape);
    out->epilogue_operands.push_back({src->get<int>(), extent});
  }
  return Status::Ok();
}

Status ParseNode(const nlohmann::json& j, const std::string& where, PolicyNode* out) {
  auto bad = [&](const std::string& what) {
    return Status(StatusCode::kInvalidArgument, "fusion policy graph: " + where + ": " + what);
  };
  if (!j.is_object()) return bad("not an object");
  auto kind = j.find("kind");
  if (kind == j.end() || !kind->is_string()) return bad("\"kind\" must be a string");
  out->kind = kind->get<std::string>();
  auto get_int = [&](const char* key, int* v) -> Status {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return Status::Ok();
    if (!it->is_number_integer()) return bad(std::string("\"") + key + "\" must be an integer");
    *v = it->get<int>();
    return Status::Ok();
  };
  if (auto it = j.find("fusible"); it != j.end()) {
    if (!it->is_boolean()) return bad("\"fusible\" must be a boolean");
    out->fusible = it->get<bool>();
  }
  if (auto it = j.find("inputs"); it != j.end()) {
    if (!it->is_array()) return bad("\"inputs\" must be a list of integers");
    for (const auto& e : *it) {
      if (!e.is_number_integer()) return bad("\"inputs\" must be a list of integers");
      out->inputs.push_back(e.get<int>());
    }
  }
  DICE_RETURN_IF_ERROR(get_int("operands", &out->operands));
  DICE_RETURN_IF_ERROR(get_int("tensor_operands", &out->tensor_operands));
  int v = -1;
  DICE_RETURN_IF_ERROR(get_int("rank", &v));
  if (v >= 0) out->rank = v;
  v = -1;
  DICE_RETURN_IF_ERROR(get_int("normalized_dims", &v));
  if (v >= 0) out->normalized_dims = v;
  if (auto it = j.find("dim"); it != j.end() && !ParseDim(*it, out)) {
    return bad("\"dim\" must be null, an integer, a list of integers or \"?\"");
  }
  DICE_RETURN_IF_ERROR(ParseGemmFacts(j, bad, out));
  if (auto it = j.find("inner"); it != j.end()) {
    if (!it->is_array()) return bad("\"inner\" must be a list of nodes");
    out->inner.resize(it->size());
    for (size_t k = 0; k < it->size(); ++k)
      DICE_RETURN_IF_ERROR(ParseNode((*it)[k], where + " inner " + std::to_string(k), &out->inner[k]));
  }
  return Status::Ok();
}

}  // namespace

bool IsConvKind(std::string_view kind) { return kind == "aten::conv2d" || kind == "aten::_convolution"; }

bool IsGemmKind(std::string_view kind) { return kind == "aten::linear" || IsConvKind(kind); }

GemmGroups ParseGemmGroups(const char* value, GemmGroups unset) {
  if (value == nullptr) return unset;
  const std::string_view v(value);
  if (v == "all") return GemmGroups::kAll;
  if (v == "epilogue") return GemmGroups::kEpilogue;
  if (v == "f32" || v == "float32") return GemmGroups::kFloat32;
  if (v == "0" || v == "off") return GemmGroups::kOff;
  return unset;
}

GemmGroups GemmGroupsFromEnv(GemmGroups unset) { return ParseGemmGroups(std::getenv("DICE_GEMM_GROUPS"), unset); }

bool GemmGroupNeedsEpilogue(GemmGroups setting, ir::DType dtype) {
  return setting == GemmGroups::kEpilogue && dtype != ir::DType::kFloat32;
}

GemmGroups ParseConvGroups(const char* value) {
  if (value == nullptr) return GemmGroups::kOff;
  const std::string_view v(value);
  if (v == "all") return GemmGroups::kAll;
  if (v == "f32" || v == "float32" || v == "1") return GemmGroups::kFloat32;
  return GemmGroups::kOff;
}

GemmGroups ConvGroupsFromEnv() { return ParseConvGroups(std::getenv("DICE_CONV_GROUPS")); }

bool GemmGroupAllowed(GemmGroups setting, ir::DType dtype) {
  switch (setting) {
    case GemmGroups::kOff: return false;
    case GemmGroups::kFloat32: return dtype == ir::DType::kFloat32;
    case GemmGroups::kEpilogue:  // 16-bit ones with an epilogue only: needs_epilogue
    case GemmGroups::kAll: return true;
  }
  return false;
}

bool IsCastOrProjection(std::string_view kind) {
  return kind == "aten::to" || kind == "aten::type_as" || kind == "aten::_to_copy" ||
         kind == "prims::convert_element_type" || kind == "getitem";
}

std::string ReductionSignature(const PolicyNode& node, const std::string& unique) {
  const bool last_axes = LastAxesNorms().count(node.kind) != 0;
  if (!last_axes && !DimReductions().count(node.kind)) {
    return OpaqueNorms().count(node.kind) || WindowPools().count(node.kind) ? unique : "";
  }
  if (node.operands == 0) return unique;
  if (last_axes) {
    if (!node.normalized_dims || !node.rank || *node.normalized_dims > *node.rank) return unique;
    std::vector<int64_t> dims;
    for (int d = *node.rank - *node.normalized_dims; d < *node.rank; ++d) dims.push_back(d);
    return DimsSignature(dims);
  }
  switch (node.dim) {
    case DimArg::kAbsent:
      // Binary max/min (elementwise) reduce nothing; a whole-tensor sum/amax does.
      if ((node.kind == "aten::max" || node.kind == "aten::min") && node.tensor_operands == 2) return "";
      return "dims:all";
    case DimArg::kNone:
      return "dims:all";
    case DimArg::kUnknown:
      return unique;
    case DimArg::kList:
      break;
  }
  if (node.dims.empty()) return "dims:all";
  std::vector<int64_t> dims = node.dims;
  for (auto& d : dims)
    if (d < 0 && node.rank) d += *node.rank;
  std::sort(dims.begin(), dims.end());
  return DimsSignature(dims);
}

bool IsLayoutCopy(std::string_view kind) { return kind == "aten::contiguous"; }

namespace {
// Rule 5: whether a member of `members` reads a layout copy that is also a
// member (the copy would stop being a group output of its own format).
bool ReadsLayoutCopyInside(const std::vector<PolicyNode>& nodes, const std::vector<int>& members) {
  const std::set<int> in(members.begin(), members.end());
  for (int m : members)
    for (int p : nodes[m].inputs)
      if (in.count(p) && IsLayoutCopy(nodes[p].kind)) return true;
  return false;
}
}  // namespace

Expected<std::vector<std::vector<int>>> ProposeFusionGroups(const std::vector<PolicyNode>& nodes,
                                                            int min_nontrivial_ops) {
  const int n = static_cast<int>(nodes.size());
  for (int i = 0; i < n; ++i)
    for (int p : nodes[i].inputs)
      if (p < 0 || p >= i)
        return Status(StatusCode::kInvalidArgument, "fusion policy graph: node " + std::to_string(i) + " (" +
                                                        nodes[i].kind + ") reads node " + std::to_string(p) +
                                                        ", which does not come before it");
  ConvexityCheck convexity(nodes);
  std::vector<std::vector<int>> readers(n);  // distinct reading nodes
  for (int i = 0; i < n; ++i)
    for (int p : nodes[i].inputs)
      if (readers[p].empty() || readers[p].back() != i) readers[p].push_back(i);
  const std::vector<int> chain_of = ChainGemmOf(nodes, readers);
  std::vector<int> group_of(n, -1);
  std::vector<int> gemm_group_of(n, -1);  // rule 4: the GEMM group planned to take the node
  std::vector<Group> groups_by_id;        // emptied when merged away
  for (int i = 0; i < n; ++i) {
    if (!nodes[i].fusible) continue;
    if (gemm_group_of[i] >= 0) {  // a planned member of an open GEMM group
      group_of[i] = gemm_group_of[i];
      groups_by_id[gemm_group_of[i]].members.push_back(i);
      continue;
    }
    int gid = static_cast<int>(groups_by_id.size());
    groups_by_id.emplace_back();
    Group& fresh = groups_by_id.back();
    fresh.members = {i};
    CollectSignatures(nodes[i], "node:" + std::to_string(i), &fresh.sigs);
    fresh.gemm = HoldsGemm(nodes[i]);  // rule 4: a GEMM group takes no producer
    group_of[i] = gid;
    if (fresh.gemm && IsGemmKind(nodes[i].kind)) {  // not a group formed by an earlier run
      for (int m : PlanGemmGroup(nodes, readers, i, gemm_group_of, chain_of, &convexity))
        if (m != i) gemm_group_of[m] = gid;
    }
    if (fresh.gemm) continue;
    for (int p : nodes[i].inputs) {
      const int pg = group_of[p];
      if (pg < 0 || pg == gid || groups_by_id[pg].gemm) continue;
      std::set<std::string> merged_sigs = groups_by_id[pg].sigs;
      merged_sigs.insert(groups_by_id[gid].sigs.begin(), groups_by_id[gid].sigs.end());
      if (merged_sigs.size() > 1) continue;
      std::vector<int> merged = groups_by_id[pg].members;
      merged.insert(merged.end(), groups_by_id[gid].members.begin(), groups_by_id[gid].members.end());
      if (ReadsLayoutCopyInside(nodes, merged)) continue;  // rule 5
      if (!convexity.Convex(merged)) continue;
      for (int m : groups_by_id[gid].members) group_of[m] = pg;
      groups_by_id[pg].members = std::move(merged);
      groups_by_id[pg].sigs = std::move(merged_sigs);
      groups_by_id[gid].members.clear();
      gid = pg;
    }
  }
  std::vector<std::vector<int>> groups;
  for (Group& g : groups_by_id) {
    if (g.members.empty()) continue;
    int nontrivial = 0;
    for (int m : g.members) nontrivial += NontrivialCount(nodes[m]);
    if (nontrivial < min_nontrivial_ops) continue;
    if (g.members.size() == 1 && nodes[g.members[0]].needs_epilogue) continue;  // rule 4: no epilogue taken
    std::sort(g.members.begin(), g.members.end());
    groups.push_back(std::move(g.members));
  }
  std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) { return a.front() < b.front(); });
  return groups;
}

Expected<std::vector<PolicyNode>> ParsePolicyNodes(std::string_view json) {
  nlohmann::json doc = nlohmann::json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Status(StatusCode::kInvalidArgument, "fusion policy graph: not valid JSON");
  if (!doc.is_array()) return Status(StatusCode::kInvalidArgument, "fusion policy graph: not a list of nodes");
  std::vector<PolicyNode> nodes(doc.size());
  for (size_t i = 0; i < doc.size(); ++i)
    DICE_RETURN_IF_ERROR(ParseNode(doc[i], "node " + std::to_string(i), &nodes[i]));
  return nodes;
}

}  // namespace dice::torch_ext
