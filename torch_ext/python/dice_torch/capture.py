"""ATen-level torch.fx nodes -> the runtime's fusion-group IR (canonical text).

The FX twin of ``torch_ext/include/dice/torch_ext/capture.h`` (TorchScript):
one translation code path serves both the support check and the builder, so
"supported" means "translates". The IR and its canonical text are specified in
``runtime/include/dice/core/ir.h``; semantics follow PyTorch eager op by op
(broadcasting, type promotion, Python scalars are weak constants).

Supported ATen overloads (what aot_autograd / torch.export produce): add/sub/
rsub (alpha), mul, div (no rounding mode), neg, abs, exp, log, sqrt, rsqrt,
reciprocal, tanh, sigmoid, erf, relu, gelu (approximate), silu, mish, selu,
softplus, elu, leaky_relu, hardtanh, clamp/clamp_min/clamp_max (scalar
bounds), hardswish, hardsigmoid, pow (scalar or tensor exponent, scalar base),
maximum/minimum, sum/mean (dtype None), amax/amin, max.dim/min.dim (values
only), logsumexp, linalg_vector_norm (p > 0), _softmax/_log_softmax (no
half_to_float), softmax/log_softmax.int (dtype None), native_layer_norm /
layer_norm, native_group_norm (first output only), _to_copy /
prims.convert_element_type among float32/float16/bfloat16. Tensor operands
must be float32/float16/bfloat16 of rank <= 8 (``node.meta["val"]``); scalar
operands must be Python numbers (a SymInt/SymFloat operand is not supported).
GEMMs (issue 18 item 1): ``addmm(b, x, t(w))`` (beta = alpha = 1, b [N]) and
``mm(x, t(w))``, with ``t(w)`` an ``aten.t`` / ``aten.permute(w, [1, 0])`` of a
contiguous 2-D w [N, K] and x [M, K], are F.linear as aot_autograd lowers
it; on an N-d x it is ``view(mm(view(x, [M, K]), t(w)), [..., N])``, and the
output view stands for the linear. They translate to the IR's ``linear`` op
(x, w, [b]) and start a GEMM
group that takes their elementwise epilogue (fusion_policy.h rule 4). Which
dtypes may do so is the runtime's gate (``dice::gemm_group_gate``,
``DICE_GEMM_GROUPS``; the FX default "epilogue": float32, and bf16/f16 only
with an epilogue op, ``partition.lone_gemm_reason``). Other matrix multiplies (bmm,
mm of an untransposed operand) stay with PyTorch, and the elementwise ops
after them form the group.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import operator
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.fx

aten = torch.ops.aten
prims = torch.ops.prims

_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
DTYPE_IDS = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}  # ir::DType values
_MAX_RANK = 8
_INF = math.inf


class Unsupported(Exception):
    """A node cannot join a fusion group; ``str(e)`` is the reason."""


def _fmt(v: float) -> str:
    """A double as the canonical text prints it (C's %.17g; nan/inf/-inf)."""
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return "%.17g" % v


def tensor_meta(node: torch.fx.Node) -> torch.Tensor | None:
    """The example value (FakeTensor) of ``node`` when it is a tensor, else None."""
    val = node.meta.get("val")
    return val if isinstance(val, torch.Tensor) else None


def dtype_name(dtype: torch.dtype) -> str:
    """'int64'-style name of a torch dtype, for reasons."""
    return str(dtype).replace("torch.", "")


@dataclass
class _Value:
    kind: str  # "in" (group input k) or "op" (op j)
    index: int


@dataclass
class IrBuilder:
    """Builds one IR graph; inputs are discovered while ops are emitted and
    numbered first when the text is rendered (ir.h: inputs 0..N-1, op i is N+i)."""

    inputs: list[tuple[str, int]] = field(default_factory=list)  # (dtype, rank)
    input_nodes: list[torch.fx.Node] = field(default_factory=list)
    ops: list[tuple[str, list[_Value], str]] = field(default_factory=list)  # name, args, attribute text
    values: dict[torch.fx.Node, _Value] = field(default_factory=dict)
    members: list[torch.fx.Node] = field(default_factory=list)  # nodes translated into this builder

    def input(self, node: torch.fx.Node) -> _Value:
        """The IR value of a tensor produced outside the group (an input; deduplicated)."""
        if node in self.values:
            return self.values[node]
        t = tensor_meta(node)
        if t is None:
            raise Unsupported(f"operand {node.name} is not a tensor")
        if t.dtype not in _DTYPES:
            raise Unsupported(f"unsupported dtype {dtype_name(t.dtype)} (operand {node.name})")
        if t.dim() > _MAX_RANK:
            raise Unsupported(f"rank {t.dim()} > {_MAX_RANK} (operand {node.name})")
        v = _Value("in", len(self.inputs))
        self.inputs.append((_DTYPES[t.dtype], t.dim()))
        self.input_nodes.append(node)
        self.values[node] = v
        return v

    def const(self, c: float) -> _Value:
        """A weak scalar constant."""
        return self.emit("const", [], scalars_text=_fmt(c))

    def emit(self, name: str, args: list[_Value], dims: list[int] | None = None, keepdim: bool = False,
             ivalue: int = 0, scalars: list[float] | None = None, scalars_text: str | None = None) -> _Value:
        """Appends op ``name`` (ir.h canonical name) and returns its value."""
        if name == "const":
            attrs = scalars_text or ""
        else:
            attrs = ""
            if dims:
                attrs += " dims=[" + ",".join(str(d) for d in dims) + "]"
            if keepdim:
                attrs += " keepdim=1"
            if ivalue != 0:
                attrs += f" i={ivalue}"
            if scalars:
                attrs += " s=[" + ",".join(_fmt(s) for s in scalars) + "]"
        self.ops.append((name, list(args), attrs))
        return _Value("op", len(self.ops) - 1)

    def _id(self, v: _Value) -> int:
        return v.index if v.kind == "in" else len(self.inputs) + v.index

    def text(self, outputs: list[_Value]) -> str:
        """The canonical text (ir::Canonical's format) with ``outputs`` as the group outputs."""
        lines = ["dice-ir v1"]
        for k, (dt, rank) in enumerate(self.inputs):
            lines.append(f"input %{k} {dt} rank={rank}")
        for j, (name, args, attrs) in enumerate(self.ops):
            vid = len(self.inputs) + j
            if name == "const":
                lines.append(f"%{vid} = const({attrs})")
            else:
                lines.append(f"%{vid} = {name}(" + ", ".join(f"%{self._id(a)}" for a in args) + ")" + attrs)
        lines.append("output " + ", ".join(f"%{self._id(o)}" for o in outputs))
        text = "\n".join(lines) + "\n"
        rec = _recorder.get()
        if rec is not None:
            rec.append((text, tuple(n.name for n in self.members), input_signature(self.input_nodes)))
        return text


# Region bookkeeping for the backend's per-region decisions (backend.py):
# which FX nodes a group's IR came from, and which nodes to leave to the rest
# compiler when a variant of the graph is built with only some regions.
_recorder: contextvars.ContextVar[list | None] = contextvars.ContextVar("dice_capture_recorder", default=None)
_excluded: contextvars.ContextVar[frozenset] = contextvars.ContextVar("dice_capture_excluded", default=frozenset())

#: The reason ``unsupported_reason`` gives for a node excluded by ``excluding``.
EXCLUDED_REASON = "left to the rest compiler (region decision)"


def input_signature(nodes) -> str:
    """'f32[8, 16]/[16, 1];...': dtype, shape and strides of each node's example value."""
    parts = []
    for n in nodes:
        t = tensor_meta(n)
        if t is None:
            parts.append("?")
            continue
        try:
            stride = list(t.stride())
        except RuntimeError:
            stride = "?"
        parts.append(f"{_DTYPES.get(t.dtype, dtype_name(t.dtype))}{list(t.shape)}/{stride}")
    return ";".join(parts)


@contextlib.contextmanager
def recording_members():
    """Within the block, every IR text rendered (one per group planned) is
    appended to the yielded list as (ir_text, member node names in graph
    order, input_signature of the group's inputs)."""
    rec: list = []
    token = _recorder.set(rec)
    try:
        yield rec
    finally:
        _recorder.reset(token)


@contextlib.contextmanager
def excluding(node_names):
    """Within the block, nodes named in ``node_names`` are unsupported (reason
    EXCLUDED_REASON), so the partitioner leaves them to the rest compiler."""
    token = _excluded.set(frozenset(node_names))
    try:
        yield
    finally:
        _excluded.reset(token)


class _Ctx:
    """Translation context of one node: argument access by schema name."""

    def __init__(self, node: torch.fx.Node, b: IrBuilder):
        self.node = node
        self.b = b
        schema = node.target._schema  # type: ignore[union-attr]
        self.names = [a.name for a in schema.arguments]
        self.defaults = {a.name: a.default_value for a in schema.arguments if a.has_default_value()}

    def arg(self, name: str) -> Any:
        if name in self.node.kwargs:
            return self.node.kwargs[name]
        i = self.names.index(name)
        if i < len(self.node.args):
            return self.node.args[i]
        return self.defaults.get(name)

    def tensor(self, name: str) -> _Value:
        a = self.arg(name)
        if not isinstance(a, torch.fx.Node):
            raise Unsupported(f"argument {name} is not a tensor")
        return self.b.values[a] if a in self.b.values else self.b.input(a)

    def rank(self, name: str) -> int:
        a = self.arg(name)
        t = tensor_meta(a) if isinstance(a, torch.fx.Node) else None
        if t is None:
            raise Unsupported(f"argument {name} has no tensor example value")
        return t.dim()

    def operand(self, name: str) -> _Value:
        """A tensor or a Python-number operand (weak constant)."""
        a = self.arg(name)
        if isinstance(a, torch.fx.Node):
            return self.tensor(name)
        return self.b.const(self.number(name))

    def number(self, name: str) -> float:
        a = self.arg(name)
        if isinstance(a, bool):
            return 1.0 if a else 0.0
        if isinstance(a, (int, float)):
            return float(a)
        raise Unsupported(f"non-constant scalar {name}")

    def opt_number(self, name: str) -> float | None:
        return None if self.arg(name) is None else self.number(name)

    def dims(self, name: str, rank: int) -> list[int]:
        """Normalised, sorted, unique dims (None / [] -> [] = every dim)."""
        a = self.arg(name)
        if a is None:
            return []
        items = [a] if isinstance(a, int) else list(a)
        r = max(rank, 1)
        out = set()
        for d in items:
            if not isinstance(d, int) or isinstance(d, bool):
                raise Unsupported(f"non-constant {name}")
            if d < -r or d >= r:
                raise Unsupported(f"dim {d} out of range for rank {rank}")
            out.add(d % r)
        return [] if rank == 0 else sorted(out)

    def require_none(self, *names: str) -> None:
        for n in names:
            if n in self.names and self.arg(n) is not None:
                raise Unsupported(f"{n} argument is not None")


def _unary(name: str) -> Callable[[_Ctx], _Value]:
    return lambda c: c.b.emit(name, [c.tensor("self")])


def _binary(name: str, a: str = "self", b: str = "other") -> Callable[[_Ctx], _Value]:
    return lambda c: c.b.emit(name, [c.operand(a), c.operand(b)])


def _add_sub(name: str, reversed_: bool = False) -> Callable[[_Ctx], _Value]:
    def f(c: _Ctx) -> _Value:
        a, b = c.operand("self"), c.operand("other")
        alpha = c.number("alpha") if c.arg("alpha") is not None else 1.0
        if reversed_:  # rsub: other - alpha * self
            if alpha != 1.0:
                a = c.b.emit("mul", [a, c.b.const(alpha)])
            return c.b.emit(name, [b, a])
        if alpha != 1.0:
            b = c.b.emit("mul", [b, c.b.const(alpha)])
        return c.b.emit(name, [a, b])
    return f


def _div(c: _Ctx) -> _Value:
    c.require_none("rounding_mode")
    return c.b.emit("div", [c.operand("self"), c.operand("other")])


def _gelu(c: _Ctx) -> _Value:
    approx = c.arg("approximate") or "none"
    if approx not in ("none", "tanh"):
        raise Unsupported(f"approximate='{approx}'")
    return c.b.emit("gelu", [c.tensor("self")], ivalue=1 if approx == "tanh" else 0)


def _clamp(lo_name: str | None, hi_name: str | None) -> Callable[[_Ctx], _Value]:
    def f(c: _Ctx) -> _Value:
        lo = c.opt_number(lo_name) if lo_name else None
        hi = c.opt_number(hi_name) if hi_name else None
        return c.b.emit("clamp", [c.tensor("self")], scalars=[-_INF if lo is None else lo, _INF if hi is None else hi])
    return f


def _reduce(name: str, dim_name: str | None = "dim") -> Callable[[_Ctx], _Value]:
    def f(c: _Ctx) -> _Value:
        c.require_none("dtype")
        rank = c.rank("self")
        dims = c.dims(dim_name, rank) if dim_name and dim_name in c.names else []
        keep = bool(c.arg("keepdim")) if "keepdim" in c.names else False
        return c.b.emit(name, [c.tensor("self")], dims=dims, keepdim=keep)
    return f


def _values_only(c: _Ctx) -> None:
    for u in c.node.users:
        if u.op != "call_function" or u.target is not operator.getitem or u.args[1] != 0:
            raise Unsupported("only the first output may be used")


def _max_min_dim(name: str) -> Callable[[_Ctx], _Value]:
    def f(c: _Ctx) -> _Value:
        _values_only(c)
        return _reduce(name)(c)
    return f


def _norm(c: _Ctx) -> _Value:
    c.require_none("dtype")
    p = c.number("ord") if c.arg("ord") is not None else 2.0
    if not p > 0:
        raise Unsupported("p must be > 0")
    rank = c.rank("self")
    return c.b.emit("norm", [c.tensor("self")], dims=c.dims("dim", rank), keepdim=bool(c.arg("keepdim")), scalars=[p])


def _softmax(name: str) -> Callable[[_Ctx], _Value]:
    def f(c: _Ctx) -> _Value:
        if "half_to_float" in c.names and c.arg("half_to_float"):
            raise Unsupported("half_to_float=True")
        c.require_none("dtype")
        rank = c.rank("self")
        if rank == 0:
            raise Unsupported("softmax of a 0-d tensor")
        return c.b.emit(name, [c.tensor("self")], dims=c.dims("dim", rank))
    return f


def _norm_args(c: _Ctx, x: _Value) -> list[_Value]:
    w, bias = c.arg("weight"), c.arg("bias")
    if bias is not None and w is None:
        raise Unsupported("bias without weight")
    args = [x]
    if w is not None:
        args.append(c.tensor("weight"))
    if bias is not None:
        args.append(c.tensor("bias"))
    return args


def _layer_norm(first_output_only: bool) -> Callable[[_Ctx], _Value]:
    def f(c: _Ctx) -> _Value:
        if first_output_only:
            _values_only(c)
        shape = c.arg("normalized_shape")
        if not isinstance(shape, (list, tuple)) or not all(isinstance(d, int) for d in shape):
            raise Unsupported("non-constant normalized_shape")
        eps = c.number("eps")
        x = c.tensor("input")
        return c.b.emit("layer_norm", _norm_args(c, x), ivalue=len(shape), scalars=[eps])
    return f


def _group_norm(c: _Ctx) -> _Value:
    _values_only(c)
    group = c.arg("group")
    if not isinstance(group, int):
        raise Unsupported("non-constant group")
    eps = c.number("eps")
    x = c.tensor("input")
    return c.b.emit("group_norm", _norm_args(c, x), ivalue=group, scalars=[eps])


def _cast(dtype_arg: str, self_name: str = "self") -> Callable[[_Ctx], _Value]:
    def f(c: _Ctx) -> _Value:
        for n in ("layout", "pin_memory", "memory_format"):
            if n in c.names and c.arg(n) not in (None, torch.preserve_format, torch.strided):
                raise Unsupported(f"{n} argument")
        if "device" in c.names and c.arg("device") is not None:
            src = tensor_meta(c.arg(self_name))
            if src is None or torch.device(c.arg("device")) != src.device:
                raise Unsupported("device change")
        target = c.arg(dtype_arg)
        if target is None:
            raise Unsupported("no dtype")
        if target not in DTYPE_IDS:
            raise Unsupported(f"cast to unsupported dtype {dtype_name(target)}")
        return c.b.emit("cast", [c.tensor(self_name)], ivalue=DTYPE_IDS[target])
    return f


def _pow(c: _Ctx) -> _Value:
    base, exp = c.arg("self"), c.arg("exponent")
    if isinstance(base, torch.fx.Node) and not isinstance(exp, torch.fx.Node):
        return c.b.emit("pow_scalar", [c.tensor("self")], scalars=[c.number("exponent")])
    return c.b.emit("pow", [c.operand("self"), c.operand("exponent")])


#: The views of a weight that make it F.linear's right operand (``_transposed_weight``).
TRANSPOSES = frozenset({aten.t.default, aten.permute.default})


def _transposed_weight(node: Any) -> torch.fx.Node | None:
    """w when ``node`` is ``t(w)`` or ``permute(w, [1, 0])`` of a contiguous 2-D w, else None."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return None
    if node.target is aten.t.default:
        ok = len(node.args) == 1
    elif node.target is aten.permute.default:
        ok = len(node.args) == 2 and list(node.args[1]) in ([1, 0], [-1, -2], [1, -2], [-1, 0])
    else:
        return None
    w = node.args[0] if ok else None
    t = tensor_meta(w) if isinstance(w, torch.fx.Node) else None
    if t is None or t.dim() != 2 or not t.is_contiguous():
        return None
    return w


def linear_operands(node: torch.fx.Node) -> tuple[torch.fx.Node, torch.fx.Node, torch.fx.Node | None] | None:
    """(x, w, b) when ``node`` is F.linear(x, w, b) as aot_autograd lowers it
    (``addmm(b, x, t(w))`` with beta = alpha = 1 and b [N], or ``mm(x, t(w))``;
    x [M, K], w [N, K] contiguous), else None."""
    if node.op != "call_function" or node.target not in (aten.addmm.default, aten.mm.default):
        return None
    addmm = node.target is aten.addmm.default
    if addmm:
        if len(node.args) != 3 or any(node.kwargs.get(k, 1) != 1 for k in ("beta", "alpha")):
            return None
        b, x, wt = node.args
    else:
        if len(node.args) != 2 or node.kwargs:
            return None
        b, (x, wt) = None, node.args
    w = _transposed_weight(wt)
    xt, wm = (tensor_meta(x) if isinstance(x, torch.fx.Node) else None), (tensor_meta(w) if w is not None else None)
    if xt is None or wm is None or xt.dim() != 2 or xt.shape[1] != wm.shape[1]:
        return None
    if b is not None:
        bt = tensor_meta(b) if isinstance(b, torch.fx.Node) else None
        if bt is None or bt.dim() != 1 or bt.shape[0] != wm.shape[0]:
            return None
    return x, w, b


_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)

#: The reason of an mm / addmm taken by the view after it (``nd_linear_operands``):
#: not fusible itself, yet part of a group, so the partitioner does not report it.
ABSORBED_REASON = "linear taken at its output view"


def nd_linear_operands(node: torch.fx.Node) -> tuple[torch.fx.Node, torch.fx.Node, torch.fx.Node | None] | None:
    """(x, w, b) when ``node`` is the output view of F.linear on an N-d x as
    aot_autograd lowers it: ``view(mm_or_addmm(view(x, [M, K]), t(w)), [*lead, N])``
    with x contiguous of shape [*lead, K] and the matmul read by this view
    only. The view then stands for the whole linear (x [..., K], w [N, K])."""
    if node.op != "call_function" or node.target not in _VIEWS or not isinstance(node.args[0], torch.fx.Node):
        return None
    mm = node.args[0]
    if len(mm.users) != 1:
        return None
    ops = linear_operands(mm)
    if ops is None:
        return None
    x2, w, b = ops
    if x2.op != "call_function" or x2.target not in _VIEWS or not isinstance(x2.args[0], torch.fx.Node):
        return None
    x = x2.args[0]
    xt, out = tensor_meta(x), tensor_meta(node)
    if xt is None or out is None or xt.dim() < 3 or not xt.is_contiguous():
        return None
    wt = tensor_meta(w)
    if list(out.shape) != list(xt.shape[:-1]) + [wt.shape[0]]:
        return None
    return x, w, b


def _absorbed_by_view(node: torch.fx.Node) -> bool:
    """True when the only reader of ``node`` (an mm / addmm) takes it as an N-d linear."""
    return len(node.users) == 1 and nd_linear_operands(next(iter(node.users))) is not None


def _linear(c: _Ctx) -> _Value:
    view = c.node.target in _VIEWS
    ops = nd_linear_operands(c.node) if view else linear_operands(c.node)
    if ops is None:  # a view of anything else, or a matrix multiply that is no F.linear: stays with PyTorch
        raise Unsupported("not a fusible op")
    out = tensor_meta(c.node)
    reason = str(torch.ops.dice.gemm_group_gate(DTYPE_IDS[out.dtype])) if out is not None else "no example value"
    if reason:  # said once, at the matmul
        raise Unsupported("not a fusible op" if view else reason)
    if not view and _absorbed_by_view(c.node):
        raise Unsupported(ABSORBED_REASON)
    x, w, b = ops
    args = [c.b.values[n] if n in c.b.values else c.b.input(n) for n in (x, w) + ((b,) if b is not None else ())]
    return c.b.emit("linear", args)


#: The GEMM targets (``_linear``): translated, but not among ``supported_targets``
#: (Inductor keeps its own decompositions of mm / addmm).
GEMM_TARGETS = frozenset({aten.addmm.default, aten.mm.default, *_VIEWS})
#: The matrix multiplies among them (the others are the N-d linear's output views).
GEMM_MATMULS = frozenset({aten.addmm.default, aten.mm.default})

#: IR ops of category kUnary / kBinary but cast (core/src/ir.cc): what a GEMM
#: epilogue node may translate to (fusion_policy.h PolicyNode::epilogue_op).
EPILOGUE_IR_OPS = frozenset({
    "neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "tanh", "sigmoid", "erf", "relu", "gelu", "silu",
    "mish", "softplus", "softsign", "elu", "selu", "leaky_relu", "clamp", "hardswish", "hardsigmoid", "pow_scalar",
    "add", "sub", "mul", "div", "maximum", "minimum", "pow"})

_TABLE: dict[Any, Callable[[_Ctx], _Value]] = {
    aten.addmm.default: _linear, aten.mm.default: _linear,
    aten.view.default: _linear, aten._unsafe_view.default: _linear, aten.reshape.default: _linear,
    aten.add.Tensor: _add_sub("add"), aten.add.Scalar: _add_sub("add"),
    aten.sub.Tensor: _add_sub("sub"), aten.sub.Scalar: _add_sub("sub"),
    aten.rsub.Tensor: _add_sub("sub", True), aten.rsub.Scalar: _add_sub("sub", True),
    aten.mul.Tensor: _binary("mul"), aten.mul.Scalar: _binary("mul"),
    aten.div.Tensor: _div, aten.div.Scalar: _div, aten.div.Tensor_mode: _div,
    aten.maximum.default: _binary("maximum"), aten.minimum.default: _binary("minimum"),
    aten.pow.Tensor_Scalar: _pow, aten.pow.Tensor_Tensor: _pow, aten.pow.Scalar: _pow,
    aten.gelu.default: _gelu,
    aten.softplus.default: lambda c: c.b.emit("softplus", [c.tensor("self")], scalars=[c.number("beta"), c.number("threshold")]),
    aten.elu.default: lambda c: c.b.emit("elu", [c.tensor("self")], scalars=[c.number("alpha"), c.number("scale"), c.number("input_scale")]),
    aten.leaky_relu.default: lambda c: c.b.emit("leaky_relu", [c.tensor("self")], scalars=[c.number("negative_slope")]),
    aten.hardtanh.default: _clamp("min_val", "max_val"),
    aten.clamp.default: _clamp("min", "max"),
    aten.clamp_min.default: _clamp("min", None),
    aten.clamp_max.default: _clamp(None, "max"),
    aten.sum.dim_IntList: _reduce("sum"), aten.sum.default: _reduce("sum", None),
    aten.mean.dim: _reduce("mean"), aten.mean.default: _reduce("mean", None),
    aten.amax.default: _reduce("amax"), aten.amin.default: _reduce("amin"),
    aten.max.default: _reduce("amax", None), aten.min.default: _reduce("amin", None),
    aten.max.dim: _max_min_dim("amax"), aten.min.dim: _max_min_dim("amin"),
    aten.logsumexp.default: _reduce("logsumexp"),
    aten.linalg_vector_norm.default: _norm,
    aten._softmax.default: _softmax("softmax"), aten.softmax.int: _softmax("softmax"),
    aten._log_softmax.default: _softmax("log_softmax"), aten.log_softmax.int: _softmax("log_softmax"),
    aten.native_layer_norm.default: _layer_norm(True), aten.layer_norm.default: _layer_norm(False),
    aten.native_group_norm.default: _group_norm,
    aten._to_copy.default: _cast("dtype"),
    prims.convert_element_type.default: _cast("dtype", "a"),
}
for _name in ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "tanh", "sigmoid", "erf", "relu",
              "silu", "mish", "selu", "hardswish", "hardsigmoid"):
    _TABLE[getattr(aten, _name).default] = _unary(_name)

#: Casts alone are not worth a group (as in the TorchScript pass).
TRIVIAL_TARGETS = frozenset({aten._to_copy.default, prims.convert_element_type.default, operator.getitem})


def is_first_output_getitem(node: torch.fx.Node) -> bool:
    """True for ``getitem(x, 0)`` where x is a supported multi-output op (layer_norm, max.dim, ...)."""
    return (node.op == "call_function" and node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node)
            and node.args[1] == 0 and node.args[0].target in _TABLE)


def translate_node(node: torch.fx.Node, b: IrBuilder) -> _Value:
    """Translates one ATen call node into ``b`` (operands already in ``b`` are
    reused, other tensors become group inputs) and binds its value.
    Raises:
        Unsupported: the reason the node cannot join a group.
    """
    if node.op != "call_function":
        raise Unsupported(f"{node.op} node")
    if is_first_output_getitem(node):
        src = node.args[0]
        if src not in b.values:
            raise Unsupported("getitem of a value outside the group")
        b.values[node] = b.values[src]
        return b.values[node]
    handler = _TABLE.get(node.target)
    if handler is None:
        raise Unsupported("not a fusible op")
    out = node.meta.get("val")
    first = out[0] if isinstance(out, (tuple, list)) and out else out
    if not isinstance(first, torch.Tensor):
        raise Unsupported("no tensor example value (node.meta['val'])")
    if first.dtype not in _DTYPES:
        raise Unsupported(f"output dtype {dtype_name(first.dtype)} unsupported")
    if first.dim() > _MAX_RANK:
        raise Unsupported(f"rank {first.dim()} > {_MAX_RANK}")
    v = handler(_Ctx(node, b))
    b.values[node] = v
    b.members.append(node)
    return v


def unsupported_reason(node: torch.fx.Node) -> str | None:
    """Why ``node`` cannot join a fusion group, or None when it can (it is
    translated alone, its tensor operands becoming inputs)."""
    if is_first_output_getitem(node):
        return unsupported_reason(node.args[0])
    if node.name in _excluded.get():
        return EXCLUDED_REASON
    try:
        translate_node(node, IrBuilder())
    except Unsupported as e:
        return str(e)
    except (TypeError, ValueError, AttributeError, IndexError) as e:
        return f"cannot translate: {e}"
    return None


def op_name(node: torch.fx.Node) -> str:
    """'aten.gelu.default' style name of a call node."""
    t = node.target
    return str(t) if isinstance(t, torch._ops.OpOverload) else getattr(t, "__name__", str(t))


def epilogue_facts(node: torch.fx.Node) -> list[torch.fx.Node] | None:
    """The tensor operands of ``node`` in operand order when it translates
    alone to exactly one elementwise IR op (EPILOGUE_IR_OPS) whose tensor
    arguments are those operands in that order (not rsub's swap, not x + x,
    not add with alpha != 1): the nodes a GEMM epilogue may be (fusion_policy.h
    PolicyNode::epilogue_op). None otherwise."""
    b = IrBuilder()
    try:
        translate_node(node, b)
    except (Unsupported, TypeError, ValueError, AttributeError, IndexError):
        return None
    ops = [(name, args) for name, args, _ in b.ops if name != "const"]
    if len(ops) != 1 or ops[0][0] not in EPILOGUE_IR_OPS:
        return None
    tensor_args = [a.index for a in ops[0][1] if a.kind == "in"]
    if tensor_args != list(range(len(b.inputs))):
        return None
    return list(b.input_nodes)


def supported_targets() -> list[Any]:
    """The ATen/prims overloads the translator handles (the decomposition
    table of the Inductor path leaves these whole), GEMM_TARGETS aside."""
    return [t for t in _TABLE if t not in GEMM_TARGETS]
