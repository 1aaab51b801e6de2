// The train / validation / held-out split: see dice/training/split.h. Torch-free.
#include "dice/training/split.h"

#include <algorithm>
#include <set>

#include "dice/training/sweep.h"

namespace dice::training {

Status CheckSplitOptions(const SplitOptions& o) {
  auto bad = [](const std::string& m) { return Status(StatusCode::kInvalidArgument, m); };
  if (!(o.heldout_percent >= 0 && o.heldout_percent <= 100)) return bad("--heldout-percent must be in [0, 100]");
  if (!(o.validation_percent >= 0 && o.validation_percent <= 100)) {
    return bad("--validation-percent must be in [0, 100]");
  }
  if (o.heldout_percent + o.validation_percent > 100) {
    return bad("--heldout-percent + --validation-percent must be <= 100");
  }
  return Status::Ok();
}

std::string OpChainKey(const ir::Graph& graph) {
  std::vector<std::string> names;
  for (const auto& op : graph.ops) {
    if (op.kind == ir::OpKind::kConstant) continue;
    names.emplace_back(ir::GetOpInfo(op.kind).name);
  }
  std::sort(names.begin(), names.end());
  std::string key;
  for (const auto& n : names) key += (key.empty() ? "" : "+") + n;
  return key;
}

const char* SplitOfKey(const std::string& key, const SplitOptions& o) {
  // First 8 hex digits of the key's sha256 as a fraction of 2^32.
  const std::string hex = ir::Sha256Hex(key);
  const double x = static_cast<double>(std::stoul(hex.substr(0, 8), nullptr, 16)) / 4294967296.0;
  if (x * 100.0 < o.heldout_percent) return "heldout";
  if (x * 100.0 < o.heldout_percent + o.validation_percent) return "validation";
  return "train";
}

bool InSplit(const std::string& example_split, const std::string& wanted) {
  if (wanted == "all") return true;
  return (example_split.empty() ? std::string("train") : example_split) == wanted;
}

CatalogSplit SplitCatalog(const std::vector<SweepEntry>& catalog, const SplitOptions& o) {
  CatalogSplit out;
  std::map<std::string, std::set<std::string>> chains;
  for (const char* name : {"train", "validation", "heldout"}) {
    out.parts[name];
    chains[name];
  }
  for (const auto& e : catalog) {
    const std::string key = OpChainKey(e.graph);
    const std::string split = SplitOfKey(key, o);
    auto& part = out.parts[split];
    const int64_t n = static_cast<int64_t>(e.shapes.size());
    part.tasks += n;
    if (key.find('+') == std::string::npos) part.level1_tasks += n;
    chains[split].insert(key);
  }
  for (auto& [name, part] : out.parts) part.op_chains.assign(chains[name].begin(), chains[name].end());
  return out;
}

std::string DescribeCatalogSplit(const CatalogSplit& split) {
  std::string out;
  for (const char* name : {"train", "validation", "heldout"}) {
    const auto& p = split.parts.at(name);
    out += std::string(out.empty() ? "" : ", ") + name + " " + std::to_string(p.tasks) + " tasks (" +
           std::to_string(p.op_chains.size()) + " op-chains, " + std::to_string(p.level1_tasks) + " single-op tasks)";
  }
  return out;
}

}  // namespace dice::training
