"""The cuda TargetSpec: the validated manifest plus this plugin's emitter and loader."""
from tensorkiln.sdk import TargetSpec, load_manifest

MANIFEST = load_manifest(__file__)

# No emitter or loader yet: the manifest says available = false with the reason,
# and compiling for cuda raises a clear "not available yet" error.
CUDA = TargetSpec(manifest=MANIFEST)
