// Implementation of dice/reference/device_compare.h.
#include "dice/reference/device_compare.h"

#include <cmath>
#include <algorithm>
#include <cstdio>
#include <string>

namespace dice::reference {

SecondOpinion SecondOpinionFor(const ir::Graph& g, ir::DType out_dtype, int64_t out_numel, int64_t max_input_numel) {
  int ops = 0;
  for (const auto& op : g.ops) {
    if (ir::GetOpInfo(op.kind).category == ir::OpCategory::kContraction) return SecondOpinion::kNormwise;
    if (op.kind != ir::OpKind::kConstant) ++ops;
  }
  if (out_numel * 8 <= max_input_numel) return SecondOpinion::kElementwise;
  const bool reduced = out_dtype == ir::DType::kBFloat16 || out_dtype == ir::DType::kFloat16;
  return reduced && ops >= 2 ? SecondOpinion::kElementwise : SecondOpinion::kNone;
}

namespace {

std::string FormatValue(double v) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

}  // namespace

at::Tensor ReferenceErrorSlack(const at::Tensor& ref, const at::Tensor& ref64) {
  at::Tensor d = (ref.to(at::kDouble) - ref64.to(at::kDouble)).abs().mul(2);
  return d.nan_to_num(0, 0, 0).to(at::kFloat);
}

at::Tensor NormwiseErrorSlack(const at::Tensor& ref, const at::Tensor& ref64) {
  at::Tensor d = (ref.to(at::kDouble) - ref64.to(at::kDouble)).abs().nan_to_num(0, 0, 0);
  const double worst = d.numel() > 0 ? d.max().item<double>() : 0.0;
  return at::full(ref.sizes(), 2.0 * worst, ref.options().dtype(at::kFloat));
}

namespace {

// Elements compared per step: bounds the temporaries (~10 bytes/element) for
// multi-GB outputs.
constexpr int64_t kChunkElements = int64_t{1} << 27;

struct ChunkResult {
  int64_t num_bad = 0;
  int64_t first_bad = -1;  // within the chunk
  double max_abs = 0, max_rel = 0;
};

ChunkResult CompareChunk(const at::Tensor& g_in, const at::Tensor& w_in, const at::Tensor* slack, at::ScalarType ct,
                         runtime::Tolerance tol) {
  ChunkResult c;
  const at::Tensor g = g_in.to(ct), w = w_in.to(ct);
  const at::Tensor g_nan = g.isnan(), w_nan = w.isnan();
  const at::Tensor g_inf = g.isinf(), w_inf = w.isinf();
  const at::Tensor both_finite = (g_nan | w_nan | g_inf | w_inf).logical_not();
  const at::Tensor err = (g - w).abs().masked_fill(both_finite.logical_not(), 0);
  at::Tensor limit = w.abs().mul(tol.rtol).add(tol.atol);
  if (slack != nullptr) limit = limit.add(slack->to(ct));
  const at::Tensor tol_bad = err.gt(limit).logical_and(both_finite);
  const at::Tensor nan_bad = g_nan.ne(w_nan);
  const at::Tensor inf_bad = (g_inf | w_inf).logical_and((g_nan | w_nan).logical_not()).logical_and(g.ne(w));
  const at::Tensor bad = tol_bad | nan_bad | inf_bad;
  c.num_bad = bad.sum().item<int64_t>();
  c.max_abs = err.max().item<double>();
  const at::Tensor nonzero_ref = both_finite.logical_and(w.ne(0));
  c.max_rel = err.div(w.abs().masked_fill(nonzero_ref.logical_not(), 1))
                  .masked_fill(nonzero_ref.logical_not(), 0)
                  .max()
                  .item<double>();
  if (c.num_bad > 0) c.first_bad = bad.to(at::kByte).argmax().item<int64_t>();  // first maximum = first true
  return c;
}

}  // namespace

runtime::CompareResult CompareTensors(const at::Tensor& got, const at::Tensor& ref, runtime::Tolerance tol, const at::Tensor* slack) {
  return CompareTensorsChunked(got, ref, tol, slack, kChunkElements);
}

runtime::CompareResult CompareTensorsChunked(const at::Tensor& got_in, const at::Tensor& ref_in, runtime::Tolerance tol,
                                    const at::Tensor* slack, int64_t chunk_elements) {
  runtime::CompareResult r;
  chunk_elements = std::max<int64_t>(chunk_elements, 1);
  if (got_in.sizes() != ref_in.sizes()) {
    r.ok = false;
    r.reason = "shape " + c10::str(got_in.sizes()) + " differs from reference shape " + c10::str(ref_in.sizes());
    return r;
  }
  const int64_t n = ref_in.numel();
  if (n == 0) return r;
  // float32 holds every f16/bf16 value exactly; float64 stays float64.
  const bool wide = got_in.scalar_type() == at::kDouble || ref_in.scalar_type() == at::kDouble;
  const at::ScalarType ct = wide ? at::kDouble : at::kFloat;
  const at::Tensor g = got_in.contiguous().view({-1});
  const at::Tensor w = ref_in.contiguous().view({-1});
  const bool has_slack = slack != nullptr && slack->defined();
  const at::Tensor s = has_slack ? slack->contiguous().view({-1}) : at::Tensor();
  for (int64_t start = 0; start < n; start += chunk_elements) {
    const int64_t len = std::min(chunk_elements, n - start);
    const at::Tensor sc = has_slack ? s.narrow(0, start, len) : at::Tensor();
    const ChunkResult c = CompareChunk(g.narrow(0, start, len), w.narrow(0, start, len), has_slack ? &sc : nullptr,
                                       ct, tol);
    if (c.num_bad > 0 && r.first_bad_index < 0) r.first_bad_index = start + c.first_bad;
    r.num_bad += c.num_bad;
    r.max_abs_err = std::max(r.max_abs_err, c.max_abs);
    r.max_rel_err = std::max(r.max_rel_err, c.max_rel);
  }
  if (r.num_bad == 0) return r;
  r.ok = false;
  const double gv = g[r.first_bad_index].item<double>();
  const double wv = w[r.first_bad_index].item<double>();
  std::string why = "outside tolerance";
  if (std::isnan(gv) && !std::isnan(wv)) why = "unwritten or NaN";
  else if (!std::isnan(gv) && std::isnan(wv)) why = "reference is NaN";
  else if (std::isinf(gv) || std::isinf(wv)) why = "Inf mismatch";
  r.reason = "element " + std::to_string(r.first_bad_index) + ": got " + FormatValue(gv) + ", expected " +
             FormatValue(wv) + " (" + why + "); " + std::to_string(r.num_bad) + " of " + std::to_string(n) +
             " elements bad; max abs err " + FormatValue(r.max_abs_err) + ", max rel err " +
             FormatValue(r.max_rel_err);
  return r;
}


StorageFingerprint FingerprintStorage(const at::Tensor& t) {
  constexpr int64_t kChunk = 1ll << 22;  // words per pass: 5 int64 temporaries of 32 MiB
  // The whole storage as bytes: a write anywhere in an input's buffer
  // (alignment offset, stride gaps) shows, not only in the elements viewed.
  const int64_t nbytes = static_cast<int64_t>(t.storage().nbytes());
  at::Tensor bytes = at::from_blob(const_cast<void*>(t.storage().data()), {nbytes}, t.options().dtype(at::kByte));
  at::Tensor words = nbytes % 4 == 0 ? bytes.view(at::kInt) : bytes;
  StorageFingerprint f;
  for (int64_t first = 0; first < words.numel(); first += kChunk) {
    at::Tensor w = words.narrow(0, first, std::min(kChunk, words.numel() - first)).to(at::kLong);
    at::Tensor a = w.bitwise_and(0xffff), b = w.bitwise_right_shift(16).bitwise_and(0xffff);
    // Below 2^55 within a chunk; the wrap is across chunks, on unsigned integers.
    at::Tensor sums = at::stack({a.sum(), b.sum(), (a * a + b * b).sum()}).cpu();
    const int64_t* v = sums.data_ptr<int64_t>();
    f.a += static_cast<uint64_t>(v[0]);
    f.b += static_cast<uint64_t>(v[1]);
    f.sq += static_cast<uint64_t>(v[2]);
  }
  return f;
}

}  // namespace dice::reference
