// dice/runtime/extension_compiler.h — nvcc compilation of extension-form
// candidates (DESIGN.md "Candidate", form 2; issue 3 "Extension form").
//
// An extension-form candidate is CUDA C++ written against LibTorch's C++ API
// (KernelBench / DICE output): kernels plus a host function
//   torch::Tensor dice_forward(torch::Tensor in0, ..., torch::Tensor inN)
// (or returning std::vector<torch::Tensor> / std::tuple<torch::Tensor...> for
// several outputs), one argument per task input, in task order.
// CompileExtension writes the source into a fresh temporary directory, adds
//   - a shim `torch/extension.h` found before LibTorch's own include
//     directories (the real header pulls in Python.h and pybind11, absent
//     from LibTorch-only installs): <torch/types.h>, <torch/cuda.h>,
//     <torch/utils.h> and <ATen/cuda/CUDAContext.h> — the tensor API that
//     KernelBench/DICE sources use; $DICE_EXTENSION_FULL_TORCH=1 makes it
//     <torch/all.h> (the whole C++ frontend, a ~4x slower build), and
//   - an `extern "C"` entry point `dice_ext_forward` (ExtensionEntryFn below)
//     that calls dice_forward with the task's input tensors and flattens what
//     it returns into a std::vector<at::Tensor>,
// and runs nvcc (-shared, -fPIC, -arch=<task arch>, -std=c++17 and
// --expt-relaxed-constexpr (which CUTLASS needs), the flags PyTorch's
// cpp_extension uses for CUDA sources, LibTorch's include directories and
// CUTLASS's (CutlassIncludeDir below, when present), linked
// --as-needed against c10/c10_cuda/torch_cpu/torch_cuda and the shared CUDA
// runtime, plus the toolkit libraries the source names with
// "// dice-nvcc-link: <lib>" (ExtensionLinkLibraries)) into `libdice_ext.so` there. No GPU is needed to compile.
// Torch-free: only paths to LibTorch's headers and libraries are used (baked
// in at configure time, overridable by environment variables, see below).
// Thread-safe: every call has its own directory and nvcc process.
//
// CompileExtensionCached adds a content-addressed build cache (issue 18 item
// 1: a CUTLASS instantiation costs 30-90 s of nvcc, so each configuration is
// built once and serves every shape): the key is the sha256 of everything
// that changes the binary — the translation unit (candidate source, entry
// point for num_inputs), the shim header, nvcc's full argument list (arch,
// the flags added here, extra_flags; the toolchain's include and library
// paths as placeholders), nvcc's `--version` text (its size and mtime when
// that run fails), CUTLASS's cutlass/version.h, LibTorch's torch/version.h
// and torch/headeronly/version.h and the sizes of the LibTorch libraries it
// links — and a hit copies <cache>/<key>.so into the build's own
// directory after checking it against its size + sha256 sidecar. Paths are
// not keyed, so a build cache filled on one machine (or in a CPU-only CI
// job) serves another with the same nvcc release, CUTLASS and LibTorch
// installed elsewhere: copy <cache> there, or point $DICE_BUILD_CACHE at it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dice/core/candidate.h"
#include "dice/core/status.h"

namespace dice::runtime {

/// Name of the C entry point every compiled extension exports.
inline constexpr const char* kExtensionEntryName = "dice_ext_forward";

/// Signature of the entry point. `inputs` points at `num_inputs` at::Tensor
/// objects (the task's inputs, in order); `outputs` at a
/// std::vector<at::Tensor> that receives dice_forward's results. Returns 0
/// on success; otherwise writes a NUL-terminated reason (a C++ exception's
/// what(), or an argument-count mismatch) of at most `error_size` bytes into
/// `error` and returns non-zero. The caller must use the same LibTorch build
/// the extension was compiled against.
using ExtensionEntryFn = int (*)(const void* inputs, int num_inputs, void* outputs, char* error,
                                 unsigned long error_size);

/// How to run nvcc. Empty fields take the build's defaults, which the
/// environment overrides: $DICE_NVCC (nvcc binary), $DICE_TORCH_INCLUDE_DIRS
/// (':'-separated), $DICE_TORCH_LIB_DIR, $DICE_CUTLASS_INCLUDE.
struct ExtensionCompileOptions {
  std::string nvcc;                       ///< "" = $DICE_NVCC or the toolkit's nvcc
  std::vector<std::string> include_dirs;  ///< LibTorch include dirs ("" = configured ones)
  std::string torch_lib_dir;              ///< dir of libc10.so / libtorch_cuda.so ("" = configured)
  std::string cutlass_include_dir;        ///< CUTLASS headers' dir ("" = CutlassIncludeDir())
  double timeout_s = 300;                 ///< nvcc wall-clock limit, seconds; the process group is killed after it
  std::string temp_root;                  ///< parent of the build dir ("" = $TMPDIR or /tmp)
  /// CompileExtensionCached's directory: "" = $DICE_BUILD_CACHE, else
  /// $DICE_CACHE_DIR/builds, $HOME/.cache/dice/builds or
  /// /tmp/dice-cache-<uid>/builds (cache::DefaultCacheDir() + "/builds");
  /// "off" = no caching. $DICE_BUILD_CACHE=off turns caching off whatever
  /// this says. CompileExtension ignores it.
  std::string build_cache_dir;
};

/// A built extension: a temporary directory holding the source, the shim,
/// the nvcc log and the shared object. The directory and its files are
/// removed when the object is destroyed (dlclose the library first).
class ExtensionBuild {
 public:
  ~ExtensionBuild();
  ExtensionBuild(const ExtensionBuild&) = delete;
  ExtensionBuild& operator=(const ExtensionBuild&) = delete;

