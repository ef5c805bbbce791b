"""Observability: the services that report what the engine does.

``metrics`` (Prometheus, from stats.py), ``custom_metrics`` (the families models register),
``tracing`` with ``trace_record`` and ``trace_export`` (Triton's trace settings, timestamps,
trace file / OpenTelemetry), ``logs`` (Triton's log format and settings). They import values
only, and no backend (contract "observability" in .importlinter); what they read of the
engine is handed in. The settings they carry are values on the ground floor
(metrics_settings.py, trace_settings.py, log_settings.py), which ``Options`` holds.
"""
