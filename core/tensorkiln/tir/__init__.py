"""Loop IR: PrimFunc, buffers, loops, loads/stores, vectors, intrinsic calls."""
from .nodes import *  # noqa: F401,F403
from .nodes import __all__ as _node_names
from .printer import format_expr, format_func, format_stmt

__all__ = [*_node_names, "format_expr", "format_stmt", "format_func"]
