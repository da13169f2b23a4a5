# SPDX-License-Identifier: Apache-2.0
"""Single-controller dump: how long does fetching the batch block the training thread?

In single-controller mode the rollout controller returns RTensors: references to
tensors held by the rollout workers. The dump fetches them (AReaL's own HTTP
RTensor backend) into fresh tensors. This starts a real AReaL storage node (the
``/data`` blueprint of its RPC workers) in another process, stores a realistic
RLVR batch there (default 128 prompts x 4 samples x 2048 tokens), and times, in
each repetition back to back (in alternating order; a warm-up repetition is
dropped):

- a synchronous fetch on the training thread (what the dump would cost if it
  fetched inline);
- a training step alone: real CPU work (float32 matrix products with Python
  between them, about ``--step-seconds`` long) in a train-worker process, the
  controller's thread waiting for it, as it waits for AReaL's train workers;
- the same step with areal-debug's ``BatchFetcher``: handing the batch over,
  the step running while the fetch does, then waiting for the fetch to be done
  (AReaL's clear_batches at step end must not drop the shards sooner).

The figure is the median over the repetitions of the step's extra time (the
step with the fetch, hand-over and wait included, minus the step alone) against
the synchronous fetch: what the background fetch still costs the step, the CPU
it takes from a worker on the same host included (a step that only slept would
hide it).

    .venv/bin/python benchmarks/fetch_overhead.py [--prompts 128] [--step-seconds 2]
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid

import orjson
import torch
from areal.infra.rpc.rtensor import RTensor, TensorShardInfo
from areal.infra.rpc.serialization import serialize_value

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dump_overhead import rlvr_batch  # noqa: E402
from figures import emit, exit_status, median_figure, paired, repeat  # noqa: E402

from areal_debug.single_controller.rtensor_bridge import (  # noqa: E402
    BatchFetcher,
    localized_copy,
)

NODE = """
import sys
from flask import Flask
from areal.infra.rpc.guard.data_blueprint import data_bp
app = Flask("storage")
app.register_blueprint(data_bp)
app.run(host="127.0.0.1", port=int(sys.argv[1]), threaded=True)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_node() -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", NODE, str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    addr = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://{addr}/data/none", timeout=2)
        except urllib.error.HTTPError:
            return proc, addr  # a 404 for an unknown shard: the node is up
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the storage node did not start")


def remotize(batch: list[dict], addr: str) -> list[dict]:
    """Store every tensor on the node, as a rollout worker does; return RTensors."""
    out = []
    for traj in batch:
        refs = {}
        for key, tensor in traj.items():
            sid = uuid.uuid4().hex
            body = orjson.dumps(serialize_value(tensor))
            req = urllib.request.Request(
                f"http://{addr}/data/{sid}", data=body, method="PUT"
            )
            urllib.request.urlopen(req).read()
            shard = TensorShardInfo(shard_id=sid, node_addr=addr)
            refs[key] = RTensor(shard=shard, data=tensor.to("meta"))
        out.append(refs)
    return out


# A train worker: each line read is a training step of that many seconds of
# compute (float32 matrix products with Python between them), answered when done.
WORKER = """
import sys, time, torch
work = torch.randn(384, 384)
def run(n):
    x = work
    for _ in range(n):
        x = torch.tanh(x @ work)
run(3)
t0 = time.perf_counter(); run(20); per = (time.perf_counter() - t0) / 20
for line in sys.stdin:
    run(max(1, round(float(line) / per)))
    print("done", flush=True)
"""


class TrainWorker:
    """The step runs in another process, as AReaL's train workers do in
    single-controller mode; the controller's thread waits for it, as it waits
    for their RPCs, while the fetch runs on its background thread."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def step(self) -> None:
        self.proc.stdin.write(f"{self.seconds}\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "done"

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--prompts", type=int, default=128)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--seqlen", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=15, help="paired repetitions")
    ap.add_argument(
        "--step-seconds",
        type=float,
        default=2.0,
        help="the training step's compute between prepare_batch and clear_batches",
    )
    args = ap.parse_args()

    batch = rlvr_batch(args.prompts, args.group, args.seqlen)
    nbytes = sum(v.numel() * v.element_size() for t in batch for v in t.values())
    node, addr = start_node()
    worker = None
    try:
        remote = remotize(batch, addr)
        fetcher = BatchFetcher()

        def inline() -> float:
            t0 = time.perf_counter()
            fetched = localized_copy(remote)
            took = time.perf_counter() - t0
            assert torch.equal(fetched[0]["input_ids"], batch[0]["input_ids"])
            return took

        worker = TrainWorker(args.step_seconds)

        def step() -> float:
            t0 = time.perf_counter()
            worker.step()
            return time.perf_counter() - t0

        def background() -> tuple[float, float, float]:
            t0 = time.perf_counter()
            future = fetcher.submit(remote)
            handover = time.perf_counter() - t0
            worker.step()  # the training step runs meanwhile
            t1 = time.perf_counter()
            fetcher.wait()
            waited = time.perf_counter() - t1
            total = time.perf_counter() - t0
            assert torch.equal(future.result()[0]["logprobs"], batch[0]["logprobs"])
            return total, handover, waited

        def measure(i: int):
            sync, (alone, with_fetch) = paired(
                i, inline, lambda: paired(i, step, background)
            )
            return sync, alone, with_fetch

        pairs = repeat(measure, args.steps)
        fetcher.close()
    finally:
        if worker is not None:
            worker.close()
        node.kill()
        node.wait()

    sync = statistics.median(s for s, _, _ in pairs)
    alone = statistics.median(a for _, a, _ in pairs)
    total = statistics.median(t for _, _, (t, _, _) in pairs)
    handover = statistics.median(h for _, _, (_, h, _) in pairs)
    waited = statistics.median(w for _, _, (_, _, w) in pairs)
    print(
        f"# batch: {args.prompts * args.group} sequences x {args.seqlen} tokens, "
        f"{nbytes / 2**20:.1f} MiB of tensors in {len(remote) * len(remote[0])} "
        f"RTensors, {args.steps} repetitions (medians), {torch.get_num_threads()} "
        "PyTorch thread(s)"
    )
    print(f"# synchronous fetch on the training thread: {sync * 1e3:.1f} ms")
    print(
        f"# training step alone: {alone * 1e3:.1f} ms; with BatchFetcher: "
        f"{total * 1e3:.1f} ms (handing over {handover * 1e3:.2f} ms, waiting at "
        f"step end {waited * 1e3:.2f} ms)"
    )
    emit(
        median_figure(
            "sc_fetch_blocking_vs_sync_fetch",
            [max(0.0, t - a) / s for s, a, (t, _, _) in pairs],
            "<=",
            0.10,
        )
    )
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
