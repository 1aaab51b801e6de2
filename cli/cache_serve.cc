// `dice cache serve` (cli/cache_serve.h).
#include "cache_serve.h"

#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "dice/cache/http_server.h"

namespace dice::cli {
namespace {

/// `dice cache serve`: the HTTP cache server (cache/http_server.h) over a
/// SQLite store until SIGINT/SIGTERM, then a graceful stop. The token file's
/// first line is the bearer token writes need (no file: read-only server).
int CmdServe(const std::string& db, const std::string& listen, const std::string& token_file) {
  const size_t colon = listen.rfind(':');
  int port = -1;
  try {
    if (colon != std::string::npos) port = std::stoi(listen.substr(colon + 1));
  } catch (const std::exception&) {
  }
  if (colon == std::string::npos || port < 0 || port > 65535) {
    return Fail(kExitBadInput, "--listen '" + listen + "' is not HOST:PORT (PORT 0 picks a free one)");
  }
  // A new database is created only in a folder that exists: a mistyped
  // --db would otherwise serve an empty cache made on the spot.
  const std::filesystem::path folder = std::filesystem::path(db).parent_path();
  std::error_code ec;
  if (!folder.empty() && !std::filesystem::is_directory(folder, ec)) {
    return Fail(kExitBadInput, "--db " + db + ": folder " + folder.string() + " does not exist");
  }
  std::string token;
  if (!token_file.empty()) {
    std::ifstream in(token_file);
    if (!in || !std::getline(in, token) || token.empty()) {
      return Fail(kExitBadInput, "cannot read a token from --token-file '" + token_file + "'");
    }
  }
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);  // before Start: server threads inherit the mask
  dice::cache::CacheServer server;
  dice::Status st = server.Start(db, listen.substr(0, colon), port, token);
  if (!st.ok()) return Fail(kExitBadInput, st.message());
  std::printf("dice: serving %s on %s (%s)\n", db.c_str(), server.url().c_str(),
              token.empty() ? "read-only: no --token-file" : "writes need the bearer token");
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop_signals, &sig);
  server.Stop();
  std::printf("dice: stopped (signal %d)\n", sig);
  return kExitOk;
}

struct ServeArgs {
  std::string db, listen = "127.0.0.1:8470", token_file;
};

}  // namespace

void RegisterCacheServe(CLI::App& cache, CommandTable& table) {
  auto a = std::make_shared<ServeArgs>();
  auto* serve = cache.add_subcommand("serve", "share a cache over HTTP (GET/PUT /v1/kernels/{key}, /v1/health, /metrics)");
  serve->add_option("--db", a->db, "SQLite cache file to serve")->required();
  serve->add_option("--listen", a->listen, "HOST:PORT (default 127.0.0.1:8470; port 0 = any free port)");
  serve->add_option("--token-file", a->token_file, "file whose first line is the bearer token for writes");
  table.Add(serve, [a] { return CmdServe(a->db, a->listen, a->token_file); });
}

}  // namespace dice::cli
