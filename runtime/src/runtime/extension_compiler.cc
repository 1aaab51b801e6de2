// extension_compiler.cc — nvcc builds of extension-form candidates
// (extension_compiler.h). nvcc runs through RunProcess (process.h): its own
// process group, output in a log file, and a run past the deadline has its
// whole group (cicc, ptxas, the host compiler) killed. CompileExtensionCached
// keys a build by BuildKey below and keeps it in build_cache.h's store.
#include "dice/runtime/extension_compiler.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string_view>
#include <utility>

#include <spdlog/spdlog.h>

#include "build_cache.h"
#include "dice/core/ir.h"
#include "dice/runtime/process.h"
#include "text_files.h"

namespace dice::runtime {
namespace {

using text_files::IsFile;
using text_files::ReadText;
using text_files::WriteText;

#ifndef DICE_NVCC_PATH
#define DICE_NVCC_PATH "/usr/local/cuda/bin/nvcc"
#endif
#ifndef DICE_TORCH_INCLUDE_DIRS
#define DICE_TORCH_INCLUDE_DIRS ""
#endif
#ifndef DICE_TORCH_LIB_DIR
#define DICE_TORCH_LIB_DIR ""
#endif
#ifndef DICE_TORCH_CXX_FLAGS
#define DICE_TORCH_CXX_FLAGS ""
#endif
#ifndef DICE_CUTLASS_INCLUDE_DIR
#define DICE_CUTLASS_INCLUDE_DIR ""
#endif

std::vector<std::string> Split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : text) {
    if (c == sep) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' ? std::string(v) : fallback;
}

bool IsDir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool IsValidArch(const std::string& arch) {
  if (arch.size() <= 3 || arch.compare(0, 3, "sm_") != 0) return false;
  size_t i = 3;
  while (i < arch.size() && arch[i] >= '0' && arch[i] <= '9') ++i;
  if (i == 3) return false;
  return i == arch.size() || (i + 1 == arch.size() && (arch[i] == 'a' || arch[i] == 'f'));
}

// The first `max_lines` lines of `text` that mention an error, else its head.
std::string ErrorLines(const std::string& text, int max_lines = 20) {
  std::istringstream in(text);
  std::string line, errors, head;
  int n_err = 0, n_head = 0;
  while (std::getline(in, line)) {
    if (n_head < max_lines) {
      head += line + "\n";
      ++n_head;
    }
    if (n_err < max_lines && line.find("error") != std::string::npos) {
      errors += line + "\n";
      ++n_err;
    }
  }
  return errors.empty() ? head : errors;
}

// True when `source` mentions dice_forward outside comments (a cheap check
// that turns the most common failure of a model answer into a clear reason
// before a 30 s nvcc run).
bool DefinesDiceForward(const std::string& source) {
  size_t pos = 0;
  while ((pos = source.find("dice_forward", pos)) != std::string::npos) {
    size_t line_start = source.rfind('\n', pos);
    line_start = line_start == std::string::npos ? 0 : line_start + 1;
    const std::string before = source.substr(line_start, pos - line_start);
    if (before.find("//") == std::string::npos && source.find('(', pos) != std::string::npos) return true;
    pos += 12;
  }
  return false;
}

// The tensor API KernelBench/DICE sources use (torch::Tensor, factories such
// as torch::empty_like, TORCH_CHECK, ATen ops, at::cuda streams) without
// the C++ frontend's nn/optim/data/jit headers, which would make every build
// several times slower; $DICE_EXTENSION_FULL_TORCH=1 includes <torch/all.h>.
constexpr const char* kShimHeader =
    "// Written by the DICE runtime: LibTorch-only stand-in for torch/extension.h\n"
    "// (the real header needs Python.h and pybind11).\n"
    "#pragma once\n"
    "#include <torch/types.h>\n"
    "#include <torch/cuda.h>\n"
    "#include <torch/utils.h>\n"
    "#include <ATen/cuda/CUDAContext.h>\n";
constexpr const char* kFullShimHeader =
    "// Written by the DICE runtime: LibTorch-only stand-in for torch/extension.h\n"
    "#pragma once\n"
    "#include <torch/all.h>\n"
    "#include <ATen/cuda/CUDAContext.h>\n";

const char* ShimText() {
  return EnvOr("DICE_EXTENSION_FULL_TORCH", "0") == "1" ? kFullShimHeader : kShimHeader;
}

// What nvcc runs with: the binary, LibTorch's include and library dirs,
// CUTLASS's include dir ("" when absent).
struct Toolchain {
  std::string nvcc;
  std::vector<std::string> includes;
  std::string lib_dir, cutlass;
};

// The checks CompileExtension makes before nvcc runs, and the toolchain
// (errors as documented for CompileExtension).
Expected<Toolchain> Prepare(const Candidate& candidate, const std::string& arch, int num_inputs,
                            const ExtensionCompileOptions& options) {
  if (candidate.form != CandidateForm::kExtension) {
    return Status(StatusCode::kInvalidArgument, "CompileExtension: candidate '" + candidate.origin +
                                                    "' is device form (use CompileCandidate)");
  }
  if (!IsValidArch(arch)) return Status(StatusCode::kInvalidArgument, "malformed arch '" + arch + "' (want sm_XX)");
  if (num_inputs < 1) {
    return Status(StatusCode::kInvalidArgument, "CompileExtension: num_inputs is " + std::to_string(num_inputs));
  }
  auto libs = ExtensionLinkLibraries(candidate);
  if (!libs.ok()) return libs.status();
  if (!DefinesDiceForward(candidate.source)) {
    return Status(StatusCode::kCompileError,
                  "no dice_forward in the source: an extension-form candidate must define the host function "
                  "dice_forward(in0, ...) that the skeleton declares");
  }
  Toolchain tc;
  tc.nvcc = !options.nvcc.empty() ? options.nvcc : EnvOr("DICE_NVCC", DICE_NVCC_PATH);
  if (::access(tc.nvcc.c_str(), X_OK) != 0) {
    return Status(StatusCode::kNotFound, "nvcc '" + tc.nvcc + "' not found or not executable (set DICE_NVCC)");
  }
  tc.includes = options.include_dirs;
  if (tc.includes.empty()) {
    const char* env = std::getenv("DICE_TORCH_INCLUDE_DIRS");
    tc.includes = env != nullptr && env[0] != '\0' ? Split(env, ':') : Split(DICE_TORCH_INCLUDE_DIRS, ':');
  }
  bool have_torch = false;
  for (const auto& d : tc.includes) have_torch = have_torch || IsFile(d + "/torch/types.h");
  if (!have_torch) {
    std::string list;
    for (const auto& d : tc.includes) list += (list.empty() ? "" : ":") + d;
    return Status(StatusCode::kNotFound, "LibTorch headers (torch/types.h) not found in '" + list +
                                             "' (set DICE_TORCH_INCLUDE_DIRS, ':'-separated)");
  }
  tc.lib_dir = !options.torch_lib_dir.empty() ? options.torch_lib_dir : EnvOr("DICE_TORCH_LIB_DIR", DICE_TORCH_LIB_DIR);
  tc.cutlass = !options.cutlass_include_dir.empty() ? options.cutlass_include_dir : CutlassIncludeDir();
  return tc;
}

// nvcc's command line for a build in `dir` (dir/dice_ext.cu -> dir/libdice_ext.so).
std::vector<std::string> NvccArgv(const Toolchain& tc, const Candidate& candidate, const std::string& arch,
                                  const std::string& dir) {
  // -O1 applies to host code only (dice_forward); device code is optimised by ptxas regardless.
  // SASS for this one arch and no PTX: the library is built for the GPU it
  // runs on (the arch is in the build cache key), so nothing is JIT-compiled
  // later. "-arch=sm_90a" would also run cicc for compute_90 PTX, 13% of a
  // CUTLASS build's wall time (100 vs 115 s for a conv candidate on 2 cores).
  const std::string sm = NvccArch(candidate, arch);
  std::vector<std::string> argv = {tc.nvcc, "-std=c++17", "-O1", "-shared", "-Xcompiler", "-fPIC",
                                   "-gencode", "arch=compute_" + sm.substr(3) + ",code=" + sm,
                                   "--expt-relaxed-constexpr",
                                   // The defines PyTorch's cpp_extension passes for CUDA sources, so
                                   // KernelBench/DICE code compiles here as under load_inline.
                                   "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                                   "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
                                   "-DTORCH_EXTENSION_NAME=dice_ext", "-I" + dir + "/shim"};
  for (const auto& flag : Split(DICE_TORCH_CXX_FLAGS, ' ')) {
    if (flag.rfind("-D", 0) == 0) argv.push_back(flag);
  }
  for (const auto& d : tc.includes) argv.push_back("-I" + d);
  if (!tc.cutlass.empty()) argv.push_back("-I" + tc.cutlass);
  for (const auto& f : candidate.extra_flags) argv.push_back(f);
  argv.insert(argv.end(), {dir + "/dice_ext.cu", "-o", dir + "/libdice_ext.so", "--cudart", "shared"});
  // Toolkit libraries the source asks for (validated in Prepare): nvcc's own
  // library directory is on its link path; at load time the process already
  // holds them (LibTorch links cuBLASLt), found by soname.
  auto libs = ExtensionLinkLibraries(candidate);
  if (libs.ok()) {
    for (const auto& lib : *libs) argv.push_back("-l" + lib);
  }
  if (!tc.lib_dir.empty() && IsDir(tc.lib_dir)) {
    argv.insert(argv.end(), {"-L" + tc.lib_dir, "-Xlinker", "--as-needed", "-lc10", "-lc10_cuda", "-ltorch_cpu",
                             "-ltorch_cuda", "-Xlinker", "-rpath=" + tc.lib_dir});
  }
  return argv;
}

// What identifies nvcc in the build cache key: its `--version` text, so two
// installs of one release (other paths, other mtimes) share keys; when that
// run fails, the binary's size and mtime (a key only this install matches).
// Asked once per nvcc path and process.
std::string NvccIdentity(const std::string& nvcc) {
  static std::mutex mu;
  static std::map<std::string, std::string> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(nvcc);
  if (it != known.end()) return it->second;
  std::string identity;
  char tmpl[] = "/tmp/dice-nvcc-version-XXXXXX";
  const int fd = ::mkstemp(tmpl);
  if (fd >= 0) {
    ::close(fd);
    ProcessOptions po;
    po.timeout_s = 30.0;
    po.output_path = tmpl;
    auto run = RunProcess({nvcc, "--version"}, po);
    const std::string text = ReadText(tmpl);
    ::unlink(tmpl);
    if (run.ok() && run->ok() && !text.empty()) identity = "version " + text;
  }
  if (identity.empty()) {
    struct stat st;
    if (::stat(nvcc.c_str(), &st) == 0) {
      identity = "file " + std::to_string(st.st_size) + " " + std::to_string(st.st_mtime);
    }
  }
  known.emplace(nvcc, identity);
  return identity;
}

// `arg` with every toolchain path replaced by its placeholder (longest path
// first, so a path nested in another is not cut in two).
std::string WithPlaceholders(std::string arg, const std::vector<std::pair<std::string, std::string>>& paths) {
  for (const auto& [path, placeholder] : paths) {
    if (path.empty()) continue;
    for (size_t pos = arg.find(path); pos != std::string::npos; pos = arg.find(path, pos + placeholder.size())) {
      arg.replace(pos, path.size(), placeholder);
    }
  }
  return arg;
}

// The build cache key (extension_compiler.h's file comment): sha256 over
// length-prefixed fields, so no two field lists hash the same text. Paths
// are not keyed, contents are: nvcc's argument list with the toolchain's
// paths as placeholders, nvcc's identity, CUTLASS's and LibTorch's version
// headers. So a build cache filled on one machine serves another with the
// same nvcc release, CUTLASS and LibTorch wherever they are installed (the
// library finds LibTorch's and CUDA's runtime libraries already loaded, by
// their sonames).
std::string BuildKey(const Toolchain& tc, const Candidate& candidate, const std::string& arch, int num_inputs) {
  std::string text = "dice-extension-build v2\n";
  auto add = [&](const char* name, const std::string& value) {
    text += std::string(name) + " " + std::to_string(value.size()) + "\n" + value + "\n";
  };
  add("tu", ExtensionTranslationUnit(candidate, num_inputs));
  add("shim", ShimText());
  std::vector<std::pair<std::string, std::string>> paths = {{tc.nvcc, "<nvcc>"}, {tc.cutlass, "<cutlass>"},
                                                            {tc.lib_dir, "<torch-lib>"}};
  for (size_t i = 0; i < tc.includes.size(); ++i) paths.emplace_back(tc.includes[i], "<include-" + std::to_string(i) + ">");
  std::stable_sort(paths.begin(), paths.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  for (const auto& arg : NvccArgv(tc, candidate, arch, "<build-dir>")) add("arg", WithPlaceholders(arg, paths));
  add("nvcc", NvccIdentity(tc.nvcc));
  if (!tc.cutlass.empty()) add("cutlass", ReadText(tc.cutlass + "/cutlass/version.h"));
  // A linked toolkit library's version (cuBLASLt's is in cublas_api.h).
  auto libs = ExtensionLinkLibraries(candidate);
  if (libs.ok() && !libs->empty()) add("cublas", ReadText(ToolkitIncludeDir(tc.nvcc) + "/cublas_api.h"));
  // LibTorch's version: torch/version.h, which since 2.9 only includes
  // torch/headeronly/version.h (the numbers), and the sizes of the libraries
  // the build links, which tell two builds of one version apart (cu128 vs
  // cu130, nightlies).
  for (const auto& d : tc.includes) {
    for (const char* header : {"/torch/version.h", "/torch/headeronly/version.h"}) {
      if (IsFile(d + header)) add("torch", ReadText(d + header));
    }
  }
  for (const char* lib : {"libc10.so", "libc10_cuda.so", "libtorch_cpu.so", "libtorch_cuda.so"}) {
    struct stat st;
    if (!tc.lib_dir.empty() && ::stat((tc.lib_dir + "/" + lib).c_str(), &st) == 0) {
      add("torch-lib", std::string(lib) + " " + std::to_string(st.st_size));
    }
  }
  return ir::Sha256Hex(text);
}

// One warning per process for an unusable build cache.
void WarnCacheOnce(const Status& st) {
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) {
    spdlog::warn("dice: extension build cache unusable, building uncached ({}); set DICE_BUILD_CACHE to a writable "
                 "directory or to off",
                 st.ToString());
  }
}

}  // namespace

