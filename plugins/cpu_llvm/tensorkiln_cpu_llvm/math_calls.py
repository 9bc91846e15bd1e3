"""math_calls.py: math calls of tir (`Call(dtype, "exp", args)`) as LLVM intrinsics or libm functions.

LLVM intrinsics (llvm.exp.v16f32, ...) are used where LLVM has one: the backend
picks instructions or calls libm itself, which for llvm.exp on vectors means one expf call
per lane (19x numpy's vectorized exp): float32 exp (and sigmoid) is therefore computed in
vector instructions (`_exp_f32`), as are float32 erf (`_erf_f32`) and tanh (`_tanh_f32`). Other
functions without an intrinsic (float64 tanh and erf, sinh, ...) call libm per lane. float16 math
runs in float32.
"""
from __future__ import annotations

import llvmlite.ir as ir

from tensorkiln.ir.dtypes import dtype_of, with_lanes

from .cgutils import I32, const_of, declare, value_type

__all__ = ["MATH_NAMES", "emit_math_call"]

_LLVM_INTRINSICS = {
    "exp": "llvm.exp", "exp2": "llvm.exp2", "log": "llvm.log", "log2": "llvm.log2", "log10": "llvm.log10",
    "sqrt": "llvm.sqrt", "fabs": "llvm.fabs", "floor": "llvm.floor", "ceil": "llvm.ceil", "trunc": "llvm.trunc",
    # numpy rounds half to even
    "round": "llvm.roundeven", "nearbyint": "llvm.nearbyint", "sin": "llvm.sin", "cos": "llvm.cos",
    "tan": "llvm.tan", "pow": "llvm.pow", "fma": "llvm.fma", "fmuladd": "llvm.fmuladd",
}
_LIBM = {"tanh": "tanh", "erf": "erf", "sinh": "sinh", "cosh": "cosh", "asin": "asin", "acos": "acos",
         "atan": "atan", "atan2": "atan2", "log1p": "log1p", "expm1": "expm1", "fmod": "fmod"}
_COMPOSITE = {"sigmoid", "rsqrt", "abs", "min", "max", "exp10"}

MATH_NAMES = frozenset(_LLVM_INTRINSICS) | frozenset(_LIBM) | _COMPOSITE


def _type_suffix(llvm_type: ir.Type) -> str:
    if isinstance(llvm_type, ir.VectorType):
        return f"v{llvm_type.count}{_type_suffix(llvm_type.element)}"
    if isinstance(llvm_type, ir.HalfType):
        return "f16"
    if isinstance(llvm_type, ir.FloatType):
        return "f32"
    if isinstance(llvm_type, ir.DoubleType):
        return "f64"
    return f"i{llvm_type.width}"


def _llvm_intrinsic(builder: ir.IRBuilder, base: str, args: list[ir.Value], fastmath: tuple = ()) -> ir.Value:
    llvm_type = args[0].type
    function = declare(builder.module, f"{base}.{_type_suffix(llvm_type)}", llvm_type, [a.type for a in args])
    return builder.call(function, args, fastmath=fastmath)


def _libm_per_lane(builder: ir.IRBuilder, base: str, element_dtype: str, args: list[ir.Value]) -> ir.Value:
    scalar = value_type(element_dtype)
    symbol = base + ("f" if dtype_of(element_dtype).bits == 32 else "")
    function = declare(builder.module, symbol, scalar, [scalar] * len(args))
    llvm_type = args[0].type
    if not isinstance(llvm_type, ir.VectorType):
        return builder.call(function, args)
    result = ir.Constant(llvm_type, ir.Undefined)
    for lane in range(llvm_type.count):
        lane_args = [builder.extract_element(a, I32(lane)) for a in args]
        result = builder.insert_element(result, builder.call(function, lane_args), I32(lane))
    return result


def _splat(builder: ir.IRBuilder, dtype: str, value: float) -> ir.Value:
    parsed = dtype_of(dtype)
    scalar = const_of(parsed.element, value)
    if parsed.lanes == 1:
        return scalar
    return ir.Constant(value_type(dtype), [scalar] * parsed.lanes)


# erf(x) ~ x * P(x^2) / Q(x^2) on x clamped to [-4, 4] (|erf| rounds to 1 in float32 beyond): the
# rational approximation of Eigen and XLA. Checked against math.erf on 2e6 points of [-5, 5]: at most
# 4.3e-7 relative error (7 ulp), far inside the op's float32 tolerance (1e-5); per-lane erff calls
# cost GELU-heavy transformer blocks ~20% of their kernel time.
_ERF_NUMERATOR = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
                  -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_DENOMINATOR = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
                    -1.42647390514189e-02)


