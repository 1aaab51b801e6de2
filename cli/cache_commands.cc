// `dice cache ...` (cli/cache_commands.h): the group, its --cache option and
// the inspecting subcommands ls, show and rm; serve and the sharing
// subcommands register from their own files.
#include "cache_commands.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cache_serve.h"
#include "cache_share.h"
#include "dice/cache/store.h"
#include "dice/core/ir.h"

namespace dice::cli {

std::string NoCacheYet(const std::string& dir) {
  struct stat st {};
  const std::string db = dice::cache::DatabasePath(dir);
  if (::stat(db.c_str(), &st) == 0 || errno != ENOENT) return "";
  if (::stat(dir.c_str(), &st) != 0) return errno == ENOENT ? "the directory " + dir + " does not exist" : "";
  return S_ISDIR(st.st_mode) ? dir + " holds no " + db.substr(db.rfind('/') + 1) : "";
}

namespace {

int CmdCache(const std::string& action, const std::string& key, const std::string& cache_dir_arg) {
  const std::string dir = cache_dir_arg.empty() ? dice::cache::DefaultCacheDir() : cache_dir_arg;
  // Inspecting a cache that is not there must not create it (issue 20 item 8).
  if (const std::string why = NoCacheYet(dir); !why.empty()) {
    if (action != "ls") return Fail(kExitBadInput, "no cache entry with key '" + key + "': no cache yet (" + why + ")");
    std::printf("0 winner(s): the cache is empty (%s); `dice tune` or `dice warmup` fills it, `dice cache pull` "
                "copies a server's winners here\n", why.c_str());
    return kExitOk;
  }
  auto store = dice::cache::Store::Open(dice::cache::DatabasePath(dir));
  if (!store.ok()) return Fail(kExitBadInput, store.status().message());
  if (action == "ls") {
    auto rows = (*store)->ListWinners();
    if (!rows.ok()) return Fail(kExitFailure, rows.status().message());
    if (!rows->empty()) {
      std::printf("%-16s %-6s %-28s %-30s %8s %s\n", "key", "arch", "ops", "inputs", "speedup", "origin");
    }
    for (const auto& r : *rows) {
      auto g = dice::ir::Parse(r.graph_canonical);
      std::printf("%-16s %-6s %-28s %-30s %7.2fx %s\n", r.task_key.substr(0, 16).c_str(), r.arch.c_str(),
                  g.ok() ? dice::ir::Summary(*g).substr(0, 28).c_str() : "?", r.input_specs.substr(0, 30).c_str(),
                  r.speedup, r.origin.c_str());
    }
    std::printf("%zu winner(s) in %s\n", rows->size(), (*store)->path().c_str());
    if (rows->empty()) {
      std::printf("dice: winners are stored by `dice tune` (or warmup, pull, import) on a machine with a GPU; "
                  "a compile-only run stores none\n");
    }
    return kExitOk;
  }
  // show / rm accept a unique key prefix.
  auto rows = (*store)->ListWinners();
  if (!rows.ok()) return Fail(kExitFailure, rows.status().message());
  std::vector<std::string> matches;
  for (const auto& r : *rows) {
    if (!key.empty() && r.task_key.rfind(key, 0) == 0) matches.push_back(r.task_key);
  }
  if (matches.size() != 1) {
    return Fail(kExitBadInput, matches.empty() ? "no cache entry with key '" + key + "'"
                                               : "key prefix '" + key + "' is ambiguous");
  }
  if (action == "rm") {
    auto removed = (*store)->RemoveWinner(matches[0]);
    if (!removed.ok()) return Fail(kExitFailure, removed.status().message());
    std::printf("removed %s\n", matches[0].c_str());
    return kExitOk;
  }
  auto rec = (*store)->GetWinner(matches[0]);
  if (!rec.ok()) return Fail(kExitFailure, rec.status().message());
  const auto& r = **rec;
  std::printf("key:       %s\narch:      %s (%s)\ninputs:    %s\norigin:    %s\nbaseline:  %.2f µs\nbest:      %.2f µs\n"
              "speedup:   %.2fx\nversions:  %s\ncubin:     %zu bytes\nlaunch:    %s\n\n--- IR ---\n%s\n--- source ---\n%s\n",
              r.task_key.c_str(), r.arch.c_str(), r.gpu_name.c_str(), r.input_specs.c_str(), r.origin.c_str(),
              r.baseline_us, r.best_us, r.speedup, r.versions_json.c_str(), r.cubin.size(), r.launch_plan_json.c_str(),
              r.graph_canonical.c_str(), r.source.c_str());
  return kExitOk;
}

}  // namespace

void RegisterCache(CLI::App& app, CommandTable& table) {
  const char* cache_help = "cache directory (default $DICE_CACHE_DIR or ~/.cache/dice)";
  // One directory for the group and for ls/show/rm (`dice cache --cache D ls`
  // and `dice cache ls --cache D` mean the same); the sharing subcommands
  // read it too, their own --cache winning over it.
  auto dir = std::make_shared<std::string>();
  auto* cache = app.add_subcommand("cache", "inspect the kernel cache");
  cache->require_subcommand(1);
  cache->add_option("--cache", *dir, cache_help);
  auto* ls = cache->add_subcommand("ls", "list cached winners");
  auto show_key = std::make_shared<std::string>();
  auto* show = cache->add_subcommand("show", "print one winner (IR, source, launch plan, times)");
  show->add_option("key", *show_key, "task key or unique prefix")->required();
  auto rm_key = std::make_shared<std::string>();
  auto* rm = cache->add_subcommand("rm", "remove one winner");
  rm->add_option("key", *rm_key, "task key or unique prefix")->required();
  RegisterCacheServe(*cache, table);
  RegisterCacheShare(*cache, dir, table);  // push, pull, export, import, gc, stats
  for (auto* sub : {ls, show, rm}) sub->add_option("--cache", *dir, cache_help);
  table.Add(ls, [dir] { return CmdCache("ls", "", *dir); });
  table.Add(show, [dir, show_key] { return CmdCache("show", *show_key, *dir); });
  table.Add(rm, [dir, rm_key] { return CmdCache("rm", *rm_key, *dir); });
}

}  // namespace dice::cli
