// dice/reference/device_compare.h — the output comparator, run with ATen.
//
// The same rule as CompareBuffers (dice/runtime/comparator.h, the CPU-tested
// specification of DESIGN.md "Verification"): every element must satisfy
// |got - ref| <= atol + rtol * |ref|; NaN must appear exactly where the
// reference has NaN; ±Inf exactly where the reference has the same Inf.
// Computed with ATen on whatever device the tensors live on, so multi-GB
// outputs are checked on the GPU in milliseconds instead of being copied to
// the host. Only the first bad element (if any) is read back for the reason.
// Links LibTorch. Thread-compatible.
#pragma once

#include <ATen/ATen.h>

#include "dice/core/ir.h"
#include "dice/runtime/comparator.h"

namespace dice::reference {

/// Compares `got` against `ref` (same shape; float32/float16/bfloat16/float64,
/// any device, both on the same one). `slack` (optional, same shape, float)
/// widens each element's limit: atol + rtol*|ref| + slack — the worker passes
/// twice PyTorch's own error against a float64 evaluation for reduction
/// outputs, where summation order alone moves the result (a candidate must be
/// as close to PyTorch as PyTorch is to the exact value). Returns the same CompareResult fields
/// and reason format as CompareBuffers; a shape mismatch is reported as a
/// failure naming both shapes. Flat indices follow row-major order of the
/// logical shape.
runtime::CompareResult CompareTensors(const at::Tensor& got, const at::Tensor& ref, runtime::Tolerance tol,
                             const at::Tensor* slack = nullptr);

/// CompareTensors working through `chunk_elements` elements at a time
/// (CompareTensors uses 2^27): temporaries stay bounded (~10 bytes per
/// chunk element) however large the outputs; the verdict and every field of
/// the result are the same for any chunk size.
runtime::CompareResult CompareTensorsChunked(const at::Tensor& got, const at::Tensor& ref, runtime::Tolerance tol,
                                    const at::Tensor* slack, int64_t chunk_elements);

/// The slack for CompareTensors: 2 * |ref - ref64| as float32, zero where either is not finite.
at::Tensor ReferenceErrorSlack(const at::Tensor& ref, const at::Tensor& ref64);

/// The slack for outputs of a contraction (GEMM, issue 18 item 4): twice
/// PyTorch's worst error against float64 anywhere in the output,
/// 2 * max |ref - ref64| (finite elements), at every element, as float32 of
/// ref's shape. A GEMM's rounding error scales with sum_k |x_ik w_kj|, not
/// with the (possibly cancelled) output element, so an element-wise slack
/// rejects any other summation order by chance (seen on the H200: 3xTF32
/// at K = 1024, 38 of 524,288 elements); the norm-wise one asks a candidate
/// to be as close to the exact product as PyTorch is, in the max norm.
at::Tensor NormwiseErrorSlack(const at::Tensor& ref, const at::Tensor& ref64);

/// Which float64 second opinion the verifier gives one output of a group
/// (DESIGN.md "Verification"; docs/DECISIONS.md "Reduction outputs get
/// slack", "Norm-wise slack for contractions", "Reduced-precision chains get
/// slack"): none (the per-dtype limit alone), element-wise
/// (ReferenceErrorSlack) or norm-wise (NormwiseErrorSlack).
enum class SecondOpinion { kNone, kElementwise, kNormwise };

/// The rule, in this order: a group with a contraction (GEMM, conv): norm-wise
/// for every output; an output at least 8x smaller than the largest input (a
/// reduction's summation order moves it): element-wise; a float16/bfloat16
/// output of a group of two or more ops (constants not counted): element-wise,
/// since PyTorch rounds every op's value to the dtype while a fused kernel
/// keeps float32 between ops, as Inductor does, and the two differ by a few
/// ulp where terms cancel; otherwise none. `out_dtype` and `out_numel` describe
/// the output, `max_input_numel` the group's largest input (elements). Pure;
/// no errors.
SecondOpinion SecondOpinionFor(const ir::Graph& g, ir::DType out_dtype, int64_t out_numel, int64_t max_input_numel);

/// Sums over every byte a tensor's storage holds (not only the elements its
/// view spans: a strided input's gaps and alignment offset too), taken as
/// 32-bit words (bytes when the size is not a multiple of 4) split into
/// 16-bit halves a and b: sum(a), sum(b) and sum(a*a + b*b), each modulo
/// 2^64. A write that changes the storage changes the fingerprint unless it
/// only permutes words. The worker fingerprints each verification trial's
/// inputs and reference outputs, which its candidates share, to catch a
/// candidate writing into them (DESIGN.md "Verification").
struct StorageFingerprint {
  uint64_t a = 0, b = 0, sq = 0;
  bool operator==(const StorageFingerprint& o) const { return a == o.a && b == o.b && sq == o.sq; }
  bool operator!=(const StorageFingerprint& o) const { return !(*this == o); }
};

/// StorageFingerprint of `t` (any dtype, any device; computed there, 2^22
/// words at a time: about 160 MiB of int64 temporaries at most; one host
/// read-back per chunk). Throws c10::Error when the device fails (a broken
/// CUDA context).
StorageFingerprint FingerprintStorage(const at::Tensor& t);

}  // namespace dice::reference
