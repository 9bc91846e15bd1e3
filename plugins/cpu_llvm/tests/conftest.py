"""Tests of the cpu_llvm plugin: its schedules and strategies (the core's tests use it as their CPU target)."""
