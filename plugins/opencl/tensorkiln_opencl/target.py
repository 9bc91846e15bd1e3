"""The opencl TargetSpec: the validated manifest plus this plugin's emitter and loader."""
from tensorkiln.sdk import TargetSpec, load_manifest

from .emitter import OpenCLEmitter
from .half import refine_capabilities
from .runtime import OpenCLLoader

MANIFEST = load_manifest(__file__)

OPENCL = TargetSpec(manifest=MANIFEST, emitter=OpenCLEmitter(), loader=OpenCLLoader(),
                    refine_capabilities=refine_capabilities)
