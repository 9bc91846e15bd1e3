"""Built-in graph ops; importing this package registers them all."""
from . import elementwise, image, layout, nn, reduce, tensor  # noqa: F401
from . import control_flow  # noqa: F401,E402  (if, loop, scan)
