"""What the server and a worker process share: how a worker starts and how the two talk.

``spawner`` (workers forked by a fork server, or spawned afresh), ``protocol`` (the messages
between the two sides, and how tensors cross), ``arena`` (the shared memory between them:
arenas and an output ring). ``isolation/`` (the server's side) and ``worker/`` (the
worker's) both import this package and not each other (contract "python-isolation" in
.importlinter).
"""
