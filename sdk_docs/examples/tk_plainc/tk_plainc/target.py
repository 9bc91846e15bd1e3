"""The plainc TargetSpec: the validated manifest plus this plugin's emitter and loader."""
from tensorkiln.sdk import TargetSpec, load_manifest

from .emitter import PlaincEmitter
from .runtime import PlaincLoader

TARGET = TargetSpec(manifest=load_manifest(__file__), emitter=PlaincEmitter(), loader=PlaincLoader())
