# SPDX-License-Identifier: Apache-2.0
"""A fault the CPU server can inject: sampling log-probs reported off by a chosen
amount (or NaN), at a chosen weight version, so a test or the demo can plant a
training-inference mismatch at one step of a real run.

    --logprob-fault 'version=2,offset=4,share=0.25'   # or the env variable

The server never sees AReaL's step; it counts the weight updates it has loaded
(its ``weight_version``, in each response's ``meta_info`` and in
``/get_model_info``). In a fresh run with ``rollout.max_head_offpolicyness: 0``
step K's rollouts are all generated after exactly K updates, so version K is
step K. With more off-policyness, version K's requests serve steps K to K+eta;
a resumed run's server counts from its own start. A request counter would not
do: requests per step vary with group size, eval, retries and rejections.

Only the reported log-probs change: which tokens are hit is drawn from an RNG of
its own, so the sampled tokens are those of the same run without the fault.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, fields

#: Read when the server is started without ``--logprob-fault``.
ENV = "AREAL_DEBUG_CPU_SERVER_LOGPROB_FAULT"


@dataclass(frozen=True)
class LogprobFault:
    first: int = field(
        metadata={"help": "version=K: the first weight version hit (step K)."}
    )
    last: int | None = field(
        metadata={"help": "version=K (K alone), K-L, or K- (every version from K)."}
    )
    offset: float = field(
        default=0.0,
        metadata={"help": "offset=X: nats added to each hit token's log-prob."},
    )
    share: float = field(
        default=1.0,
        metadata={"help": "share=P: the fraction of generated tokens hit, in (0, 1]."},
    )
    nan: bool = field(
        default=False,
        metadata={"help": "nan=true: report NaN instead of the shifted log-prob."},
    )
    seed: int = field(
        default=0,
        metadata={"help": "seed=S: the RNG that picks the hit tokens (share < 1)."},
    )

    def hits(self, version: int) -> bool:
        return self.first <= version and (self.last is None or version <= self.last)

    def describe(self) -> str:
        last = "" if self.last == self.first else f"-{self.last or ''}"
        what = "NaN" if self.nan else f"{self.offset:+g} nats"
        return (
            f"weight version {self.first}{last}: {self.share:g} of the generated "
            f"tokens' log-probs reported as {what}"
        )


class FaultError(ValueError):
    """A fault spec the server cannot read."""


def parse(spec: str) -> LogprobFault:
    """'version=2,offset=4,share=0.25,nan=false,seed=0' -> LogprobFault."""
    allowed = {f.name for f in fields(LogprobFault)} - {"first", "last"} | {"version"}
    try:
        items = dict(_pair(p) for p in spec.split(",") if p.strip())
        unknown = sorted(set(items) - allowed)
        if unknown or "version" not in items:
            raise FaultError(f"unknown keys {unknown}" if unknown else "no version=")
        first, last = _versions(items.pop("version"))
        fault = LogprobFault(
            first,
            last,
            offset=float(items.get("offset", 0.0)),
            share=float(items.get("share", 1.0)),
            nan=_flag(items.get("nan", "false")),
            seed=int(items.get("seed", 0)),
        )
    except (FaultError, ValueError) as e:
        raise FaultError(
            f"--logprob-fault {spec!r}: {e}. Write comma-separated KEY=VALUE with "
            "version=K (or K-L, K-) and any of offset=NATS, share=P, nan=true, "
            "seed=S, e.g. 'version=2,offset=4,share=0.25'."
        ) from None
    if not 0 < fault.share <= 1:
        raise FaultError(
            f"--logprob-fault {spec!r}: share must be in (0, 1], the fraction of "
            "the generated tokens hit, e.g. share=0.25."
        )
    if not fault.nan and fault.offset == 0:
        raise FaultError(
            f"--logprob-fault {spec!r} changes nothing: give offset=NATS or nan=true."
        )
    return fault


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep:
        raise FaultError(f"{text.strip()!r} is not KEY=VALUE")
    return key.strip(), value.strip()


def _versions(text: str) -> tuple[int, int | None]:
    first, sep, last = text.partition("-")
    if not sep:
        return int(first), int(first)
    return int(first), (int(last) if last else None)


def _flag(text: str) -> bool:
    if text.lower() not in ("true", "false", "1", "0"):
        raise FaultError(f"nan={text!r} is not true or false")
    return text.lower() in ("true", "1")


class Injector:
    """Applies a fault to the server's responses; runs on its one worker thread."""

    def __init__(self, fault: LogprobFault):
        self.fault = fault
        self.rng = random.Random(fault.seed)
        self.tokens_hit = 0

    def apply(self, out: list[list], version: int) -> None:
        """Change ``out`` (SGLang's ``[logprob, token, None]`` per generated token)
        in place where the fault hits."""
        if not self.fault.hits(version):
            return
        for entry in out:
            # One draw per token: which are hit depends on arrival order alone,
            # as the sampling does.
            if self.rng.random() >= self.fault.share:
                continue
            entry[0] = float("nan") if self.fault.nan else entry[0] + self.fault.offset
            self.tokens_hit += 1
