"""Hook implementations of the fpga_hls plugin (entry point tensorkiln.plugins: fpga_hls)."""
from tensorkiln.sdk import hookimpl

from .target import FPGA_HLS


@hookimpl
def tensorkiln_targets():
    return [FPGA_HLS]
