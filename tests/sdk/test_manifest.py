"""The manifest models validate what plugins declare."""
import pytest
from pydantic import ValidationError

from tensorkiln.sdk import Capabilities, LayoutPreference, PluginInfo, PluginManifest


def _info(**overrides):
    base = dict(name="npu", version="1.0.0", sdk_api=">=1.0,<2", device_kind="accelerator")
    base.update(overrides)
    return PluginInfo(**base)


def test_valid_info_and_sdk_range():
    info = _info()
    assert info.supports_sdk("1.0") and info.supports_sdk("1.9")
    assert not info.supports_sdk("2.0")


@pytest.mark.parametrize("field, value, text", [
    ("name", "My-NPU", "lower_snake_case"),
    ("version", "one", "PEP 440"),
    ("sdk_api", "newest", "version range"),
    ("aliases", ("Bad Alias",), "lower_snake_case"),
])
def test_bad_info_fields(field, value, text):
    with pytest.raises(ValidationError, match=text):
        _info(**{field: value})


def test_unavailable_needs_a_reason():
    with pytest.raises(ValidationError, match="unavailable_reason"):
        _info(available=False)


def test_capabilities_reject_unknown_names():
    with pytest.raises(ValidationError, match="unknown dtype 'float8'"):
        Capabilities(dtypes=("float8",))
    with pytest.raises(ValidationError, match="unknown memory scope 'texture'"):
        Capabilities(memory_scopes=("texture",))
    with pytest.raises(ValidationError, match="unknown schedule primitive 'warp_shuffle'"):
        Capabilities(schedule_primitives=("warp_shuffle",))


def test_capabilities_consistency():
    with pytest.raises(ValidationError, match="'bind' is claimed but no thread_axes"):
        Capabilities(schedule_primitives=("bind",))
    with pytest.raises(ValidationError, match="max_shared_memory_bytes is 0"):
        Capabilities(memory_scopes=("global", "shared"))


def test_layout_strings():
    assert LayoutPreference(op="nn.conv2d", layout="NCHW8c").layout == "NCHW8c"
    with pytest.raises(ValidationError, match="layout string"):
        LayoutPreference(op="nn.conv2d", layout="nchw")


def test_unknown_top_level_field_is_refused():
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        PluginManifest.model_validate({"plugin": _info().model_dump(), "colour": "red"})


def test_op_support_claims():
    manifest = PluginManifest.model_validate({"plugin": _info().model_dump(),
                                              "ops": {"supported": ["*"], "unsupported": ["nn.lrn"]}})
    assert manifest.ops.claims("nn.conv2d") and not manifest.ops.claims("nn.lrn")
