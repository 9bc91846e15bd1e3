"""bitcast: the bits of each element read as another dtype of the same width (ONNX BitCast)."""
from __future__ import annotations

from dataclasses import dataclass

from ...ir.dtypes import dtype_of, to_numpy
from ...ir.errors import DTypeError
from ..attrs import Attrs
from ..registry import OpPattern, register_op
from ..types import TensorType
from ._rules import tensor_args

__all__ = ["BitcastAttrs"]


@dataclass(frozen=True, slots=True)
class BitcastAttrs(Attrs):
    dtype: str = "int32"

    def _check(self) -> None:
        dtype_of(self.dtype)


def _bitcast_type(arg_types, attrs: BitcastAttrs) -> TensorType:
    (x,) = tensor_args("bitcast", arg_types)
    source, target = dtype_of(x.dtype), dtype_of(attrs.dtype)
    if source.bits != target.bits or source.lanes != 1 or target.lanes != 1:
        raise DTypeError(f"bitcast: {x.dtype} ({source.bits} bits) and {attrs.dtype} ({target.bits} bits) differ "
                         "in width; bitcast keeps every bit, so pick a dtype of the same width (or use cast)")
    return TensorType(x.shape, attrs.dtype)


register_op("bitcast", attrs=BitcastAttrs, type_rule=_bitcast_type,
            reference=lambda x, attrs: x.view(to_numpy(attrs.dtype)), pattern=OpPattern.ELEMWISE, num_inputs=1,
            doc="Reinterpret each element's bits as `dtype` (same width; little-endian, as ONNX BitCast).")
