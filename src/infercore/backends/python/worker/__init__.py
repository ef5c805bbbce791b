"""Inside a worker process: the worker's side of a process-isolated Python instance.

``main`` (the entry points: the fork server and a worker), ``runtime`` (one instance of a
Python model, driven by the server's frames), ``calls`` (calls into the server the worker
waits for), ``bls`` (a model's BLS calls, run by the server), ``metrics`` (pb_utils custom
metrics that live in the server's registry).
"""
