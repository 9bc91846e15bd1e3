"""Built-in graph ops; importing this package registers them all."""
from . import elementwise, image, layout, nn, reduce, tensor  # noqa: F401
from . import bitcast, col2im, cumulative, ngram, sampling, scatter  # noqa: F401,E402  (ONNX operator coverage, issue 18)
from . import control_flow  # noqa: F401,E402  (if, loop, scan)
from . import roi_align, window_nd  # noqa: F401,E402  (N-d pools, max pool indices, N-d transposed convolution, RoiAlign)
from . import conv_nd  # noqa: F401,E402  (N-d convolution)
from . import winograd  # noqa: F401,E402  (nn.conv2d_winograd: 3x3 convs with transformed weights)
