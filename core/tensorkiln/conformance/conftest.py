"""Loads the conformance pytest plugin for `pytest --pyargs tensorkiln.conformance --tk-target T`."""
pytest_plugins = ["tensorkiln.conformance.pytest_plugin"]