std::string CutlassIncludeDir() {
  const std::string dir = EnvOr("DICE_CUTLASS_INCLUDE", DICE_CUTLASS_INCLUDE_DIR);
  return !dir.empty() && IsFile(dir + "/cutlass/gemm/device/gemm.h") ? dir : std::string();
}

ExtensionBuild::~ExtensionBuild() {
  for (const auto& f : files_) ::unlink(f.c_str());
  for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it) ::rmdir(it->c_str());
}

std::string NvccArch(const Candidate& candidate, const std::string& arch) {
  static constexpr std::string_view kMarker = "// dice-nvcc-arch-feature: a";
  const std::string_view head = std::string_view(candidate.source).substr(0, 4096);
  const size_t at = head.find(kMarker);
  const bool line_start = at != std::string_view::npos && (at == 0 || head[at - 1] == '\n');
  if (!line_start || arch.empty() || !(arch.back() >= '0' && arch.back() <= '9')) return arch;
  return arch + "a";
}

Expected<std::vector<std::string>> ExtensionLinkLibraries(const Candidate& candidate) {
  static constexpr std::string_view kMarker = "// dice-nvcc-link: ";
  const std::string_view head = std::string_view(candidate.source).substr(0, 4096);
  std::vector<std::string> libs;
  for (size_t at = head.find(kMarker); at != std::string_view::npos; at = head.find(kMarker, at + 1)) {
    if (at != 0 && head[at - 1] != '\n') continue;
    const size_t begin = at + kMarker.size();
    const size_t end = std::min(head.find('\n', begin), head.size());
    const std::string name(head.substr(begin, end - begin));
    if (name != "cublasLt" && name != "cublas") {
      return Status(StatusCode::kInvalidArgument, "candidate '" + candidate.origin + "' asks to link '" + name +
                                                      "'; the line '// dice-nvcc-link: <name>' allows cublasLt and cublas");
    }
    if (std::find(libs.begin(), libs.end(), name) == libs.end()) libs.push_back(name);
  }
  return libs;
}

