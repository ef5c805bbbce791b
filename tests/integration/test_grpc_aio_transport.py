"""The grpc.aio transport (``--grpc-transport aio``), kept as a fallback: the same server
process tests as the default transport, for a representative subset (unary infer and its
errors, a deadline, streaming with a decoupled model)."""

from __future__ import annotations

import pytest
from test_grpc_infer import (  # noqa: F401 - fixtures and tests run again on this server
    client,
    stub,
    test_a_client_deadline_cancels_the_request,
    test_add_sub_answers_with_the_request_id_and_both_outputs,
    test_decoupled_models_are_refused_by_model_infer,
    test_unknown_models_and_versions_are_not_found,
)
from test_grpc_stream import (  # noqa: F401
    test_cancelling_a_stream_cancels_its_requests_and_the_server_keeps_serving,
    test_decoupled_models_stream_several_responses_per_request,
    test_many_requests_share_one_stream_and_come_back_in_order,
)

pytest_plugins = ["conftest_grpc"]


@pytest.fixture(scope="module")
def grpc_server(grpc_serve):
    return grpc_serve("--grpc-transport", "aio")
