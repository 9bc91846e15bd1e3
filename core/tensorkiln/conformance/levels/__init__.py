"""The six conformance levels; each module exposes `checks(target, options) -> list[Check]`."""
from . import intrinsics, manifest, models, ops, runtime, te

LEVEL_MODULES = {"manifest": manifest, "runtime": runtime, "te": te, "intrinsics": intrinsics, "ops": ops,
                 "models": models}

__all__ = ["LEVEL_MODULES"]
