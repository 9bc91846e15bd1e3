"""sdk/strategy.py: knobs, tuning spaces and op implementations, the records a plugin's strategies are made of."""
import pytest

from tensorkiln.ir.errors import ScheduleError
from tensorkiln.sdk import Knob, OpImplementation, TuningSpace, Workload
from tensorkiln.sdk.strategy import EMPTY_SPACE


def _space() -> TuningSpace:
    return TuningSpace((Knob("tile", (4, 8, 16), default=8), Knob("unroll", (False, True), default=True)))


def test_a_knob_default_must_be_one_of_its_candidates():
    assert Knob("tile", [4, 8], 8).candidates == (4, 8)
    with pytest.raises(ScheduleError, match=r"knob 'tile': default 12 is not one of its candidates \[4, 8\]"):
        Knob("tile", (4, 8), 12)


def test_a_knob_needs_candidates():
    with pytest.raises(ScheduleError, match=r"knob 'tile' has no candidate values"):
        Knob("tile", (), 1)


def test_a_space_declares_each_knob_once():
    with pytest.raises(ScheduleError, match=r"knob\(s\) \['tile'\] more than once"):
        TuningSpace((Knob("tile", (4,), 4), Knob("tile", (8,), 8)))


def test_default_config_takes_each_knobs_default():
    assert _space().default_config() == {"tile": 8, "unroll": True}
    assert EMPTY_SPACE.default_config() == {}


def test_validate_completes_a_partial_config_with_defaults():
    assert _space().validate({"tile": 16}) == {"tile": 16, "unroll": True}
    assert _space().validate({}) == {"tile": 8, "unroll": True}


def test_validate_names_an_unknown_knob():
    with pytest.raises(ScheduleError, match=r"unknown knob\(s\) \['tile_size'\]; this space has \['tile', 'unroll'\]"):
        _space().validate({"tile_size": 8})


def test_validate_names_the_knob_of_a_value_outside_its_candidates():
    with pytest.raises(ScheduleError, match=r"knob 'tile': 12 is not one of its candidates \[4, 8, 16\]"):
        _space().validate({"tile": 12, "unroll": False})


def test_iteration_covers_the_grid_first_knob_slowest():
    space = _space()
    configs = list(space)
    assert len(space) == space.size == 6 == len(configs)
    assert configs == [{"tile": t, "unroll": u} for t in (4, 8, 16) for u in (False, True)]
    assert all(space.validate(config) == config for config in configs)
    assert list(EMPTY_SPACE) == [{}] and len(EMPTY_SPACE) == 1


def _schedule(outputs, target, config):
    return None


def test_an_implementation_takes_one_key_or_several():
    assert OpImplementation("acme.relu", "nn.relu", _schedule).keys == ("nn.relu",)
    assert OpImplementation("acme.dense", ["nn.dense", "dense"], _schedule).keys == ("nn.dense", "dense")
    with pytest.raises(ScheduleError, match=r"op implementation 'acme.none' has no keys"):
        OpImplementation("acme.none", (), _schedule)


def test_an_implementation_without_space_or_condition_applies_everywhere_with_no_knobs():
    implementation = OpImplementation("acme.relu", ("nn.relu",), _schedule)
    assert implementation.applies(None, None) is True
    assert implementation.space(Workload(), None) is EMPTY_SPACE
    assert implementation.compute is None and implementation.priority == 0


@pytest.mark.parametrize("verdict, reason", [("K is odd", "K is odd"), (False, "condition rejected the call"),
                                             (None, "condition rejected the call")])
def test_a_condition_that_is_not_true_gives_a_reason(verdict, reason):
    implementation = OpImplementation("acme.relu", ("nn.relu",), _schedule, condition=lambda call, target: verdict)
    assert implementation.applies(None, None) == reason


def test_workload_dtype_comes_from_the_call_without_outputs():
    from tensorkiln import graph
    call = graph.nn.relu(graph.var("x", shape=(4,), dtype="float16"))
    assert Workload(call=call).dtype == "float16" and Workload(call=call).anchor is None
