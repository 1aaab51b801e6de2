// dice/torch_ext/capture_result.h — what capture produces, in framework-free
// values: a fusion group (CapturedGroup: IR plus provenance), a framework
// node left out of every group (LeftOutNode), and the real inputs of one
// group call kept for tuning (CapturedCall). The TorchScript frontend
// (capture.h) and the FX frontend (run_group.h) both produce them; the
// process-wide group table (group_table.h) and the tuner consume them.
// No torch types: modules that only store or tune groups include this header
// instead of capture.h. Plain structs; thread-compatible.
#pragma once

#include <string>
#include <vector>

#include "dice/core/ir.h"

namespace dice::torch_ext {

/// One fusion group as the runtime sees it: IR plus provenance.
struct CapturedGroup {
  ir::Graph graph;                    ///< validated IR (ir::Validate passed)
  std::string canonical;              ///< ir::Canonical(graph)
  std::string summary;                ///< ir::Summary(graph), "mul+add+gelu"
  std::vector<std::string> torch_ops; ///< framework op names, in order ("aten::mul", ...)
};

/// A framework node that stayed outside every fusion group, and why.
struct LeftOutNode {
  std::string kind;    ///< "aten::matmul"
  std::string reason;  ///< "not a fusible op", "unsupported dtype int64 (input 0)"
};

/// The real inputs of one group call, captured for tuning.
struct CapturedCall {
  int group_id = 0;
  ir::Graph graph;
  std::vector<ir::TensorSpec> inputs;     ///< specs of the call's inputs
  std::vector<std::string> input_bytes;   ///< host copies, contiguous, TensorSpec::nbytes each
  int device = -1;                        ///< CUDA device of the inputs (-1: CPU); where the call is tuned
};

}  // namespace dice::torch_ext
