"""Built-in graph ops; importing this package registers them all."""
from . import elementwise, image, layout, nn, reduce, tensor  # noqa: F401
