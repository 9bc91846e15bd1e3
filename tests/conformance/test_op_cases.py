"""Every ops-level case is accepted by its own op's type rule: a case the op refuses would leave a
claimed op unchecked (the kit would skip it), so a vendor could claim it without verification."""
from __future__ import annotations

import numpy as np
import pytest

from tensorkiln.conformance.op_cases import CASES, kind_of
from tensorkiln.graph import get_op
from tensorkiln.graph.types import TensorType
from tensorkiln.ir.dtypes import from_numpy

DTYPES = {"float": "float32", "int": "int32", "bool": "bool"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_case_variant_is_accepted_by_the_op(name):
    case, op = CASES[name], get_op(name)
    rng = np.random.default_rng(0)
    for kind in case.kinds:
        dtype = DTYPES[kind]
        for variant in range(3):
            instance = case.make(dtype, variant, rng)
            types = tuple(TensorType(a.shape, from_numpy(a.dtype)) for _, a in instance.inputs)
            attrs = op.make_attrs(None, **instance.attrs)
            op.type_rule(types, attrs)   # raises if the op refuses its own case
            assert kind_of(dtype) == kind