std::string ToolkitIncludeDir(const std::string& nvcc) {
  const size_t slash = nvcc.rfind('/');
  const std::string bin = slash == std::string::npos ? std::string(".") : nvcc.substr(0, slash);
  return bin + "/../include";
}

std::string ExtensionTranslationUnit(const Candidate& candidate, int num_inputs) {
  std::string tu = candidate.source;
  if (!tu.empty() && tu.back() != '\n') tu += '\n';
  std::string args;
  for (int i = 0; i < num_inputs; ++i) args += (i ? ", " : "") + std::string("in[") + std::to_string(i) + "]";
  tu +=
      "\n// ---- entry point added by the DICE runtime (extension_compiler.h) ----\n"
      "#include <cstdio>\n#include <tuple>\n#include <utility>\n#include <vector>\n"
      "namespace dice_ext_detail {\n"
      "inline void Collect(const at::Tensor& t, std::vector<at::Tensor>* out) { out->push_back(t); }\n"
      "inline void Collect(const std::vector<at::Tensor>& v, std::vector<at::Tensor>* out) {\n"
      "  for (const auto& t : v) out->push_back(t);\n}\n"
      "template <typename... T>\n"
      "void Collect(const std::tuple<T...>& t, std::vector<at::Tensor>* out) {\n"
      "  std::apply([out](const auto&... x) { (Collect(x, out), ...); }, t);\n}\n"
      "}  // namespace dice_ext_detail\n"
      "extern \"C\" __attribute__((visibility(\"default\"))) int dice_ext_forward(\n"
      "    const void* inputs, int num_inputs, void* outputs, char* error, unsigned long error_size) {\n"
      "  try {\n"
      "    if (num_inputs != " + std::to_string(num_inputs) + ") {\n"
      "      std::snprintf(error, error_size, \"dice_forward was built for " + std::to_string(num_inputs) +
      " inputs, called with %d\", num_inputs);\n"
      "      return 2;\n    }\n"
      "    const at::Tensor* in = static_cast<const at::Tensor*>(inputs);\n"
      "    dice_ext_detail::Collect(dice_forward(" + args + "), static_cast<std::vector<at::Tensor>*>(outputs));\n"
      "    return 0;\n"
      "  } catch (const std::exception& e) {\n"
      "    std::snprintf(error, error_size, \"%s\", e.what());\n    return 1;\n"
      "  } catch (...) {\n"
      "    std::snprintf(error, error_size, \"dice_forward threw a non-standard exception\");\n    return 1;\n  }\n"
      "}\n";
  return tu;
}

