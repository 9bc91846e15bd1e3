"""Neural-network computes: conv2d, conv2d_transpose, dense/matmul, pooling, softmax, norms."""
from .conv2d import conv2d_layout, conv2d_nchw, conv2d_nhwc, conv2d_transpose_nchw, pad_nchw, pad_spatial
from . import dense  # the module: its `dense()` would shadow it here
from .norm import batch_norm, layer_norm, lrn
from .pooling import pool2d_nchw
from .softmax import softmax_stages

__all__ = ["conv2d_layout", "conv2d_nchw", "conv2d_nhwc", "conv2d_transpose_nchw", "pad_nchw", "pad_spatial",
           "dense", "batch_norm", "layer_norm", "lrn", "pool2d_nchw", "softmax_stages"]
