"""target.py: The cpu_llvm TargetSpec: the validated manifest plus this plugin's emitter and loader."""
from tensorkiln.sdk import TargetSpec, load_manifest

from .emitter import LLVMEmitter
from .host import host_fingerprint, refine_capabilities
from .runtime import LLVMLoader

MANIFEST = load_manifest(__file__)

CPU_LLVM = TargetSpec(manifest=MANIFEST, emitter=LLVMEmitter(), loader=LLVMLoader(),
                      refine_capabilities=refine_capabilities, host_fingerprint=host_fingerprint)
