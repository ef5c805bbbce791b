"""Network frontends (KServe v2 HTTP/REST and gRPC) over the public in-process API.

Each frontend module offers ``add_arguments(parser)`` (its tritonserver flags) and
``from_args(server, args)`` (the frontend those flags ask for, or None), and its frontend
object has ``start()`` (returns once listening) and ``stop(timeout)`` (stop accepting,
let in-flight requests finish within ``timeout`` seconds, then close).
"""
