"""The KServe v2 HTTP/REST frontend: ``server`` (flags, lifecycle, ``HttpFrontend``).

``protocol`` (one HTTP/1.1 connection, an asyncio Protocol over httptools; ``eager`` runs
a handler's coroutine without a Task), ``messages`` (request and response values and their
bytes), ``routes`` (the endpoints), ``infer`` (the inference endpoint: ``decode`` reads the
request, ``params`` its parameters, ``header_cache`` keeps decoded JSON headers, ``encode``
writes the response), ``generate`` (the generate extension), ``json`` (a body read as
Triton's rapidjson reads it), ``busy_poll`` (the loop polls for a moment after each request).
The SageMaker and Vertex AI frontends (``frontends/sagemaker.py``, ``vertex_ai.py``) are
HttpFrontends with their own routes.
"""
