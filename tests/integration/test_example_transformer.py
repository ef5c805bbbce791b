"""python_backend's ``transformer`` example on CPU through a real ``infercore serve``,
in-thread and process-isolated: a seeded torch transformer encoder that classifies
character-tokenized text into three sentiment classes, batched dynamically (max batch 8,
preferred 4 and 8); its configuration's instance group is KIND_CPU, as the example's
configuration says to write it without a GPU. Checked as the example's client uses it:
server and model ready, one text and a batch of texts, each answer three probabilities
whose argmax names the class; and beyond it, a text answers the same alone or batched."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient
from serve_process import PYTHON_EXECUTION_MODES, ServeProcess, serving_python_models

from infercore.testing import RepositoryBuilder

pytest.importorskip("torch")


MODEL_PY = """
import json
import random
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
import triton_python_backend_utils as pb_utils


class SentimentClassifier(nn.Module):
    def __init__(self, vocab_size, embed_dim, num_heads, num_layers, max_seq_length,
                 num_classes):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, embed_dim)
        self.position_embedding = nn.Embedding(max_seq_length, embed_dim)
        layer = nn.TransformerEncoderLayer(d_model=embed_dim, nhead=num_heads,
                                           dim_feedforward=embed_dim * 4, dropout=0.1,
                                           activation="relu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=num_layers)
        self.fc1 = nn.Linear(embed_dim, embed_dim // 2)
        self.dropout = nn.Dropout(0.1)
        self.fc2 = nn.Linear(embed_dim // 2, num_classes)

    def forward(self, input_ids, attention_mask):
        batch, length = input_ids.shape
        positions = torch.arange(length, device=input_ids.device).unsqueeze(0).expand(batch, -1)
        embedded = self.token_embedding(input_ids) + self.position_embedding(positions)
        encoded = self.encoder(embedded, src_key_padding_mask=attention_mask == 0)
        mask = attention_mask.unsqueeze(-1).expand(encoded.size()).float()
        pooled = (encoded * mask).sum(dim=1) / torch.clamp(mask.sum(dim=1), min=1e-9)
        return self.fc2(self.dropout(F.relu(self.fc1(pooled))))


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.output_dtype = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(config, "OUTPUT")["data_type"])
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        random.seed(42)
        np.random.seed(42)
        torch.manual_seed(42)
        self.model = SentimentClassifier(10000, 256, 8, 4, 128, 3).to(self.device)
        self.model.eval()
        print(f"Model initialized on device: {self.device}")

    def execute(self, requests):
        responses = []
        for request in requests:
            ids = pb_utils.get_input_tensor_by_name(request, "INPUT_IDS").as_numpy()
            mask = pb_utils.get_input_tensor_by_name(request, "ATTENTION_MASK").as_numpy()
            with torch.no_grad():
                logits = self.model(torch.from_numpy(ids).long().to(self.device),
                                    torch.from_numpy(mask).long().to(self.device))
                probabilities = F.softmax(logits, dim=-1)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
                "OUTPUT", probabilities.cpu().numpy().astype(self.output_dtype))]))
        return responses

    def finalize(self):
        del self.model
"""

CONFIG = """
name: "transformer"
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT_IDS" data_type: TYPE_INT64 dims: [ 128 ] },
  { name: "ATTENTION_MASK" data_type: TYPE_INT64 dims: [ 128 ] }
]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 3 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100 }
version_policy: { latest: { num_versions: 1 } }
"""

CLASS_NAMES = ["Negative", "Neutral", "Positive"]
MAX_SEQ_LENGTH = 128


@pytest.fixture(scope="module", params=list(PYTHON_EXECUTION_MODES))
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp(f"transformer_{request.param}")
    repo = RepositoryBuilder(root / "models")
    repo.add_model("transformer", config=CONFIG, model_py=MODEL_PY)
    with serving_python_models(root, repo.path, request.param, ready_timeout=120,
                               grpc=False) as started:
        yield started


def encode(text: str, vocab_size: int = 10000) -> tuple[list[int], list[int]]:
    # The example client's character tokenizer: a character's code, padded with 0s.
    input_ids = [min(ord(c), vocab_size - 1) for c in text.lower()][:MAX_SEQ_LENGTH]
    attention_mask = [1] * len(input_ids)
    padding = MAX_SEQ_LENGTH - len(input_ids)
    return input_ids + [0] * padding, attention_mask + [0] * padding


def _predict(client: httpclient.InferenceServerClient, texts: list[str]) -> np.ndarray:
    encoded = [encode(text) for text in texts]
    input_ids_np = np.array([ids for ids, _ in encoded], dtype=np.int64)
    attention_mask_np = np.array([mask for _, mask in encoded], dtype=np.int64)
    inputs = [
        httpclient.InferInput("INPUT_IDS", input_ids_np.shape, "INT64"),
        httpclient.InferInput("ATTENTION_MASK", attention_mask_np.shape, "INT64"),
    ]
    inputs[0].set_data_from_numpy(input_ids_np)
    inputs[1].set_data_from_numpy(attention_mask_np)
    outputs = [httpclient.InferRequestedOutput("OUTPUT")]
    response = client.infer(model_name="transformer", inputs=inputs, outputs=outputs)
    return response.as_numpy("OUTPUT")


def _check(probabilities: np.ndarray) -> str:
    assert probabilities.shape == (3,) and probabilities.dtype == np.float32
    assert np.isclose(probabilities.sum(), 1.0, atol=1e-5)
    return CLASS_NAMES[int(np.argmax(probabilities))]


def test_the_transformer_example_serves_its_clients_calls(server):
    texts = ["This movie was great!", "Terrible service.", "It was okay, I guess.", "Meh"]
    with httpclient.InferenceServerClient(url=server.http_url) as client:
        assert client.is_server_ready()
        assert client.is_model_ready("transformer")
        single = _predict(client, texts[:1])
        assert single.shape == (1, 3)
        _check(single[0])
        batch = _predict(client, texts)
        assert batch.shape == (len(texts), 3)
        for probabilities in batch:
            _check(probabilities)
        # The same text, alone or in a batch, answers the same: the model is seeded and in
        # eval mode, and a padded position never counts.
        np.testing.assert_allclose(batch[0], single[0], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(_predict(client, texts[:1])[0], single[0], rtol=1e-5)