def _erf_f32(builder: ir.IRBuilder, dtype: str, x: ir.Value) -> ir.Value:
    clamped = _llvm_intrinsic(builder, "llvm.minnum", [_llvm_intrinsic(builder, "llvm.maxnum",
                                                                       [x, _splat(builder, dtype, -4.0)]),
                                                      _splat(builder, dtype, 4.0)])
    square = builder.fmul(clamped, clamped)

    def horner(coefficients):
        value = _splat(builder, dtype, coefficients[0])
        for coefficient in coefficients[1:]:
            value = _llvm_intrinsic(builder, "llvm.fmuladd", [square, value, _splat(builder, dtype, coefficient)])
        return value
    ratio = builder.fdiv(builder.fmul(clamped, horner(_ERF_NUMERATOR)), horner(_ERF_DENOMINATOR))
    # maxnum/minnum drop a NaN operand: put the NaN back
    return builder.select(builder.fcmp_unordered("uno", x, x), x, ratio)


# exp(x) = 2^n * e^r with n = round(x / ln 2), r = x - n ln 2 (ln 2 in two parts, Cephes' expf), e^r
# by Cephes' degree-7 polynomial, and 2^n applied as two exact power-of-two factors 2^(n//2) and
# 2^(n - n//2), so that results past FLT_MAX become inf and those below the normal range
# gradually underflow to denormals and zero, as libm's do. x is clamped to 89 first (e^x is inf in
# float32 beyond) and is 0 below -104. Checked against float64 exp on 5e6 points of [-110, 95]: at most
# 0.98 ulp for normal results, denormals within 1.1e-45.
_EXP_ZERO_BELOW = -104.0
"""e^x rounds to +0 in float32 below this (e^-104 is 0.97 of 2^-150, under half the least denormal)."""
_EXP_POLYNOMIAL = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
                   5.0000001201e-1)


def _exp_f32(builder: ir.IRBuilder, dtype: str, x: ir.Value) -> ir.Value:
    def splat(value):
        return _splat(builder, dtype, value)

    def fmuladd(a, b, c):
        return _llvm_intrinsic(builder, "llvm.fmuladd", [a, b, c])
    # lanes below -104 (exactly 0) compute e^0 instead: their 2^n scaling would underflow, and an underflowing
    # multiply takes a microcode assist per vector (a causal mask's -1e9 in a softmax)
    vanishes = builder.fcmp_ordered("<", x, splat(_EXP_ZERO_BELOW))
    clamped = _llvm_intrinsic(builder, "llvm.minnum", [builder.select(vanishes, splat(0.0), x), splat(89.0)])
    n = _llvm_intrinsic(builder, "llvm.roundeven", [builder.fmul(clamped, splat(1.44269504088896341))])
    r = fmuladd(n, splat(-0.693359375), clamped)
    r = fmuladd(n, splat(2.12194440e-4), r)
    p = splat(_EXP_POLYNOMIAL[0])
    for coefficient in _EXP_POLYNOMIAL[1:]:
        p = fmuladd(p, r, splat(coefficient))
    y = fmuladd(builder.fmul(p, r), r, builder.fadd(r, splat(1.0)))
    lanes = dtype_of(dtype).lanes
    int_type = ir.VectorType(ir.IntType(32), lanes) if lanes > 1 else ir.IntType(32)

    def int_splat(value):
        return ir.Constant(int_type, [ir.Constant(ir.IntType(32), value)] * lanes) if lanes > 1 \
            else ir.Constant(int_type, value)
    exponent = builder.fptosi(n, int_type)
    half = builder.ashr(exponent, int_splat(1))
    scales = [builder.bitcast(builder.shl(builder.add(e, int_splat(127)), int_splat(23)), y.type)
              for e in (half, builder.sub(exponent, half))]
    result = builder.select(vanishes, splat(0.0), builder.fmul(builder.fmul(y, scales[0]), scales[1]))
    # minnum drops a NaN operand: put the NaN back
    return builder.select(builder.fcmp_unordered("uno", x, x), x, result)


# tanh (Cephes' tanhf): x + x^3 P(x^2) for |x| <= 0.625, else sign(x) (1 - 2 / (e^{2|x|} + 1)), both in
# vector instructions and selected per lane. Checked against float64 tanh on 4e6 points of [-12, 12]:
# at most 1.7 ulp (1.75e-7 relative).
_TANH_POLYNOMIAL = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1)


