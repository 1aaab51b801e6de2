// dice/runtime/winner_versions.h — is a stored winner's binary built against
// the libraries this process has? (issue 18 item 5: a library-backed or
// extension-form candidate is keyed by the library versions it depends on,
// and re-tuned when they differ, never served blind.)
//
// An extension-form winner's `cubin` is a shared object nvcc built against
// LibTorch (it links libtorch/libc10) and, for the gemm/conv families, the
// CUTLASS headers; the Tuner records both versions in the winner's
// versions_json ({"torch": "2.11.0", "cutlass": "4.2.0", "form":
// "extension", ...}; "cublas": "13.1.0" for a source that links cuBLASLt). A library-form winner (no generator emits one yet) is
// held to the same rule. Device-form winners (NVRTC cubins, no library
// inside) are never refused here.
// Pure functions of their arguments and the files they read; thread-safe.
#pragma once

#include <string>

#include "dice/cache/store.h"
#include "dice/core/candidate.h"

namespace dice::runtime {

/// The CUTLASS version of the headers nvcc builds against
/// (CutlassIncludeDir()/cutlass/version.h: "4.2.0"), or "" when there are no
/// headers or version.h lacks CUTLASS_MAJOR/MINOR/PATCH. Read once per process.
std::string CutlassVersion();

/// The cuBLAS/cuBLASLt version of the CUDA toolkit nvcc belongs to
/// (ToolkitIncludeDir(nvcc)/cublas_api.h: CUBLAS_VER_MAJOR/MINOR/PATCH,
/// "13.1.0"; nvcc is $DICE_NVCC or the configured one), or "" without that
/// header. Read once per process. The gemm_lt family's winners link cuBLASLt
/// (extension_compiler.h ExtensionLinkLibraries) and record it as "cublas".
std::string CublasVersion();

/// The cuBLAS version `candidate`'s binary depends on: CublasVersion() when
/// its source links cuBLAS or cuBLASLt ("// dice-nvcc-link: ...",
/// ExtensionLinkLibraries), "" otherwise (what the Tuner records as the
/// winner's "cublas"). Pure apart from CublasVersion's one read.
std::string CublasVersionFor(const Candidate& candidate);

/// Why `winner` must not be served by a process running PyTorch
/// `torch_version` ("2.11.0", TORCH_VERSION) with CUTLASS `cutlass_version`
/// ("4.2.0") and cuBLAS `cublas_version` ("13.1.0"), or "" when it may: an
/// extension- or library-form winner whose versions_json names another
/// torch, cutlass or cublas version ("winner template:gemm/... was built
/// against torch 2.10.0; this process runs 2.11.0"). A version that either side does not know ("" or absent: rows
/// written before versions were recorded, a machine without CUTLASS
/// headers) is not compared. Unparsable versions_json is not this
/// function's concern (WinnerForm reports it): "".
std::string StaleBuildReason(const cache::WinnerRecord& winner, const std::string& torch_version,
                             const std::string& cutlass_version, const std::string& cublas_version = "");

}  // namespace dice::runtime
