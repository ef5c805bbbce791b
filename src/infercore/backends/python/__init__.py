"""Triton Python-backend compatible runtime: unchanged ``model.py`` files run in-process.

``pb_utils`` is the ``triton_python_backend_utils`` API models import, ``loader`` imports a
model file safely, and ``backend`` holds the backend the registry names "python". Nothing
heavy is imported here; the registry imports ``backend`` on first use.
"""
