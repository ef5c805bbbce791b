"""``import triton_python_backend_utils as pb_utils`` for Triton Python models run by infercore.

A shim: everything public comes from ``infercore.backends.python.pb_utils``.
"""

from infercore.backends.python.pb_utils import *  # noqa: F403
from infercore.backends.python.pb_utils import __all__  # noqa: F401
