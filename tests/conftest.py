"""Shared pytest configuration: hypothesis runs derandomized with modest example counts."""
from hypothesis import settings

settings.register_profile("tensorkiln", deadline=None, derandomize=True, max_examples=20, print_blob=True)
settings.load_profile("tensorkiln")
