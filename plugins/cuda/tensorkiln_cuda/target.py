"""The cuda TargetSpec: the validated manifest plus this plugin's emitter and loader."""
from tensorkiln.sdk import TargetSpec, load_manifest

from .emitter import CUDAEmitter
from .runtime import CUDALoader

MANIFEST = load_manifest(__file__)

_EMITTER = CUDAEmitter()
CUDA = TargetSpec(manifest=MANIFEST, emitter=_EMITTER, loader=CUDALoader(_EMITTER))
