"""tir.simplify_expr and the simplify pass: IR in, IR out."""
from tensorkiln import tir
from tensorkiln.tir import IntImm, Var
from tensorkiln.tir.arith import const_bounds


def c(v):
    return IntImm("int32", v)


def test_constant_folding_and_identities():
    x = Var("x")
    assert tir.simplify_expr(x * 1 + 0) is x
    tir.assert_structural_equal(tir.simplify_expr(c(3) * c(4) + c(1)), c(13))
    f = tir.Var("f", "float32")
    assert tir.simplify_expr(f * tir.const(1.0) + tir.const(0.0)) is f


def test_linear_terms_cancel():
    i, j = Var("i"), Var("j")
    tir.assert_structural_equal(tir.simplify_expr((i * 4 + j) - i * 4), j)


def test_div_mod_of_split_index_with_bounds():
    io, ii = Var("io"), Var("ii")
    bounds = {io: (0, 7), ii: (0, 3)}
    tir.assert_structural_equal(tir.simplify_expr((io * 4 + ii) // 4, bounds), io)
    tir.assert_structural_equal(tir.simplify_expr((io * 4 + ii) % 4, bounds), ii)


def test_div_mod_need_the_bounds():
    io, ii = Var("io"), Var("ii")
    e = (io * 4 + ii) // 4
    simplified = tir.simplify_expr(e, {io: (0, 7), ii: (0, 9)})
    assert not tir.structural_equal(simplified, io)


def test_div_times_divisor_plus_mod_is_the_dividend():
    x = Var("x")
    tir.assert_structural_equal(tir.simplify_expr((x // 8) * 8 + x % 8), x)


def test_comparisons_decided_by_bounds():
    i = Var("i")
    assert tir.simplify_expr(i < 10, {i: (0, 9)}).value == 1
    assert tir.simplify_expr(i < 5, {i: (5, 9)}).value == 0


def test_simplify_pass_uses_loop_bounds_and_drops_known_branches():
    i = Var("i")
    buf = tir.Buffer("A", (c(8),), "float32")
    body = tir.IfThenElse(i < 8, tir.Store(buf, tir.const(1.0), (i * 4 + 3) // 4))
    func = tir.PrimFunc("f", (buf,), tir.For(i, c(0), c(8), tir.ForKind.SERIAL, body))
    expected = tir.PrimFunc("f", (buf,), tir.For(i, c(0), c(8), tir.ForKind.SERIAL,
                                                  tir.Store(buf, tir.const(1.0), i)))
    tir.assert_structural_equal(tir.simplify(func), expected)


def test_folded_constants_wrap_to_narrow_int_dtypes():
    # two's complement, as C and numpy: no IntImm outside its dtype's range
    x, y = Var("x", "int8"), Var("y", "uint8")
    folded = tir.simplify_expr(IntImm("int8", 100) + IntImm("int8", 28))
    assert (folded.dtype, folded.value) == ("int8", -128)
    folded = tir.simplify_expr(IntImm("uint8", 3) - IntImm("uint8", 4))
    assert (folded.dtype, folded.value) == ("uint8", 255)
    linear = tir.simplify_expr(x + IntImm("int8", 100) + IntImm("int8", 28))
    assert isinstance(linear, tir.Add) and linear.b.value == -128
    assert str(tir.simplify_expr(y - IntImm("uint8", 1) - IntImm("uint8", 0))) == "(y - 1)"
    assert tir.simplify_expr(x * IntImm("int8", 64) * IntImm("int8", 4)).value == 0   # 256 wraps to 0


def test_narrowing_cast_drops_bounds_that_do_not_fit():
    i = Var("i")
    bounds = {i: (0, 200)}
    assert const_bounds(tir.Cast("int16", i), bounds) == (0, 200)
    assert const_bounds(tir.Cast("int8", i), bounds) is None


def test_broadcast_zeros_and_ones_drop_out_of_vector_arithmetic():
    """The zero terms a folded select leaves in a vector sum (Winograd's transform rows) are removed here:
    LLVM keeps `fadd x, 0.0` (it is exact only without signed zeros), so they would reach the kernel."""
    buf = tir.Buffer("B", (c(64),), "float32")
    x, y = (tir.Load(buf, tir.Ramp(c(base), c(1), 16)) for base in (0, 16))
    zero, one = tir.Broadcast(tir.const(0.0), 16), tir.Broadcast(tir.const(1.0), 16)
    assert tir.simplify_expr(zero + (x + zero)) is x
    assert tir.simplify_expr((x - zero) * one) is x
    tir.assert_structural_equal(tir.simplify_expr(x + (zero - y)), x - y)
    tir.assert_structural_equal(tir.simplify_expr(x - (zero - y)), x + y)
    tir.assert_structural_equal(tir.simplify_expr((zero - y) + x), x - y)
    # a zero times a vector stays (0 * inf is nan), as does a vector minus a vector
    assert not tir.structural_equal(tir.simplify_expr(zero * x), zero)
    tir.assert_structural_equal(tir.simplify_expr(zero - y), zero - y)


def test_a_select_on_a_broadcast_constant_keeps_its_taken_branch_only():
    """Vectorized selects on a row index (Winograd's transform rows) fold per lane-uniform condition; the dead
    branch is not simplified at all (it may be large), and a load predicated on all-true lanes is plain."""
    buf = tir.Buffer("B", (c(64),), "float32")
    j = Var("j")
    taken = tir.Load(buf, tir.Ramp(j * 16, c(1), 16), tir.Broadcast(tir.EQ(c(1), c(1)), 16))
    dead = tir.Load(buf, tir.Ramp(j * 16 + c(16), c(1), 16))
    chain = tir.Select(tir.Broadcast(tir.EQ(c(2), c(2)), 16), taken, dead)
    tir.assert_structural_equal(tir.simplify_expr(chain), tir.Load(buf, tir.Ramp(j * 16, c(1), 16)))
    other = tir.Select(tir.Broadcast(tir.EQ(c(2), c(3)), 16), taken, dead)
    tir.assert_structural_equal(tir.simplify_expr(other), dead)


def test_non_negative_proves_only_what_holds_for_every_value():
    i, j = Var("i"), Var("j")
    known = {id(i)}
    assert tir.non_negative(i * 4 + i // 7, known)
    assert tir.non_negative(j % 7, known)                    # floor modulo by a positive constant
    assert tir.non_negative(tir.Max(j, i), known)            # one side suffices for max
    assert tir.non_negative(tir.Ramp(i * 16, c(1), 16), known)
    assert not tir.non_negative(j, known)                    # nothing known of j
    assert not tir.non_negative(i - 1, known)                # a difference may be negative
    assert not tir.non_negative(tir.Min(i, j), known)
    assert not tir.non_negative(j // 7, known)
    assert tir.non_negative(Var("u", "uint32"), set())        # unsigned
