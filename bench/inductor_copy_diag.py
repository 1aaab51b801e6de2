"""Is Inductor, compiled through a custom torch.compile backend, as fast as
torch.compile(model)? (issue 17: what the dice backend serves when its guard
keeps Inductor alone must be torch.compile's own code.)

Four compiles of one KernelBench task, timed round-robin
(kernelbench_bench.bench_interleaved: CUDA events, L2 flushed, median µs of
40 calls) in 3 rounds:
  a_compile                torch.compile(model)
  b_custom_compile_fx      a custom backend calling compile_fx(gm, inputs)
  c_custom_plain_inductor  a custom backend calling dice's pipeline.plain_inductor
  d_compile_again          torch.compile(model, options={"max_autotune": False}):
                           a second compile of a's code (the noise floor)
One JSON row per round on stdout. GPU only.
    PYTHONPATH=torch_ext/python python3 bench/inductor_copy_diag.py .deps/kernelbench/level3/10_ResNet101.py
"""

import importlib.util
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernelbench_bench as kb  # noqa: E402


def main(path: str) -> None:
    from torch._inductor.compile_fx import compile_fx

    from dice_torch import pipeline

    spec = importlib.util.spec_from_file_location("task", path)
    task = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(task)
    torch.manual_seed(0)
    model = task.Model(*task.get_init_inputs()).cuda().eval()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
    variants = {
        "a_compile": torch.compile(model),
        "b_custom_compile_fx": torch.compile(model, backend=lambda gm, ex: compile_fx(gm, ex)),
        "c_custom_plain_inductor": torch.compile(model, backend=lambda gm, ex: pipeline.plain_inductor(gm, ex)),
        "d_compile_again": torch.compile(model, options={"max_autotune": False}),
    }
    fns = {}
    with torch.no_grad():
        for name, v in variants.items():
            v(*inputs)
            torch.cuda.synchronize()
            fns[name] = (lambda v=v: v(*inputs))
        for rnd in range(3):
            row = {k: round(us, 1) for k, us in kb.bench_interleaved(fns, 40).items()}
            print(json.dumps({"task": path, "round": rnd, **row}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