// A fresh private build directory under options.temp_root ($TMPDIR or /tmp).
static Expected<std::string> MakeBuildDir(const ExtensionCompileOptions& options) {
  std::string root = options.temp_root.empty() ? EnvOr("TMPDIR", "/tmp") : options.temp_root;
  std::string tmpl = root + "/dice-ext-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return Status(StatusCode::kIoError, "mkdtemp '" + tmpl + "': " + strerror(errno));
  }
  return tmpl;
}

Expected<std::unique_ptr<ExtensionBuild>> CompileExtension(const Candidate& candidate, const std::string& arch,
                                                           int num_inputs, const ExtensionCompileOptions& options) {
  auto tc = Prepare(candidate, arch, num_inputs, options);
  if (!tc.ok()) return tc.status();
  auto made = MakeBuildDir(options);
  if (!made.ok()) return made.status();
  const std::string tmpl = *made;
  std::unique_ptr<ExtensionBuild> build(new ExtensionBuild());
  build->dir_ = tmpl;
  build->dirs_ = {tmpl, tmpl + "/shim", tmpl + "/shim/torch"};
  for (size_t i = 1; i < build->dirs_.size(); ++i) {
    if (::mkdir(build->dirs_[i].c_str(), 0700) != 0) {
      return Status(StatusCode::kIoError, "mkdir '" + build->dirs_[i] + "': " + strerror(errno));
    }
  }
  const std::string src = tmpl + "/dice_ext.cu", shim = tmpl + "/shim/torch/extension.h",
                    log = tmpl + "/nvcc.log";
  build->library_ = tmpl + "/libdice_ext.so";
  build->files_ = {src, shim, log, build->library_};
  DICE_RETURN_IF_ERROR(WriteText(shim, ShimText()));
  DICE_RETURN_IF_ERROR(WriteText(src, ExtensionTranslationUnit(candidate, num_inputs)));
  const std::vector<std::string> argv = NvccArgv(*tc, candidate, arch, tmpl);

  ProcessOptions po;
  po.timeout_s = options.timeout_s;
  po.output_path = log;
  auto run = RunProcess(argv, po);
  if (!run.ok()) return run.status().WithContext("running nvcc");
  build->compile_ms_ = run->wall_ms;
  build->log_ = ReadText(log);
  if (run->timed_out) return Status(StatusCode::kTimeout, "nvcc " + run->Describe(options.timeout_s));
  if (!run->ok() || !IsFile(build->library_)) {
    return Status(StatusCode::kCompileError, "nvcc " + run->Describe(options.timeout_s) + ":\n" + ErrorLines(build->log_));
  }
  return build;
}

