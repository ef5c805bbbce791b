"""Process-isolated Python instances, the server's side: each instance's model runs in a
worker process (``worker/``), reached through ``ipc/``.

``instances`` (the isolated model and instances the backend builds, and the settings that
choose isolation), ``worker_handle`` (one worker process: start it, execute over shared
memory, see it die), ``inflight`` (the requests a worker holds and the one final answer each
gets), ``bls`` (running a worker's BLS requests), ``metrics`` (the registry objects a
worker's custom metrics live in).
"""
