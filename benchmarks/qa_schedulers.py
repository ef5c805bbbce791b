"""Scheduler timing probes against real Triton 2.51 and infercore: pass/fail per scenario.

    python benchmarks/qa_schedulers.py --bench /tmp/bench [--server triton|infercore|both]
                                       [--only NAME ...]

What the conformance cases cannot say (they send one request at a time): how batches form
and when requests go while others are queued or executing. Each scenario starts the same
small Python-backend models on the server (tests/conformance/servers.py starts either
server, on fresh ports with a fresh repository), sends requests from client threads through
tritonclient, and checks what each request saw (the batch size the model executed, the
order of executions) and when it was answered. The expectations are Triton's observed
behaviour, so a scenario that fails on infercore is a departure from Triton; run against
Triton first to see the expectations still hold there (timings have margins for a busy
2-core machine).

Scenarios (what Triton 2.51 did, and what is checked):
- dyn_preferred_goes_at_once: two requests make a preferred size: executed together well
  before the 1 s queue delay.
- dyn_non_preferred_waits_the_delay: one request (no preferred size) waits the delay.
- dyn_past_the_delay_everything_goes: requests queued behind a busy instance past their
  delay go in one batch when it frees, not just the preferred prefix.
- dyn_many_instances_parallel: 48 concurrent requests, 2 priority levels, DELAY queue
  policy, 4 instances whose execute takes 300 ms: every answer within 3 s.
- dyn_delayed_keep_priority_order: requests whose queue timeout passed (DELAY) still run
  before every request of a less urgent level (the order within a level varied between
  Triton runs, so only the levels are checked).
- model_queue_timeout: a request whose own timeout shortens its level's default (REJECT)
  is answered "Request timeout expired" when the batcher next looks at the queue (here
  once the blocker is done), counted a failure, reason REJECTED.
- model_queue_no_default_timeout: with no default timeout a request's own does not apply.
- default_scheduler_timeout: without dynamic batching a request's timeout never expires.
- sequence_direct_oldest: interleaved sequences answer their running sums (direct, oldest).
- sequence_backlog_timeout: a sequence waiting in the backlog past its request's timeout
  is seated and run once the slot is free (no timeout answer).
- cancel_queued_{default,dynamic,sequence_direct,sequence_oldest}: a request queued behind
  a blocker is cancelled over gRPC: the client reads "Locally cancelled by application!";
  Triton runs it anyway without a batcher (counted a success) and otherwise counts it a
  failure, reason CANCELED (infercore drops it from the default scheduler's queue too:
  a known departure).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402

from tests.conformance.case import Model, Suite  # noqa: E402
from tests.conformance.servers import (  # noqa: E402
    RunningServer,
    infercore_kind,
    start_server,
    triton_paths,
)

# IN: how long to sleep (ms) in this execute; answers BATCH (the rows executed together)
# and ORDER (this instance's execution count, from 1)
PROBE_PY = '''
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.order = 0

    def execute(self, requests):
        self.order += 1
        inputs = [pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() for r in requests]
        rows = sum(int(x.shape[0]) for x in inputs)
        time.sleep(max(int(x.max()) for x in inputs) / 1000.0)
        responses = []
        for x in inputs:
            n = x.shape[0]
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("BATCH", np.full((n, 1), rows, np.int32)),
                pb_utils.Tensor("ORDER", np.full((n, 1), self.order, np.int32))]))
        return responses
'''


def _probe(name: str, extra: str, count: int = 1, max_batch_size: int = 8) -> Model:
    dims = "[ 1 ]" if max_batch_size else "[ 1, 1 ]"  # requests are [1, 1] either way
    config = f'''
name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: {dims} }} ]
output [ {{ name: "BATCH" data_type: TYPE_INT32 dims: {dims} }},
         {{ name: "ORDER" data_type: TYPE_INT32 dims: {dims} }} ]
instance_group [ {{ count: {count} kind: KIND_CPU }} ]
{extra}
'''
    return Model(name, config, {"1/model.py": PROBE_PY})


# SEQ: the value to add to the sequence's running sum; answers SUM
SEQ_PY = '''
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for r in requests:
            corrid = int(pb_utils.get_input_tensor_by_name(r, "CORRID").as_numpy().sum())
            if corrid == 0:  # a null request padding a slot (its SEQ is garbage on Triton)
                responses.append(pb_utils.InferenceResponse([
                    pb_utils.Tensor("SUM", np.zeros((1, 1), np.int32))]))
                continue
            value = int(pb_utils.get_input_tensor_by_name(r, "SEQ").as_numpy().sum())
            if value >= 100:  # a blocker: holds the instance for value ms
                time.sleep(value / 1000.0)
            start = int(pb_utils.get_input_tensor_by_name(r, "START").as_numpy().sum())
            total = (0 if start else self.sums.get(corrid, 0)) + value
            self.sums[corrid] = total
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("SUM", np.array([[total]], np.int32))]))
        return responses
'''


def _sequence(name: str, strategy: str, max_batch_size: int = 4) -> Model:
    dims = "[ 1 ]" if max_batch_size else "[ 1, 1 ]"
    config = f'''
name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [ {{ name: "SEQ" data_type: TYPE_INT32 dims: {dims} }} ]
output [ {{ name: "SUM" data_type: TYPE_INT32 dims: {dims} }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
sequence_batching {{
  max_sequence_idle_microseconds: 5000000
  {strategy}
  control_input [
    {{ name: "START" control [ {{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "CORRID" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 }} ] }}
  ]
}}
'''
    return Model(name, config, {"1/model.py": SEQ_PY})


MODELS = [
    _probe("dyn", "dynamic_batching { preferred_batch_size: [ 2, 4 ] "
                  "max_queue_delay_microseconds: 1000000 }"),
    _probe("dyn_short", "dynamic_batching { preferred_batch_size: [ 2, 4 ] "
                        "max_queue_delay_microseconds: 300000 }"),
    _probe("dyn_parallel", "dynamic_batching { max_queue_delay_microseconds: 100000 "
                           "priority_levels: 2 default_priority_level: 2 "
                           "default_queue_policy { timeout_action: DELAY "
                           "default_timeout_microseconds: 200000 } }",
           count=4, max_batch_size=4),
    _probe("dyn_delay_order", "dynamic_batching { priority_levels: 2 "
                              "default_priority_level: 2 default_queue_policy { "
                              "timeout_action: DELAY default_timeout_microseconds: 300000 } }",
           max_batch_size=1),
    _probe("dyn_reject", "dynamic_batching { default_queue_policy { timeout_action: REJECT "
                         "default_timeout_microseconds: 10000000 "
                         "allow_timeout_override: true } }", max_batch_size=1),
    _probe("dyn_no_default", "dynamic_batching { default_queue_policy { "
                             "allow_timeout_override: true } }", max_batch_size=1),
    _probe("plain", ""),
    _probe("plain1", "", max_batch_size=0),
    _sequence("seq_direct", "direct { }"),
    _sequence("seq_direct1", "direct { }", max_batch_size=0),
    _sequence("seq_oldest", "oldest { max_candidate_sequences: 4 }"),
]


@dataclass
class Answer:
    sent_s: float  # when the request was sent, from the scenario's start
    latency_s: float
    batch: int | None = None
    order: int | None = None
    error: str | None = None


class Client:
    def __init__(self, server: RunningServer) -> None:
        self.url = f"127.0.0.1:{server.endpoint.http_port}"
        self.grpc_url = f"127.0.0.1:{server.endpoint.grpc_port}"
        self.metrics_url = f"http://127.0.0.1:{server.endpoint.metrics_port}/metrics"

    def infer(self, model: str, sleep_ms: int = 0, rows: int = 1, *, priority: int = 0,
              timeout_us: int = 0, t0: float = 0.0) -> Answer:
        client = httpclient.InferenceServerClient(self.url, network_timeout=60)
        data = httpclient.InferInput("IN", [rows, 1], "INT32")
        data.set_data_from_numpy(np.full((rows, 1), sleep_ms, np.int32))
        sent = time.monotonic()
        try:
            result = client.infer(model, [data], priority=priority, timeout=timeout_us or None)
        except Exception as exc:  # the server's error, as the client reports it
            return Answer(sent - t0, time.monotonic() - sent, error=str(exc))
        finally:
            client.close()
        return Answer(sent - t0, time.monotonic() - sent,
                      int(result.as_numpy("BATCH")[0, 0]), int(result.as_numpy("ORDER")[0, 0]))

    def statistics(self, model: str) -> dict:
        client = httpclient.InferenceServerClient(self.url)
        try:
            return client.get_inference_statistics(model)["model_stats"][0]["inference_stats"]
        finally:
            client.close()

    def counts(self, model: str) -> dict[str, int]:
        """The statistics' counts and the failure metric by reason, to diff."""
        stats = self.statistics(model)
        counts = {k: v["count"] for k, v in stats.items() if isinstance(v, dict)}
        for line in self.metric_lines(f'nv_inference_request_failure{{model="{model}"'):
            reason = line.split('reason="')[1].split('"')[0]
            counts[reason] = int(float(line.rsplit(" ", 1)[1]))  # "1" (Triton) or "1.0"
        return counts

    def metric_lines(self, needle: str) -> list[str]:
        with urllib.request.urlopen(self.metrics_url, timeout=10) as response:
            text = response.read().decode()
        return [line for line in text.splitlines() if needle in line and
                not line.startswith("#")]


