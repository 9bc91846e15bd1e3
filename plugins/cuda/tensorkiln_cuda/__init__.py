"""tensorkiln target plugin `cuda`."""
