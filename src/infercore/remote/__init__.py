"""RemoteServer: the in-process API over a network, against infercore or Triton.

``RemoteServer(url, protocol="grpc" | "http")`` and its ``RemoteModel`` handles have the
methods of ``Server`` and ``Model`` that make sense remotely, so the same application
code runs embedded or against a remote server (docs/remote_api.md).
"""

from .model import RemoteModel
from .server import RemoteServer

__all__ = ["RemoteModel", "RemoteServer"]