def _concurrently(calls: list[tuple[float, Callable[[float], Answer]]]) -> list[Answer]:
    """Run each call on its own thread, each after its delay (s); answers in call order."""
    answers: list[Answer | None] = [None] * len(calls)
    t0 = time.monotonic()

    def run(index: int, delay: float, call: Callable[[float], Answer]) -> None:
        time.sleep(max(0.0, t0 + delay - time.monotonic()))
        answers[index] = call(t0)

    threads = [threading.Thread(target=run, args=(i, d, c)) for i, (d, c) in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return [a if a is not None else Answer(0, 999, error="no answer") for a in answers]


# -- scenarios: each returns (passed, what it saw) -------------------------------------------
def dyn_preferred_goes_at_once(c: Client) -> tuple[bool, str]:
    answers = _concurrently([(0.0, lambda t0: c.infer("dyn", t0=t0)),
                             (0.05, lambda t0: c.infer("dyn", t0=t0))])
    ok = all(a.batch == 2 and a.latency_s < 0.7 for a in answers)
    return ok, ", ".join(f"batch {a.batch} in {a.latency_s:.2f}s" for a in answers)


def dyn_non_preferred_waits_the_delay(c: Client) -> tuple[bool, str]:
    a = c.infer("dyn")
    return a.batch == 1 and 0.95 <= a.latency_s < 1.8, f"batch {a.batch} in {a.latency_s:.2f}s"


def dyn_past_the_delay_everything_goes(c: Client) -> tuple[bool, str]:
    # two blockers (a preferred batch of 2) hold the one instance for 1 s; three requests
    # queue behind them and are 0.8 s old when it frees, past the 0.3 s delay: all three
    # go in one batch, though 2 (a preferred size) would fit
    m = "dyn_short"
    calls = [(0.0, lambda t0: c.infer(m, 1000, t0=t0)), (0.0, lambda t0: c.infer(m, 1000, t0=t0))]
    calls += [(0.2 + 0.02 * i, lambda t0: c.infer(m, 0, t0=t0)) for i in range(3)]
    answers = _concurrently(calls)
    sizes = [a.batch for a in answers]
    return sizes == [2, 2, 3, 3, 3], f"batch sizes {sizes}"


def dyn_many_instances_parallel(c: Client) -> tuple[bool, str]:
    calls = [(0.0, lambda t0, p=1 + i % 2: c.infer("dyn_parallel", 300, priority=p, t0=t0))
             for i in range(48)]
    answers = _concurrently(calls)
    worst = max(a.latency_s for a in answers)
    errors = [a.error for a in answers if a.error]
    sizes = sorted({a.batch for a in answers if a.batch})
    return (not errors and worst < 3.0,
            f"slowest {worst:.2f}s, batch sizes {sizes}, errors {errors[:1]}")


def dyn_delayed_keep_priority_order(c: Client) -> tuple[bool, str]:
    # the blocker holds the one instance for 1.5 s; late1/late2 pass their 300 ms queue
    # timeout (DELAY) and must run behind the fresh requests of their own level only
    m = "dyn_delay_order"
    calls = [(0.0, lambda t0: c.infer(m, 1500, t0=t0)),
             (0.3, lambda t0: c.infer(m, 0, priority=2, t0=t0)),  # late2
             (0.35, lambda t0: c.infer(m, 0, priority=1, t0=t0)),  # late1
             (1.35, lambda t0: c.infer(m, 0, priority=2, t0=t0)),  # fresh2
             (1.4, lambda t0: c.infer(m, 0, priority=1, t0=t0))]  # fresh1
    answers = _concurrently(calls)
    names = ["blocker", "late2", "late1", "fresh2", "fresh1"]
    ran = [n for _, n in sorted((a.order or 99, n) for a, n in zip(answers, names, strict=True))]
    # Triton 2.51 ran late1, fresh1, late2, fresh2: the level first, whether delayed or not
    ok = set(ran[1:3]) == {"late1", "fresh1"} and set(ran[3:5]) == {"late2", "fresh2"}
    return ok, f"ran {ran}"


def _timed_out(c: Client, m: str, timeout_us: int) -> tuple[Answer, str]:
    calls = [(0.0, lambda t0: c.infer(m, 1000, t0=t0)),
             (0.2, lambda t0: c.infer(m, 0, timeout_us=timeout_us, t0=t0))]
    late = _concurrently(calls)[1]
    stats = c.statistics(m)
    counts = {k: v["count"] for k, v in stats.items() if isinstance(v, dict) and v.get("count")}
    failures = [line.split("reason=")[1] for line in
                c.metric_lines(f'nv_inference_request_failure{{model="{m}"')]
    return late, (f"error {late.error!r} after {late.latency_s:.2f}s; stats {counts}; "
                  f"failures {failures}")


def model_queue_timeout(c: Client) -> tuple[bool, str]:
    # a request's own timeout shortens the level's default (REJECT): answered at once
    late, seen = _timed_out(c, "dyn_reject", 100_000)
    # Triton answers it when its batcher next looks at the queue: once the blocker is done
    ok = (late.error is not None and "Request timeout expired" in late.error
          and late.latency_s < 1.0)
    return ok, seen


def model_queue_no_default_timeout(c: Client) -> tuple[bool, str]:
    # with no default timeout, a request's own timeout does not apply: it runs
    late, seen = _timed_out(c, "dyn_no_default", 100_000)
    return late.error is None and late.latency_s > 0.6, seen


def default_scheduler_timeout(c: Client) -> tuple[bool, str]:
    late, seen = _timed_out(c, "plain", 100_000)
    return late.error is None, seen


def _cancel_queued(c: Client, model: str, sequence: bool, runs: bool) -> tuple[bool, str]:
    """A blocker holds the one instance for 1 s; a request queued behind it over gRPC is
    cancelled 0.2 s later. What the client gets, what is counted: Triton 2.51 runs it
    anyway without a dynamic or sequence batcher (``runs``: counted a success), else it is
    counted a failure, reason CANCELED."""
    def blocker(t0: float) -> Answer:
        client = httpclient.InferenceServerClient(c.url)
        name = "SEQ" if sequence else "IN"
        data = httpclient.InferInput(name, [1, 1], "INT32")
        data.set_data_from_numpy(np.array([[1000]], np.int32))
        extra = {"sequence_id": 41, "sequence_start": True, "sequence_end": True} \
            if sequence else {}
        sent = time.monotonic()
        try:
            client.infer(model, [data], **extra)
            return Answer(sent - t0, time.monotonic() - sent)
        finally:
            client.close()

    got: list = []
    done = threading.Event()

    def cancelled(t0: float) -> Answer:
        client = grpcclient.InferenceServerClient(c.grpc_url)
        name = "SEQ" if sequence else "IN"
        data = grpcclient.InferInput(name, [1, 1], "INT32")
        data.set_data_from_numpy(np.array([[0]], np.int32))
        extra = {"sequence_id": 42, "sequence_start": True} if sequence else {}

        def callback(result, error):
            got.append(error)
            done.set()
        sent = time.monotonic()
        context = client.async_infer(model, [data], callback, **extra)
        time.sleep(0.2)
        context.cancel()
        done.wait(10)
        client.close()
        return Answer(sent - t0, time.monotonic() - sent)

    before = c.counts(model)
    _concurrently([(0.0, blocker), (0.2, cancelled)])
    time.sleep(0.5)
    after = c.counts(model)
    moved = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    error = str(got[0]) if got else "no callback"
    if runs:
        expected = {"success": 2, "queue": 2, "compute_input": 2, "compute_infer": 2,
                    "compute_output": 2}
    else:
        expected = {"success": 1, "fail": 1, "CANCELED": 1, "queue": 1, "compute_input": 1,
                    "compute_infer": 1, "compute_output": 1}
    ok = bool(got) and "CANCELLED" in error.upper() and moved == expected
    return ok, f"client: {error!r}; counted {moved}"


def cancel_queued_default(c: Client) -> tuple[bool, str]:
    return _cancel_queued(c, "plain1", sequence=False, runs=True)


def cancel_queued_dynamic(c: Client) -> tuple[bool, str]:
    return _cancel_queued(c, "dyn_no_default", sequence=False, runs=False)


def cancel_queued_sequence_direct(c: Client) -> tuple[bool, str]:
    return _cancel_queued(c, "seq_direct1", sequence=True, runs=False)


def cancel_queued_sequence_oldest(c: Client) -> tuple[bool, str]:
    return _cancel_queued(c, "seq_oldest", sequence=True, runs=False)


def sequence_backlog_timeout(c: Client) -> tuple[bool, str]:
    """Sequence 51 holds the one slot (1 s execution, then END); sequence 52 waits in the
    backlog with a 100 ms timeout. Triton 2.51 seats and runs it once the slot is free."""
    model = "seq_direct1"

    def send(t0: float, corrid: int, value: int, timeout_us: int = 0) -> Answer:
        client = httpclient.InferenceServerClient(c.url)
        data = httpclient.InferInput("SEQ", [1, 1], "INT32")
        data.set_data_from_numpy(np.array([[value]], np.int32))
        sent = time.monotonic()
        try:
            client.infer(model, [data], sequence_id=corrid, sequence_start=True,
                         sequence_end=True, timeout=timeout_us or None)
            return Answer(sent - t0, time.monotonic() - sent)
        except Exception as exc:
            return Answer(sent - t0, time.monotonic() - sent, error=str(exc))
        finally:
            client.close()

    before = c.counts(model)
    answers = _concurrently([(0.0, lambda t0: send(t0, 51, 1000)),
                             (0.2, lambda t0: send(t0, 52, 1, 100_000))])
    time.sleep(0.3)
    after = c.counts(model)
    moved = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    late = answers[1]
    return (late.error is None and moved.get("success") == 2,
            f"{late.error!r} after {late.latency_s:.2f}s; counted {moved}")


def sequence_direct_oldest(c: Client) -> tuple[bool, str]:
    seen = []
    ok = True
    for model in ("seq_direct", "seq_oldest"):
        client = httpclient.InferenceServerClient(c.url)
        try:
            sums = []
            for step in range(3):
                for corrid in (11, 12, 13):
                    data = httpclient.InferInput("SEQ", [1, 1], "INT32")
                    data.set_data_from_numpy(np.array([[corrid]], np.int32))
                    result = client.infer(model, [data], sequence_id=corrid,
                                          sequence_start=step == 0, sequence_end=step == 2)
                    sums.append(int(result.as_numpy("SUM")[0, 0]))
        finally:
            client.close()
        ok = ok and sums == [11, 12, 13, 22, 24, 26, 33, 36, 39]
        seen.append(f"{model} {sums}")
    return ok, "; ".join(seen)


SCENARIOS = [dyn_preferred_goes_at_once, dyn_non_preferred_waits_the_delay,
             dyn_past_the_delay_everything_goes,
             dyn_many_instances_parallel, dyn_delayed_keep_priority_order,
             model_queue_timeout, model_queue_no_default_timeout, default_scheduler_timeout,
             sequence_direct_oldest, sequence_backlog_timeout, cancel_queued_default,
             cancel_queued_dynamic,
             cancel_queued_sequence_direct, cancel_queued_sequence_oldest]


def run(kind_name: str, bench: Path, only: list[str]) -> dict[str, tuple[bool, str]]:
    kind = triton_paths(bench) if kind_name == "triton" else infercore_kind()
    server = start_server(Suite("qa_schedulers", "schedulers", MODELS), kind)
    results = {}
    try:
        client = Client(server)
        for scenario in SCENARIOS:
            if only and scenario.__name__ not in only:
                continue
            try:
                results[scenario.__name__] = scenario(client)
            except Exception as exc:
                results[scenario.__name__] = (False, f"raised {exc!r}")
            passed, seen = results[scenario.__name__]
            print(f"{kind_name:9} {'PASS' if passed else 'FAIL'} {scenario.__name__}: {seen}",
                  flush=True)
    finally:
        server.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", type=Path, default=Path("/tmp/bench"))
    parser.add_argument("--server", choices=("triton", "infercore", "both"), default="both")
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    kinds = ("triton", "infercore") if args.server == "both" else (args.server,)
    results = {kind: run(kind, args.bench, args.only) for kind in kinds}
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    failed = [f"{k}:{n}" for k, r in results.items() for n, (ok, _) in r.items() if not ok]
    print("all passed" if not failed else f"failed: {', '.join(failed)}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
