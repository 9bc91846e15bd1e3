"""tensorkiln target plugin `opencl`."""