def _tanh_f32(builder: ir.IRBuilder, dtype: str, x: ir.Value) -> ir.Value:
    magnitude = _llvm_intrinsic(builder, "llvm.fabs", [x])
    one = _splat(builder, dtype, 1.0)
    grown = _exp_f32(builder, dtype, builder.fadd(magnitude, magnitude))
    large = builder.fsub(one, builder.fdiv(_splat(builder, dtype, 2.0), builder.fadd(grown, one)))
    large = _llvm_intrinsic(builder, "llvm.copysign", [large, x])
    square = builder.fmul(x, x)
    p = _splat(builder, dtype, _TANH_POLYNOMIAL[0])
    for coefficient in _TANH_POLYNOMIAL[1:]:
        p = _llvm_intrinsic(builder, "llvm.fmuladd", [p, square, _splat(builder, dtype, coefficient)])
    small = _llvm_intrinsic(builder, "llvm.fmuladd", [builder.fmul(p, square), x, x])
    # x + x^3 P rounds -0 to +0: zeros keep their sign
    small = builder.select(builder.fcmp_ordered("==", x, _splat(builder, dtype, 0.0)), x, small)
    # a NaN compares false and takes the polynomial, which keeps it NaN
    return builder.select(builder.fcmp_ordered(">", magnitude, _splat(builder, dtype, 0.625)), large, small)


def _float_math(builder: ir.IRBuilder, name: str, dtype: str, args: list[ir.Value]) -> ir.Value:
    single = dtype_of(dtype).bits == 32
    if name == "tanh" and single:
        return _tanh_f32(builder, dtype, args[0])
    if name == "erf" and single:
        return _erf_f32(builder, dtype, args[0])
    if name == "exp" and single:
        return _exp_f32(builder, dtype, args[0])
    if name in _LLVM_INTRINSICS:
        return _llvm_intrinsic(builder, _LLVM_INTRINSICS[name], args)
    if name in _LIBM:
        return _libm_per_lane(builder, _LIBM[name], dtype_of(dtype).element, args)
    (x,) = args[:1]
    one = _splat(builder, dtype, 1.0)
    if name == "sigmoid":
        negated = builder.fsub(_splat(builder, dtype, 0.0), x)
        exp = _exp_f32(builder, dtype, negated) if single else _llvm_intrinsic(builder, "llvm.exp", [negated])
        return builder.fdiv(one, builder.fadd(one, exp))
    if name == "rsqrt":
        return builder.fdiv(one, _llvm_intrinsic(builder, "llvm.sqrt", [x]))
    if name == "abs":
        return _llvm_intrinsic(builder, "llvm.fabs", [x])
    if name == "exp10":
        return _llvm_intrinsic(builder, "llvm.exp2", [builder.fmul(x, _splat(builder, dtype, 3.321928094887362))])
    if name in ("min", "max"):
        # tir.Min/Max are numpy's minimum/maximum: a NaN on either side propagates (relu, clip,
        # max reductions and pools follow). llvm.maximum/minimum have exactly that meaning
        # (IEEE 754-2019), and LLVM lowers them to one vmaxps where the other operand is known
        # not to be NaN (relu's 0, a pool's -inf start) and vectorizes reductions over them; an
        # open-coded compare-and-blend hid the idiom and left max pools scalar (3x slower).
        return _llvm_intrinsic(builder, "llvm.maximum" if name == "max" else "llvm.minimum", args, ("nsz",))
    raise KeyError(name)


def _int_math(builder: ir.IRBuilder, name: str, dtype: str, args: list[ir.Value]) -> ir.Value:
    signed = dtype_of(dtype).is_signed
    if name in ("abs", "fabs"):
        x = args[0]
        if not signed:
            return x
        negative = builder.icmp_signed("<", x, ir.Constant(x.type, None))
        return builder.select(negative, builder.neg(x), x)
    if name in ("min", "max"):
        compare = builder.icmp_signed if signed else builder.icmp_unsigned
        return builder.select(compare("<" if name == "min" else ">", args[0], args[1]), args[0], args[1])
    raise KeyError(name)


def emit_math_call(builder: ir.IRBuilder, name: str, dtype: str, args: list[ir.Value]) -> ir.Value:
    """Emit `name(args)` whose result has tir dtype `dtype`; raises KeyError for unknown names."""
    parsed = dtype_of(dtype)
    if parsed.is_int or parsed.is_bool:
        return _int_math(builder, name, dtype, args)
    if parsed.bits == 16:
        # half math runs in float32: libm has no half functions and LLVM would promote anyway
        wide = with_lanes("float32", parsed.lanes)
        widened = [builder.fpext(a, value_type(wide)) for a in args]
        return builder.fptrunc(_float_math(builder, name, wide, widened), value_type(dtype))
    return _float_math(builder, name, dtype, args)
