"""tensorkiln target plugin `fpga_hls`."""
