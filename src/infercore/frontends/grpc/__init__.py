"""The KServe v2 gRPC frontend: ``server`` (flags, lifecycle, ``GrpcFrontend``).

``core`` (infercore's gRPC transport: gRPC core's server driven from one thread), ``bridge``
(runs core's loop handlers on an event loop), ``infer`` (ModelInfer, the hot path),
``stream`` (ModelStreamInfer), ``service`` (the non-inference RPCs and grpc.health.v1's
Check), ``codec`` (requests -> InferRequest) and ``encode`` (InferResponse -> response).
"""
