"""__init__.py: tensorkiln target plugin `cpu_llvm`."""