bool ExtensionBuildCached(const Candidate& candidate, const std::string& arch, int num_inputs,
                          const ExtensionCompileOptions& options) {
  const std::string dir = build_cache::ResolveDir(options.build_cache_dir);
  if (dir.empty()) return false;
  auto tc = Prepare(candidate, arch, num_inputs, options);
  return tc.ok() && build_cache::Load(dir, BuildKey(*tc, candidate, arch, num_inputs)).ok();
}

Expected<std::unique_ptr<ExtensionBuild>> CompileExtensionCached(const Candidate& candidate, const std::string& arch,
                                                                 int num_inputs, const ExtensionCompileOptions& options) {
  const std::string dir = build_cache::ResolveDir(options.build_cache_dir);
  if (dir.empty()) return CompileExtension(candidate, arch, num_inputs, options);
  const auto start = std::chrono::steady_clock::now();
  auto tc = Prepare(candidate, arch, num_inputs, options);
  if (!tc.ok()) return tc.status();
  const std::string key = BuildKey(*tc, candidate, arch, num_inputs);
  auto cached = build_cache::Load(dir, key);
  if (cached.ok()) {
    auto made = MakeBuildDir(options);
    if (!made.ok()) return made.status();
    const std::string tmpl = *made;
    std::unique_ptr<ExtensionBuild> build(new ExtensionBuild());
    build->dir_ = tmpl;
    build->dirs_ = {tmpl};
    build->library_ = tmpl + "/libdice_ext.so";
    build->files_ = {build->library_};
    DICE_RETURN_IF_ERROR(WriteText(build->library_, *cached));
    build->from_cache_ = true;
    build->compile_ms_ =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    return build;
  }
  if (cached.status().message().find("corrupt") != std::string::npos) {
    spdlog::warn("dice: {}; rebuilding", cached.status().message());
  }
  auto build = CompileExtension(candidate, arch, num_inputs, options);
  if (build.ok()) {
    const Status st = build_cache::Store(dir, key, (*build)->library_path());
    if (!st.ok()) WarnCacheOnce(st);
  }
  return build;
}

}  // namespace dice::runtime
