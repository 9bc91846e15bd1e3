"""Every registered graph op gets a te compute from tensorkiln.ops (its schedule comes from the target's
strategies, else the core's naive default: see test_op_numerics.py)."""
import pytest

import tensorkiln.ops as ops
from tensorkiln.graph import list_ops
from tensorkiln.graph.ops.control_flow import is_control_flow

from .op_inputs import CASES


def _kernel_ops():
    """Every op but control flow (if, loop, scan: host steps around compiled bodies, tested in
    tests/controlflow and tests/graph/test_ops.py)."""
    return [op for op in list_ops() if not is_control_flow(op)]


def test_every_registered_op_has_a_compute():
    missing = [op.name for op in _kernel_ops() if op.compute is None]
    assert missing == [], f"ops without a te compute: {missing}"
    assert ops.uncovered_ops() == []


def test_every_registered_op_has_test_inputs():
    missing = [op.name for op in _kernel_ops() if op.name not in CASES]
    assert missing == [], f"add an input generator to tests/ops/op_inputs.py for: {missing}"


def test_register_all_is_idempotent():
    before = {op.name: op.compute for op in list_ops()}
    ops.register_all()
    assert {op.name: op.compute for op in list_ops()} == before


@pytest.mark.parametrize("name", ["nn.conv2d", "nn.dense", "add", "sum", "nn.softmax"])
def test_computes_are_tagged_with_their_pattern(name):
    from tensorkiln import te
    from tensorkiln.graph import get_op
    from tensorkiln.graph.types import TensorType

    from .op_inputs import cases_for
    op = get_op(name)
    case = cases_for(name)[0]
    inputs = [te.placeholder(a.shape, str(a.dtype), name=f"x{i}") for i, a in enumerate(case.inputs)]
    out_type = op.type_rule(tuple(TensorType(a.shape, str(a.dtype)) for a in case.inputs), case.attrs)
    out = op.compute(inputs, case.attrs, out_type)
    expected = {"nn.conv2d": "conv2d_nchw", "nn.dense": "dense", "add": "broadcast", "sum": "comm_reduce",
                "nn.softmax": "softmax_output"}[name]
    assert out.op.tag == expected
