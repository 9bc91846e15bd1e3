"""Hook implementations of the fpga_hls plugin (entry point tensorkiln.plugins: fpga_hls)."""
from tensorkiln.sdk import hookimpl

from .target import FPGA_HLS


def _ours(target) -> bool:
    return target.name == FPGA_HLS.name


@hookimpl
def tensorkiln_targets():
    return [FPGA_HLS]


@hookimpl
def tensorkiln_intrinsics(target):
    if not _ours(target):
        return []
    from .intrinsics import fpga_intrinsics
    return fpga_intrinsics(target)


@hookimpl
def tensorkiln_strategies(target):
    """Pipelined loop nests with reuse_factor (II) and unroll as tuning knobs (strategies.py)."""
    if not _ours(target):
        return []
    from .strategies import fpga_strategies
    return fpga_strategies(target)


@hookimpl
def tensorkiln_layout_preferences(target):
    """NHWC convolutions: channels innermost, so a line buffer holds whole pixels and one
    pipelined loop over output channels streams the weights of a kernel window."""
    if not _ours(target):
        return []
    from tensorkiln.sdk import LayoutPreference
    return [LayoutPreference(op="nn.conv2d", layout="NHWC", weight_layout="HWIO")]
