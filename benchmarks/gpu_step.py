# SPDX-License-Identifier: Apache-2.0
"""The recorder on an accelerator, at a real model's shape (``make bench-gpu``).

What a user on a GPU cluster asks first, measured against a training step of a
model of a real shape rather than the CPU demo's few milliseconds:

- ``gpu_stage_digests_vs_train_step[SHAPE]``: the stage digests (areal-debug's
  own ``StageLog``, taken where the stage probes take them: the recomputed
  log-probs and advantages per trajectory, each micro-batch's loss, per
  mini-batch the gradients before clipping and the weights after the optimizer
  step, then the step's one transfer to the host) over the training step;
- ``gpu_layer_digests_vs_train_step[SHAPE]``: the layer digests
  (``debug.layer_digests``: each decoder layer's norms, attention, MLP and
  output, the final norm and the logits, per sequence) in the recomputed
  log-probs' forward pass, over the training step (without them);
- ``gpu_recorder_blocking_vs_train_step[SHAPE]``: the time the training thread
  spends handing the step's rollout batch, on the device, to the recorder
  (``RecordingWriter.submit_batch``: the device-to-host copy included) over the
  training step;
- ``gpu_writer_seconds_per_step_vs_train_step[SHAPE]``: the writer's time to
  store that step (serialise, compress, hash, write, fsync), from the hand-over
  until it is on disk, over the training step: below 1 the writer keeps up.

The model is a Qwen2 causal LM built from a config (randomly initialised:
nothing is downloaded), bf16 on a GPU. The training step is what AReaL's PPO
actor does: recompute the log-probs (no grad), then per mini-batch forward and
backward passes over its micro-batches, gradient clipping and AdamW. Digest
calls are timed between device synchronisations, so their kernels are theirs;
the training time is the step's wall time less theirs. A warm-up step is
dropped; each figure is the median over the measured steps.

Shapes: ``qwen2.5-1.5b`` (Qwen/Qwen2.5-1.5B's config.json; 512 x 2048 tokens a
step, the default on a GPU) and ``small`` (a few layers and 16 x 256 tokens: the
default on CPU, where ``make test`` runs it to keep the script working).

    python3 benchmarks/gpu_step.py [--shape qwen2.5-1.5b|small] [--runs 3]

Needs PyTorch and transformers; this package and zstandard can travel as wheels.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from dump_overhead import new_writer, rlvr_batch  # noqa: E402
from figures import (  # noqa: E402
    deciding_figure,
    emit,
    exit_status,
    median_figure,
    repeat,
)

from areal_debug.stages.digest import digest_pairs, sums_of_squares  # noqa: E402
from areal_debug.stages.layers import LayerDigests  # noqa: E402
from areal_debug.stages.names import mini_batch_name, trajectory_name  # noqa: E402
from areal_debug.stages.stage_log import StageLog  # noqa: E402


@dataclass(frozen=True)
class Shape:
    config: dict  # Qwen2Config's arguments
    sequences: int  # a step's sequences (prompts x samples)
    seqlen: int  # tokens each
    micro_batch: int  # sequences per forward/backward pass
    mini_batches: int  # optimizer steps per training step


SHAPES = {
    # Qwen/Qwen2.5-1.5B config.json; a step of 128 prompts x 4 samples of 2048
    # tokens (the 512 x 2048), 4 mini-batches as in AReaL's GSM8K GRPO.
    # 4 sequences a micro-batch keep the float32 log-softmax over the 151,936-word
    # vocabulary near 5 GiB.
    "qwen2.5-1.5b": Shape(
        dict(
            vocab_size=151936,
            hidden_size=1536,
            intermediate_size=8960,
            num_hidden_layers=28,
            num_attention_heads=12,
            num_key_value_heads=2,
            max_position_embeddings=32768,
            rope_theta=1000000.0,
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
        ),
        sequences=512,
        seqlen=2048,
        micro_batch=4,
        mini_batches=4,
    ),
    "small": Shape(
        dict(
            vocab_size=4096,
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=1024,
            tie_word_embeddings=True,
        ),
        sequences=16,
        seqlen=256,
        micro_batch=4,
        mini_batches=2,
    ),
}
DIGEST_TARGET = 0.01  # as the CPU figure (benchmarks/stage_digest_cost.py)
# debug.layer_digests is on by default in dump runs where it costs at most this
# of a GPU step (issue 59); else for pinned steps only.
LAYERS_TARGET = 0.01
# A hand-over the training step does not notice: half a percent of it.
BLOCKING_TARGET = 0.005
# The writer must keep up with training, with room for a slower disk or a
# larger batch: half a step.
WRITER_TARGET = 0.5


class Device:
    def __init__(self, name: str):
        self.name = name
        self.cuda = name.startswith("cuda")

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def describe(self) -> str:
        if self.cuda:
            return torch.cuda.get_device_name(self.name)
        return f"CPU ({torch.get_num_threads()} thread(s))"


class TimedLayerDigests(LayerDigests):
    """The layer digests (stages/layers.py) as the actor's log-prob pass takes
    them, each hook timed between device synchronisations: ``seconds``."""

    def __init__(self, log: StageLog, data, sync: Callable[[], None]):
        super().__init__(log, data)
        self.sync, self.seconds = sync, 0.0

    def _timed(self, hook: Callable) -> Callable:
        def timed(*args) -> None:
            self.sync()
            t0 = time.perf_counter()
            hook(*args)
            self.sync()
            self.seconds += time.perf_counter() - t0

        return timed

    def _inputs(self, module, args, kwargs) -> None:
        self._timed(super()._inputs)(module, args, kwargs)

    def _output(self, name: str):
        return self._timed(super()._output(name))


def layer_digested(model, log: StageLog, ids: torch.Tensor, sync, forward):
    """``forward()`` with ``model``'s layers digested per row of ``ids`` (one
    trajectory of ``len(ids)`` samples); the digests' seconds."""
    layers = TimedLayerDigests(log, [{"input_ids": ids}], sync)
    with layers.hooked(model):
        forward()
    if layers.error is not None:
        raise SystemExit(f"the layer digests failed: {layers.error}")
    return layers.seconds