  const std::string& dir() const { return dir_; }
  /// Absolute path of libdice_ext.so.
  const std::string& library_path() const { return library_; }
  /// nvcc's output (warnings), may be empty.
  const std::string& log() const { return log_; }
  /// Wall time of the nvcc run, milliseconds (on a cache hit: of reading,
  /// checking and copying the cached library, a few ms).
  double compile_ms() const { return compile_ms_; }
  /// True when CompileExtensionCached found the library in the build cache
  /// (nvcc did not run; log() is empty).
  bool from_cache() const { return from_cache_; }

 private:
  friend Expected<std::unique_ptr<ExtensionBuild>> CompileExtension(const Candidate&, const std::string&, int,
                                                                    const ExtensionCompileOptions&);
  friend Expected<std::unique_ptr<ExtensionBuild>> CompileExtensionCached(const Candidate&, const std::string&, int,
                                                                          const ExtensionCompileOptions&);
  ExtensionBuild() = default;
  bool from_cache_ = false;
  std::string dir_, library_, log_;
  std::vector<std::string> files_;  // removed in the destructor, then dirs_ (deepest first)
  std::vector<std::string> dirs_;
  double compile_ms_ = 0;
};

/// The directory holding CUTLASS's headers (cutlass/gemm/device/gemm.h;
/// CUTLASS 2.x device API and CuTe) that every nvcc run gets as -I:
/// $DICE_CUTLASS_INCLUDE when set, else the configure-time CMake cache
/// variable DICE_CUTLASS_INCLUDE_DIR (default: .deps/cutlass/include, which
/// scripts/setup.sh unpacks from the pinned nvidia-cutlass wheel). Returns ""
/// when that directory lacks cutlass/gemm/device/gemm.h (a candidate that
/// includes CUTLASS then fails with kCompileError naming the header).
std::string CutlassIncludeDir();

/// Compiles an extension-form `candidate` for `arch` ("sm_90") whose
/// dice_forward takes `num_inputs` tensors (>= 1).
/// Errors: kInvalidArgument for a device-form candidate, a malformed arch or
/// num_inputs < 1; kCompileError when the source does not define
/// dice_forward (checked before nvcc runs: "no dice_forward ...") or nvcc
/// fails (message: the first lines of nvcc's log, which names the source
/// line); kTimeout when nvcc exceeds options.timeout_s (it is killed);
/// kNotFound when nvcc or LibTorch's headers are missing; kIoError when the
/// temporary directory cannot be written.
Expected<std::unique_ptr<ExtensionBuild>> CompileExtension(const Candidate& candidate, const std::string& arch,
                                                           int num_inputs,
                                                           const ExtensionCompileOptions& options = {});

/// CompileExtension through the build cache (file comment; directory:
/// options.build_cache_dir). A hit returns a build whose library is a
/// verified copy of the cached one (from_cache() true, no nvcc run); a miss
/// runs CompileExtension and stores its library (written to a temporary name
/// and renamed: safe for concurrent workers). A cached library that fails
/// its size/sha256 check is removed and rebuilt. A cache directory that
/// cannot be created or written never fails the call: a warning (once per
/// process) and the uncached build. Errors: those of CompileExtension
/// (compile failures are not cached).
Expected<std::unique_ptr<ExtensionBuild>> CompileExtensionCached(const Candidate& candidate, const std::string& arch,
                                                                 int num_inputs,
                                                                 const ExtensionCompileOptions& options = {});

/// Whether CompileExtensionCached(candidate, arch, num_inputs, options) would
/// find its library in the build cache (a verified copy, no nvcc run). False
/// when caching is off, the toolchain is missing, the candidate is device
/// form, or the entry is absent or corrupt. Reads the cached library to check
/// it (milliseconds); compiles nothing. Thread-safe.
bool ExtensionBuildCached(const Candidate& candidate, const std::string& arch, int num_inputs,
                          const ExtensionCompileOptions& options = {});

/// The SASS arch nvcc builds `candidate` for (`-gencode arch=compute_X,code=sm_X`,
/// no PTX) on a task whose arch is `arch`
/// ("sm_90"): `arch` itself, or its arch-specific variant when the source asks
/// for one with the line "// dice-nvcc-arch-feature: a" within its first 4,096
/// bytes ("sm_90" -> "sm_90a": CUTLASS 3.x's sm90 kernels use wgmma and TMA,
/// which only sm_90a code has; built for plain sm_90 they compile to a trap).
/// An arch that already carries a suffix is returned unchanged, as is any
/// arch for a source without the line. Pure; no errors.
std::string NvccArch(const Candidate& candidate, const std::string& arch);

/// The CUDA toolkit libraries `candidate` links, from its lines
/// "// dice-nvcc-link: <name>" within the first 4,096 bytes of its source
/// (each at the start of a line; duplicates once): nvcc gets "-l<name>" and
/// the build cache key the toolkit's cublas_api.h (cuBLAS's version). The
/// gemm_lt family (cuBLASLt's fused epilogues) asks for "cublasLt".
/// Errors: kInvalidArgument naming the library when it is not "cublasLt" or
/// "cublas" (CompileExtension fails with it before nvcc runs). Pure.
Expected<std::vector<std::string>> ExtensionLinkLibraries(const Candidate& candidate);

/// The CUDA toolkit's include directory beside `nvcc` ("<dir of nvcc>/../include");
/// "./../include" for a bare name. Pure; no errors, no file access.
std::string ToolkitIncludeDir(const std::string& nvcc);

/// The CUDA source nvcc compiles for `candidate`: its source followed by the
/// entry point for `num_inputs` inputs (exposed for tests and debugging).
std::string ExtensionTranslationUnit(const Candidate& candidate, int num_inputs);

}  // namespace dice::runtime
