"""The fpga_hls TargetSpec: the validated manifest plus this plugin's emitter and loader."""
from tensorkiln.sdk import TargetSpec, load_manifest

from .device import FPGALoader
from .emitter import HLSEmitter

MANIFEST = load_manifest(__file__)

FPGA_HLS = TargetSpec(manifest=MANIFEST, emitter=HLSEmitter(), loader=FPGALoader())