class ModelStep:
    """One PPO step of a Qwen2-shaped model on a fixed batch, digested."""

    def __init__(self, shape: Shape, device: Device, seed: int = 0):
        from transformers import Qwen2Config, Qwen2ForCausalLM

        torch.manual_seed(seed)
        self.shape, self.device = shape, device
        dtype = torch.bfloat16 if device.cuda else torch.float32
        cfg = Qwen2Config(**shape.config, torch_dtype=dtype)
        # Initialised where it will train: a 1.5B model's random init on the
        # host would take longer than a step.
        with torch.device(device.name):
            self.model = Qwen2ForCausalLM(cfg).to(dtype=dtype)
        self.model.train()
        self.ids = torch.randint(
            4, cfg.vocab_size, (shape.sequences, shape.seqlen), device=device.name
        )
        self.rewards = torch.rand(shape.sequences, device=device.name)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-6)
        self.params = list(self.model.named_parameters())
        self.digest_s = 0.0
        self.layers_s = 0.0
        self.by_stage: dict[str, float] = {}
        self.bytes_by_stage: dict[str, int] = {}

    def _digest(self, add: Callable[[], None], stage: str, read: int = 0) -> None:
        """Run one digest call, timed between device synchronisations; ``read``:
        the bytes of the tensors it digests (each read once at the least)."""
        self.device.sync()
        t0 = time.perf_counter()
        add()
        self.device.sync()
        took = time.perf_counter() - t0
        self.digest_s += took
        self.by_stage[stage] = self.by_stage.get(stage, 0.0) + took
        self.bytes_by_stage[stage] = self.bytes_by_stage.get(stage, 0) + read

    def _logp(self, ids: torch.Tensor) -> torch.Tensor:
        logits = self.model(input_ids=ids).logits[:, :-1].float()
        return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]

    def run(self) -> tuple[float, float]:
        """(training seconds, digest seconds) of one step."""
        s, log = self.shape, StageLog()
        self.digest_s, self.by_stage, self.bytes_by_stage = 0.0, {}, {}
        self.device.sync()
        t0 = time.perf_counter()
        parts: list[torch.Tensor] = []

        def recompute() -> None:
            for i in range(0, s.sequences, s.micro_batch):
                parts.append(self._logp(self.ids[i : i + s.micro_batch]))

        with torch.no_grad():
            # The layers as debug.layer_digests takes them, timed apart: the
            # stage digests' figure is without them.
            self.layers_s = layer_digested(
                self.model, StageLog(), self.ids, self.device.sync, recompute
            )
        old = torch.cat(parts)
        rows = [(trajectory_name(i), t, 0) for i, t in enumerate(old)]
        self._digest(lambda: log.add_many("logp", rows), "logp", _size(old))
        adv = (self.rewards - self.rewards.mean()) / (self.rewards.std() + 1e-6)
        advantages = adv[:, None].expand_as(old).contiguous()
        rows = [(trajectory_name(i), t, 0) for i, t in enumerate(advantages)]
        self._digest(
            lambda: log.add_many("advantages", rows), "advantages", _size(advantages)
        )
        per_mb = s.sequences // s.mini_batches
        for mb in range(s.mini_batches):
            for i in range(mb * per_mb, (mb + 1) * per_mb, s.micro_batch):
                part = slice(i, i + s.micro_batch)
                ratio = torch.exp(self._logp(self.ids[part]) - old[part])
                a = advantages[part]
                loss = -torch.min(ratio * a, ratio.clamp(0.8, 1.2) * a).mean()
                name = mini_batch_name(mb, f"micro-batch {i}")
                self._digest(
                    lambda: log.add("loss", name, loss.detach(), value=True),
                    "loss",
                    _size(loss),
                )
                (loss * s.micro_batch / per_mb).backward()
            grads = [(mini_batch_name(mb, n), p.grad, 0) for n, p in self.params]
            self._digest(
                lambda: log.add_many("grads", grads, norm=True),
                "grads",
                sum(_size(g) for _, g, _ in grads),
            )
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            weights = [(mini_batch_name(mb, n), p, 0) for n, p in self.params]
            self._digest(
                lambda: log.add_many("weights", weights),
                "weights",
                sum(_size(w) for _, w, _ in weights),
            )
        self._digest(log.to_host, "to host")
        self.device.sync()
        wall = time.perf_counter() - t0
        return wall - self.digest_s - self.layers_s, self.digest_s


