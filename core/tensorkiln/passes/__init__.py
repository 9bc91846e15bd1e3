"""Graph passes and the pass manager.

Pipelines are data: `GRAPH_PIPELINE` lists the passes `tk.compile` runs, in order
(the loop passes' pipeline is `tensorkiln.te.LOWER_PIPELINE`). One PassContext
may name graph and loop passes alike.
"""
from ..tir import passes as _loop_passes  # noqa: F401  (registers the loop passes a PassContext may name)
from .manager import (
    Pass, PassContext, PassInstrument, PassManager, PassTimingInstrument, PrintIRInstrument,
    SkippedPass, VerifyInstrument, current_pass_context, get_pass, register_pass, registered_passes,
)
from .alter_layout import alter_layout
from .cancel_layout_transforms import cancel_layout_transforms
from .eliminate_common_subexpr import eliminate_common_subexpr
from .eliminate_dead_code import eliminate_dead_code
from .fold_constants import fold_constants
from .fold_scale_axis import fold_scale_axis
from .fuse_ops import fuse_ops, group_each_op
from .simplify_inference import simplify_inference
from .sink_reshapes import sink_reshapes
from .mixed_precision import MixedPrecisionPolicy, to_mixed_precision  # noqa: F401  (registers the pass)
from .fold_qdq import fold_qdq
from .assign_fixed_point import assign_fixed_point_pass  # noqa: F401  (registers the pass; the compiler runs it after fusion)

# Ordering (each pass keeps the graph well typed; opt levels gate them, see each file):
# - simplify_inference first: batch_norm becomes multiply/add on constants and, through
#   fold_scale_axis, folds into the preceding conv2d/dense weights; identities vanish.
# - fold_constants next, so every constant subgraph (shape arithmetic included) is a
#   value before the structural passes compare nodes.
# - fold_scale_axis again: scales that only became constants through folding now fold.
# - eliminate_dead_code after folding (folded split/tuple fields leave TupleGetItem chains),
#   then eliminate_common_subexpr: constants are canonical values by then, so equal
#   subgraphs built from equal weights merge.
# - sink_reshapes then: squeeze/expand_dims/reshape move below the elementwise ops that read
#   them and cancel, so each elementwise chain follows its anchor (conv2d, matmul) directly
#   and fuses into it, and alter_layout sees conv chains unbroken.
# - alter_layout (opt level 2, target-aware) near the end: it sees the final op mix and
#   inserts transforms only at region boundaries; cancel_layout_transforms then merges
#   chains, and fold_constants folds transforms of constant weights.
# fuse_ops is not listed: the compiler runs it after placement (a group never mixes targets).
GRAPH_PIPELINE: tuple[str, ...] = (
    "fold_qdq",             # first: it needs the integer weights that fold_constants would dequantize
    "simplify_inference",
    "fold_constants",
    "fold_scale_axis",
    "eliminate_dead_code",
    "eliminate_common_subexpr",
    "sink_reshapes",
    "to_mixed_precision",   # only when PassContext(config={"to_mixed_precision": {"dtype": ...}}) asks
    "alter_layout",
    "cancel_layout_transforms",
    "fold_constants",
)

__all__ = [
    "Pass", "PassContext", "PassInstrument", "PassManager", "PassTimingInstrument", "PrintIRInstrument",
    "SkippedPass", "VerifyInstrument", "current_pass_context", "get_pass", "register_pass",
    "registered_passes", "fuse_ops", "group_each_op", "GRAPH_PIPELINE", "alter_layout", "cancel_layout_transforms",
    "eliminate_common_subexpr", "eliminate_dead_code", "fold_constants", "fold_qdq", "fold_scale_axis", "simplify_inference",
    "sink_reshapes",
]
