# SPDX-License-Identifier: Apache-2.0
"""What sits in the inference engine's place: a recording wrapper or a replay engine.

AReaL's data-parallel heads call ``rollout_engine.prepare_batch(dataloader, ...)``
(``areal/infra/dist_rollout.py``) and only then gather and redistribute the
trajectories. Hooking here records each head's batch in generation order, and
replaying here feeds AReaL's redistribution exactly what it saw in the dump run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

from areal_debug import areal_compat
from areal_debug.logs import get_logger
from areal_debug.modes.replay_loader import ReplayDataLoader
from areal_debug.recording.format import RecordingError
from areal_debug.recording.reader import RecordingReader

logger = get_logger("DebugReplay")

Batch = list[dict[str, Any]]


class RolloutFailures:
    """The inference engine's refusals, by the step whose rollouts they failed.

    AReaL's workflow executor logs a rollout whose ``agenerate`` raised and rejects
    it; the step trains on the rollouts that did not fail, and the recording would
    show nothing of them. AReaL main refuses a NaN log-prob that way
    (``HttpGenerationResult``, PR #1554), where 1.0.4 put it in the batch.
    """

    def __init__(self, step_of: Callable[[], int]):
        self._step_of = step_of
        self._lock = threading.Lock()
        self._failed: list[tuple[int, str]] = []
        self.watched: Any = None

    def watch(self, engine: Any, patches) -> None:
        """Note each exception of ``engine.agenerate`` (then raised on)."""
        areal_compat.note_agenerate_failures(
            engine, patches, lambda text: self.note(self._step_of(), text)
        )
        self.watched = engine

    def note(self, step: int, text: str) -> None:
        """A failed request of ``step`` (the watched engine's, or one a
        single-controller rollout worker reported)."""
        with self._lock:
            self._failed.append((step, text))

    def reasons(self, step: int) -> list[str]:
        """Why ``step`` is anomalous: the failures up to it, then forgotten."""
        with self._lock:
            mine = [text for s, text in self._failed if s <= step]
            self._failed = [(s, text) for s, text in self._failed if s > step]
        if not mine:
            return []
        return [
            f"{len(mine)} rollout request(s) failed in the inference engine and their "
            f"rollouts were rejected; the first: {mine[0]}"
        ]


class RecordingEngine:
    """Delegates everything to the real engine; hands each returned batch to
    ``on_batch``; with ``failures``, notes each request its workflows fail on."""

    def __init__(
        self,
        engine: Any,
        on_batch: Callable[[Batch], None],
        failures: RolloutFailures | None = None,
        patches=None,
    ):
        # object.__setattr__ keeps these off the wrapped engine.
        object.__setattr__(self, "_engine", engine)
        object.__setattr__(self, "_on_batch", on_batch)
        object.__setattr__(self, "_failures", failures)
        object.__setattr__(self, "_patches", patches)

    def _watch(self) -> None:
        # The executor exists once the engine is initialised, after it was built.
        target = areal_compat.workflow_engine(self._engine)
        if self._failures is not None and target is not None:
            if self._failures.watched is not target:
                self._failures.watch(target, self._patches)

    def prepare_batch(self, *args, **kwargs) -> Batch:
        self._watch()
        batch = self._engine.prepare_batch(*args, **kwargs)
        self._on_batch(batch)
        return batch

    def rollout_batch(self, *args, **kwargs) -> Batch:
        self._watch()
        batch = self._engine.rollout_batch(*args, **kwargs)
        self._on_batch(batch)
        return batch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._engine, name, value)


def _done_future(result: Any = None) -> Future:
    fut: Future = Future()
    fut.set_result(result)
    return fut


class ReplayEngine:
    """Stands in for AReaL's inference engine in replay mode.

    ``prepare_batch`` returns this head's next recorded batch; everything else
    AReaL calls on an engine during training is a no-op. The workflow passed in
    is accepted and never run. It implements AReaL's ``InferenceEngine``
    (``areal_compat.inference_engine_interface``) without subclassing it; the
    contract test checks every method against it and AReaL's calls.
    """

    def __init__(
        self,
        loader: ReplayDataLoader,
        transform: Callable[[Batch], Batch] | None = None,
    ):
        self.loader = loader
        # How a recorded batch is presented (single-controller: as RTensors).
        self._transform = transform
        self._batches: Iterator[Batch] | None = None
        # The recorded step of the last batch served, until the trainer checks it.
        self._served: int | None = None
        self._version = 0
        self._initialized = False
        # PPOTrainer syncs the staleness manager after a recover; there is none.
        self.workflow_executor = SimpleNamespace(staleness_manager=None)
        self.staleness_manager = None
        # Single-controller train workers are given a callback address for
        # weight updates; replay skips those, so nothing ever calls it.
        self.callback_addr = "areal-debug-replay-has-no-inference-engine:0"

    # -- batches -----------------------------------------------------------------
    def prepare_batch(self, dataloader: Any = None, *args, **kwargs) -> Batch:
        if dataloader is not None and dataloader is not self.loader:
            raise TypeError(
                "In replay mode prepare_batch must be given the trainer's "
                f"ReplayDataLoader, got a {type(dataloader).__name__}. Pass "
                "trainer.train_dataloader, as PPOTrainer.train does."
            )
        if self._batches is None:
            self._batches = self._cycle()
        batch = next(self._batches)
        self._served = self.loader.next_step - 1
        return self._transform(batch) if self._transform is not None else batch

    def rollout_batch(self, data: Any = None, *args, **kwargs) -> Batch:
        # The recorded batch stands for whatever data the script passes.
        return self.prepare_batch()

    def take_served_step(self) -> int | None:
        """The recorded step served since the last call (None if none)."""
        served, self._served = self._served, None
        return served

    def _cycle(self) -> Iterator[Batch]:
        while True:
            yield from self.loader

    # -- engine life cycle and weight sync: nothing to do ------------------------
    def initialize(self, *args, **kwargs) -> None:
        logger.info(
            f"Replay engine in place of the inference engine: recording "
            f"{self.loader.reader.path}, data-parallel head "
            f"{self.loader.dp_rank + 1}/{self.loader.dp_size}."
        )
        self._initialized = True

    @property
    def initialized(self) -> bool:
        return self._initialized

    def destroy(self) -> None:
        pass

    def pause(self) -> None:
        pass

    def resume(self) -> None:
        pass

    def pause_generation(self) -> None:
        pass

    # AReaL main's colocated weight transfer (weight_update_mode awex) pauses
    # generation synchronously and offloads the KV cache and weights by tag.
    def pause_generation_sync(self, *args, **kwargs) -> None:
        pass

    def continue_generation(self) -> None:
        pass

    # AReaL after cbff54d (#1738): the AWEX hand-off discards paused requests
    # after a weight update; MOPD routes teacher scoring through the controller;
    # the trainer clears the rollout side's batches after a step. Nothing to
    # discard, route or clear in a replay.
    def abort_all_requests(self, *args, **kwargs) -> None:
        pass

    def enable_mopd_routing(self, *args, **kwargs) -> None:
        pass

    def clear_batches(self, *args, **kwargs) -> None:
        pass

    # A parameter literally named ``tags``: AReaL's RecoverHandler checks for it
    # (inspect.signature) before colocated AWEX recovery and refuses an engine
    # whose offload takes only *args (areal/utils/recover.py on main).
    def offload(self, tags: list[str] | None = None, **kwargs) -> None:
        pass

    def onload(self, tags: list[str] | None = None, **kwargs) -> None:
        pass

    def set_version(self, version: int) -> None:
        self._version = version

    def get_version(self) -> int:
        return self._version

    def export_stats(self) -> dict[str, float]:
        return {}

    def config_perf_tracer(self, *args, **kwargs) -> None:
        pass

    def save_perf_tracer(self, *args, **kwargs) -> None:
        pass

    def update_weights_from_disk(self, *args, **kwargs) -> Future:
        return _done_future()

    def update_weights_from_distributed(self, *args, **kwargs) -> Future:
        return _done_future()

    def init_weights_update_group(self, *args, **kwargs) -> Future:
        return _done_future()

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"The replay engine has no '{name}': in replay mode no inference engine "
            f"exists. If your script calls trainer.rollout.{name} itself, guard "
            "that call with `if not config.debug.replay_rollout_data`."
        )


class ReplayTeacher:
    """Stands in for a teacher served as an inference engine in replay mode:
    ``compute_logp`` returns the log-probs the dump run's teacher computed for the
    step's batch, so a distillation run replays with no teacher server.
    Like ReplayEngine, checked against AReaL's ``InferenceEngine``."""

    def __init__(
        self,
        reader: RecordingReader,
        current_step: Callable[[], int | None],
        transform: Callable[[list], list] | None = None,
    ):
        self.reader = reader
        self._current_step = current_step
        # How recorded tensors are presented (single-controller: as RTensors).
        self._transform = transform

    def compute_logp(self, data: Batch) -> list:
        step = self._current_step()
        logps = self.reader.recorded_teacher_logp(step)
        if len(logps) != len(data):
            raise RecordingError(
                f"The recording holds teacher log-probs of {len(logps)} trajectories "
                f"for step {step}, but the replayed batch has {len(data)}. Teacher "
                "log-probs replay on the dump run's layout (single-controller mode); "
                "replay in that mode, or without the teacher (teacher=null)."
            )
        return self._transform(logps) if self._transform is not None else logps

    # Nothing to start, offload, or end.
    def initialize(self, *args, **kwargs) -> None:
        pass

    @property
    def initialized(self) -> bool:
        return True

    def destroy(self) -> None:
        pass

    def offload(self, tags: list[str] | None = None, **kwargs) -> None:
        pass

    def onload(self, tags: list[str] | None = None, **kwargs) -> None:
        pass