def _size(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _amount(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.2f} MiB"


def copy_rate(device: Device) -> float:
    """Bytes a second the device reads in its own copy (``dst.copy_(src)``, each
    byte read once and written once): the speed a digest reading each byte once
    would reach at best. A buffer far larger than any cache, best of five."""
    n = (1 << 30) if device.cuda else (64 << 20)
    src = torch.empty(n, dtype=torch.uint8, device=device.name).random_(256)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(6):  # the first is a warm-up
        device.sync()
        t0 = time.perf_counter()
        dst.copy_(src)
        device.sync()
        best = min(best, time.perf_counter() - t0)
    return n / best


def digest_rates(step: ModelStep, copy: float) -> str:
    """The stage digests' read rate (bytes digested over their seconds) as a share
    of the device's copy rate, in all and per stage: how far the digests are from
    a single read of what they digest."""
    parts = []
    for stage, seconds in step.by_stage.items():
        read = step.bytes_by_stage.get(stage, 0)
        if read and seconds > 0:
            parts.append(
                f"{stage} {_amount(read)} in {seconds * 1e3:.1f} ms "
                f"({read / seconds / copy:.3g})"
            )
    read = sum(step.bytes_by_stage.values())
    return (
        f"the stage digests read {_amount(read)} a step at "
        f"{_amount(read / step.digest_s)}/s: {read / step.digest_s / copy:.3g} "
        f"of the device's copy rate ({_amount(copy)}/s, measured here), "
        f"a single read would take {read / copy * 1e3:.1f} ms of their "
        f"{step.digest_s * 1e3:.1f} ms; by stage: {', '.join(parts)}"
    )


def device_batch(shape: Shape, device: Device) -> list[dict]:
    """The step's rollout batch as AReaL's trainer holds it: on the device."""
    group = 4
    host = rlvr_batch(shape.sequences // group, group, shape.seqlen)
    return [{k: v.to(device.name) for k, v in t.items()} for t in host]


def record_step(path: str, step: int, batch: list[dict], device: Device):
    """(seconds the training thread blocks handing ``batch`` over, seconds
    until the writer has it on disk) for one step of a fresh recording."""
    writer = new_writer(path, step + 1, clone=False)
    try:
        device.sync()
        t0 = time.perf_counter()
        writer.submit_batch(step, batch)
        blocked = time.perf_counter() - t0
        writer.flush()
        stored = time.perf_counter() - t0
    finally:
        writer.close()
    return blocked, stored


def digests_match_the_cpus(step: ModelStep, batch: list[dict]) -> str:
    """A check before any figure: the device's digests of the model's weights and
    the rollout batch (row sums in blocks, chunks, wrap-around) are the CPU's,
    bit for bit, and its sums of squares agree. A fast digest that differs
    would make every recording on that device unreplayable elsewhere."""
    # The first 40 parameters (the embedding, larger than a chunk, and the first
    # layers, grouped) and the whole batch: the CPU's digests take seconds.
    params = [p for _, p in step.params[:40]]
    tensors = params + [v for t in batch for v in t.values()]
    offsets = [i * 7 for i in range(len(tensors))]
    here = digest_pairs(tensors, offsets).cpu()
    there = digest_pairs([t.cpu() for t in tensors], offsets)
    if not torch.equal(here, there):
        bad = int((here != there).any(1).nonzero()[0])
        raise SystemExit(f"digest of tensor {bad} on {step.device.name} differs")
    sq = sums_of_squares([p.grad for _, p in step.params[:8]])
    sq_cpu = sums_of_squares([p.grad.cpu() for _, p in step.params[:8]])
    # float32 accumulation on an accelerator (sums_of_squares), float64 here.
    if not torch.allclose(sq.cpu(), sq_cpu, rtol=1e-5, atol=0):
        raise SystemExit(f"sums of squares on {step.device.name} differ")
    return f"{len(tensors)} tensors' digests equal the CPU's"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default=None)
    ap.add_argument("--runs", type=int, default=3, help="measured steps")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args(argv)
    device = Device(args.device)
    shape_name = args.shape or ("qwen2.5-1.5b" if device.cuda else "small")
    shape = SHAPES[shape_name]
    copy = copy_rate(device)  # before the model takes the device's memory
    step = ModelStep(shape, device)
    params = sum(p.numel() for _, p in step.params)
    batch = device_batch(shape, device)
    mib = sum(v.numel() * v.element_size() for t in batch for v in t.values()) / 2**20
    with tempfile.TemporaryDirectory() as tmp:

        def measure(i: int) -> tuple[float, float, float, float, float]:
            train, digest = step.run()
            blocked, stored = record_step(os.path.join(tmp, f"r{i}"), i, batch, device)
            stage_ms = step.by_stage.items()
            # The peak says how much room the shape leaves on a smaller card.
            peak = (
                f", peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB allocated"
                if device.cuda
                else ""
            )
            # One line a step, so that a run stopped at a lent machine's time
            # limit still says how far it got and what each step took.
            print(
                f"#   step {i}{' (warm-up)' if i == 0 else ''}: training "
                f"{train:.2f} s, digests {digest * 1e3:.1f} ms, layer digests "
                f"{step.layers_s * 1e3:.1f} ms, hand-over "
                f"{blocked * 1e3:.1f} ms, stored in {stored:.2f} s; digests by "
                f"stage: {', '.join(f'{k} {v * 1e3:.1f} ms' for k, v in stage_ms)}{peak}",
                flush=True,
            )
            return train, digest, blocked, stored, step.layers_s

        runs = repeat(measure, args.runs)
    # The last step's: every step digests the same bytes.
    print(f"# {digest_rates(step, copy)}", flush=True)
    # Gradients for the check (each mini-batch's optimizer step drops its own).
    step.model(input_ids=step.ids[:1]).logits.float().mean().backward()
    print(f"# {digests_match_the_cpus(step, batch)}", flush=True)
    train = statistics.median(r[0] for r in runs)
    print(
        f"# {device.describe()}: {shape_name}, {params / 1e6:.1f}M params, "
        f"{shape.sequences} x {shape.seqlen} tokens a step, "
        f"{shape.mini_batches} mini-batches; training {train:.2f} s a step, "
        f"digests {statistics.median(r[1] for r in runs) * 1e3:.1f} ms; the "
        f"rollout batch {mib:.1f} MiB on the device: hand-over "
        f"{statistics.median(r[2] for r in runs) * 1e3:.1f} ms, stored in "
        f"{statistics.median(r[3] for r in runs):.2f} s (medians)"
    )
    lines = [
        median_figure(
            f"gpu_stage_digests_vs_train_step[{shape_name}]",
            [d / t for t, d, *_ in runs],
            "<=",
            DIGEST_TARGET,
        ),
        median_figure(
            f"gpu_recorder_blocking_vs_train_step[{shape_name}]",
            [b / t for t, _, b, *_ in runs],
            "<=",
            BLOCKING_TARGET,
        ),
        median_figure(
            f"gpu_writer_seconds_per_step_vs_train_step[{shape_name}]",
            [w / t for t, _, _, w, _ in runs],
            "<=",
            WRITER_TARGET,
        ),
        # Decides debug.layer_digests' default on a GPU; not a target to meet.
        deciding_figure(
            f"gpu_layer_digests_vs_train_step[{shape_name}]",
            [la / t for t, *_, la in runs],
            "<=",
            LAYERS_TARGET,
            "debug.layer_digests' default",
            "true",
            "pinned",
        ),
    ]
    for line in lines:
        emit(line)
    return exit_status()


if __name__ == "__main__":
    raise SystemExit(main())
