"""Conformance with real Triton: cases, the answers Triton gave, and their replay.

See docs/conformance.md. ``python -m tests.conformance.record`` records; the replay is
``test_conformance.py``, part of the default test run.
"""
