"""tensorkiln target plugin `cpu_llvm`."""
