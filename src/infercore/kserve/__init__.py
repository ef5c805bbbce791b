"""The KServe v2 wire in both directions, for the frontends and for RemoteServer.

A layer below ``frontends/`` and ``remote/`` that imports values only (contract "kserve"
in .importlinter): ``status.py`` (the one table of error codes, HTTP statuses and gRPC
codes), ``params.py`` (InferParameter values), ``tensors.py`` (tensor bytes and the gRPC
typed contents). What only one side reads or writes stays with that side
(docs/architecture.md, "The KServe wire").
"""
