# SPDX-License-Identifier: Apache-2.0
"""A CPU inference server speaking the part of SGLang's HTTP API that AReaL uses.

    python -m areal_debug.tooling.cpu_server --model-path DIR [--port P] [--seed S]

Backed by a Hugging Face causal LM on CPU, so AReaL's real client side
(RemoteSGLangEngine, WorkflowExecutor, RLVRWorkflow, rewards, weight updates
from disk) runs on machines without a GPU. Endpoints:

- ``POST /generate``: sampling (temperature, 0 = greedy; top_p; top_k;
  max_new_tokens; stop_token_ids; ignore_eos) returning SGLang's response shape
  with each sampled token's log-probability under the model.
- ``GET /health``, ``POST /update_weights_from_disk`` (loads the weights; later
  generations use them), ``POST /pause_generation``, ``POST /continue_generation``
  (requests wait while paused), ``GET /get_model_info``.

``--logprob-fault SPEC`` (or ``AREAL_DEBUG_CPU_SERVER_LOGPROB_FAULT``) reports the
sampling log-probs of one weight version (one step) shifted or NaN: a planted
training-inference mismatch (``tooling/logprob_fault.py``). ``--refuse-version K``
(or ``AREAL_DEBUG_CPU_SERVER_REFUSE``) answers 503 to every request, at weight
version K (step K in a fresh run), for the first prompt asked at that version: a
rollout that fails in the engine's client, as AReaL main fails one with a NaN
log-prob. ``--slow-rollouts SECONDS`` (or ``AREAL_DEBUG_CPU_SERVER_SLOW``) holds
each answer back that long after generating it: rollouts as slow as a GPU
cluster's, where AReaL's dispatcher draws the next batch ahead of the step's
recover checkpoint (docs/areal-known-issues.md). The order and the tokens are
those of a server without it.

Generation runs on one worker thread in arrival order from one seeded RNG:
deterministic for a given seed and request order.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from aiohttp import web

from areal_debug.logs import get_logger
from areal_debug.tooling import logprob_fault
from areal_debug.tooling.logprob_fault import Injector, LogprobFault

logger = get_logger("CPUServer")

_SAMPLING_TYPES = {
    "max_new_tokens": int,
    "temperature": (int, float),
    "top_p": (int, float),
    "top_k": int,
    "ignore_eos": bool,
}


class BadRequest(ValueError):
    """A request the server refuses with 400 and this message."""


def load_model(path: str):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
    model.eval()
    return model


def parse_generate(payload: Any, vocab_size: int) -> tuple[list[int], dict]:
    """Validate a /generate payload; return the prompt and sampling parameters."""
    if not isinstance(payload, dict):
        raise BadRequest("the body must be a JSON object")
    ids = payload.get("input_ids")
    if not isinstance(ids, list) or not ids:
        raise BadRequest("'input_ids' is required: a non-empty list of token ids")
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise BadRequest("'input_ids' must hold integers only")
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        raise BadRequest(
            f"'input_ids' has ids outside the vocabulary [0, {vocab_size}): {bad[:5]}"
        )
    sp = payload.get("sampling_params") or {}
    if not isinstance(sp, dict):
        raise BadRequest("'sampling_params' must be a JSON object")
    for key, typ in _SAMPLING_TYPES.items():
        v = sp.get(key)
        if v is None:
            continue
        ok = (
            isinstance(v, bool)
            if typ is bool
            else isinstance(v, typ) and not isinstance(v, bool)
        )
        if not ok:
            raise BadRequest(f"sampling_params.{key} has the wrong type: {v!r}")
    params = {
        "max_new_tokens": sp.get("max_new_tokens")
        if sp.get("max_new_tokens") is not None
        else 16,
        "temperature": float(sp["temperature"])
        if sp.get("temperature") is not None
        else 1.0,
        "top_p": float(sp["top_p"]) if sp.get("top_p") is not None else 1.0,
        "top_k": int(sp["top_k"]) if sp.get("top_k") is not None else -1,
        "ignore_eos": bool(sp.get("ignore_eos") or False),
        "stop_token_ids": list(sp.get("stop_token_ids") or []),
    }
    if params["max_new_tokens"] < 0:
        raise BadRequest("sampling_params.max_new_tokens must be >= 0")
    if params["temperature"] < 0:
        raise BadRequest("sampling_params.temperature must be >= 0")
    if not 0 < params["top_p"] <= 1:
        raise BadRequest("sampling_params.top_p must be in (0, 1]")
    params["input_logprob_start"] = _input_logprob_start(payload, len(ids))
    return ids, params


def _input_logprob_start(payload: dict, n_ids: int) -> int | None:
    """Where SGLang's ``input_token_logprobs`` start (scoring requests, e.g. a
    teacher's ``compute_logp``), or None when the request asks for none."""
    if not payload.get("return_logprob"):
        return None
    start = payload.get("logprob_start_len")
    if start is None or start == -1:
        # SGLang's default: the last prompt token only.
        return n_ids - 1
    if not isinstance(start, int) or isinstance(start, bool) or not 0 <= start < n_ids:
        raise BadRequest(
            f"'logprob_start_len' must be an integer in [0, {n_ids}) or -1, "
            f"got {start!r}"
        )
    return start


def _filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    if 0 < top_k < logits.numel():
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        cum = torch.softmax(sorted_logits, -1).cumsum(-1)
        # Keep the smallest prefix whose mass reaches top_p (always the first token).
        drop = cum - torch.softmax(sorted_logits, -1) >= top_p
        logits = logits.clone()
        logits[order[drop]] = float("-inf")
    return logits


class Generator:
    """The model and the RNG; every call runs on the single worker thread."""

    def __init__(self, model_path: str, seed: int, fault: LogprobFault | None = None):
        self.model_path = model_path
        self.model = load_model(model_path)
        self.eos = self.model.config.eos_token_id
        self.rng = torch.Generator().manual_seed(seed)
        self.weight_version = 0
        self.fault = None if fault is None else Injector(fault)

    @property
    def vocab_size(self) -> int:
        return self.model.config.vocab_size

    @torch.no_grad()
    def generate(self, ids: list[int], p: dict) -> dict:
        stops = set(p["stop_token_ids"])
        if not p["ignore_eos"] and self.eos is not None:
            stops |= {self.eos} if isinstance(self.eos, int) else set(self.eos)
        out: list[list] = []
        finish = {"type": "length", "length": p["max_new_tokens"]}
        past = None
        inp = torch.tensor([ids])
        for _ in range(p["max_new_tokens"]):
            res = self.model(input_ids=inp, past_key_values=past, use_cache=True)
            past = res.past_key_values
            logits = res.logits[0, -1].float()
            if p["temperature"] == 0:
                token = int(torch.argmax(logits))
                logprob = float(torch.log_softmax(logits, -1)[token])
            else:
                scaled = logits / p["temperature"]
                logprob_all = torch.log_softmax(scaled, -1)
                probs = torch.softmax(
                    _filter_logits(scaled, p["top_k"], p["top_p"]), -1
                )
                token = int(torch.multinomial(probs, 1, generator=self.rng))
                logprob = float(logprob_all[token])
            out.append([logprob, token, None])
            if token in stops:
                finish = {"type": "stop", "matched": token}
                break
            inp = torch.tensor([[token]])
        if self.fault is not None:
            self.fault.apply(out, self.weight_version)
        meta = {
            "finish_reason": finish,
            "prompt_tokens": len(ids),
            "completion_tokens": len(out),
            "output_token_logprobs": out,
            "weight_version": self.weight_version,
        }
        if p.get("input_logprob_start") is not None:
            meta["input_token_logprobs"] = self.score(ids, p["input_logprob_start"])
        return {"text": "", "output_ids": [t for _, t, _ in out], "meta_info": meta}

    @torch.no_grad()
    def score(self, ids: list[int], start: int) -> list[list]:
        """SGLang's ``input_token_logprobs``: ``[logprob, id, None]`` of each prompt
        token from ``start`` on, given the tokens before it (None for the first)."""
        logits = self.model(input_ids=torch.tensor([ids])).logits[0].float()
        logp = torch.log_softmax(logits, -1)
        return [
            [None if j == 0 else float(logp[j - 1, ids[j]]), ids[j], None]
            for j in range(start, len(ids))
        ]

    def load_weights(self, path: str) -> None:
        self.model = load_model(path)
        self.model_path = path
        self.weight_version += 1


#: Read when the server is started without ``--refuse-version``.
REFUSE_ENV = "AREAL_DEBUG_CPU_SERVER_REFUSE"
#: Read when the server is started without ``--slow-rollouts``.
SLOW_ENV = "AREAL_DEBUG_CPU_SERVER_SLOW"


class CPUServer:
    def __init__(
        self,
        model_path: str,
        seed: int = 0,
        fault: LogprobFault | None = None,
        refuse_version: int | None = None,
        slow_rollouts: float = 0.0,
    ):
        self.gen = Generator(model_path, seed, fault)
        self.refuse_version = refuse_version
        self.slow_rollouts = slow_rollouts
        # The prompt refused at that version (its group's requests, and their
        # retries, all fail), and how many requests were refused.
        self.refused_prompt: tuple[int, ...] | None = None
        self.refused = 0
        # One worker: arrival order is generation order, so runs are reproducible.
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cpu-server")
        self.running = asyncio.Event()
        self.running.set()
        self.requests = 0

    async def _call(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.worker, fn, *args)

    async def generate(self, request: web.Request) -> web.Response:
        payload = await _json_body(request)
        ids, params = parse_generate(payload, self.gen.vocab_size)
        await self.running.wait()
        if self._refuses(ids):
            self.refused += 1
            return web.json_response(
                {"error": f"refused (--refuse-version {self.refuse_version})"},
                status=503,
            )
        result = await self._call(self.gen.generate, ids, params)
        self.requests += 1
        # Held back after generating, not before: generation keeps the arrival
        # order, so the tokens are those of a server without the delay.
        if self.slow_rollouts > 0:
            await asyncio.sleep(self.slow_rollouts)
        return web.json_response(result)

    def _refuses(self, ids: list[int]) -> bool:
        if self.gen.weight_version != self.refuse_version:
            return False
        if self.refused_prompt is None:
            self.refused_prompt = tuple(ids)
        return self.refused_prompt == tuple(ids)

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def model_info(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "model_path": self.gen.model_path,
                "weight_version": self.gen.weight_version,
                "paused": not self.running.is_set(),
                "requests_served": self.requests,
                "requests_refused": self.refused,
                **self._fault_info(),
            }
        )

    def _fault_info(self) -> dict:
        injector = self.gen.fault
        if injector is None:
            return {}
        return {
            "logprob_fault": injector.fault.describe(),
            "logprob_fault_tokens": injector.tokens_hit,
        }

    async def update_weights_from_disk(self, request: web.Request) -> web.Response:
        payload = await _json_body(request)
        path = payload.get("model_path") if isinstance(payload, dict) else None
        if not isinstance(path, str) or not path:
            raise BadRequest(
                "'model_path' is required: the directory of the saved weights"
            )
        if not os.path.isdir(path):
            raise BadRequest(f"model_path {path!r} is not a directory")
        t0 = time.perf_counter()
        await self._call(self.gen.load_weights, path)
        msg = f"Loaded weights from {path} in {time.perf_counter() - t0:.2f}s"
        logger.info(msg)
        return web.json_response(
            {"success": True, "message": msg, "weight_version": self.gen.weight_version}
        )

    async def pause(self, request: web.Request) -> web.Response:
        self.running.clear()
        return web.json_response({"success": True, "paused": True})

    async def resume(self, request: web.Request) -> web.Response:
        self.running.set()
        return web.json_response({"success": True, "paused": False})

    def app(self) -> web.Application:
        app = web.Application(middlewares=[_json_errors], client_max_size=64 * 2**20)
        app.add_routes(
            [
                web.post("/generate", self.generate),
                web.get("/health", self.health),
                web.get("/get_model_info", self.model_info),
                web.post("/update_weights_from_disk", self.update_weights_from_disk),
                web.post("/pause_generation", self.pause),
                web.post("/continue_generation", self.resume),
            ]
        )
        return app


async def _json_body(request: web.Request) -> Any:
    raw = await request.read()
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError as e:
        raise BadRequest(f"malformed JSON body: {e}") from e


@web.middleware
async def _json_errors(request: web.Request, handler):
    try:
        return await handler(request)
    except BadRequest as e:
        return web.json_response({"error": str(e)}, status=400)
    except web.HTTPException as e:
        return web.json_response(
            {"error": f"{e.reason}: {request.method} {request.path}"}, status=e.status
        )


async def serve(
    model_path: str,
    host: str,
    port: int,
    seed: int,
    addr_file: str | None,
    fault: LogprobFault | None = None,
    refuse_version: int | None = None,
    slow_rollouts: float = 0.0,
):
    server = CPUServer(model_path, seed, fault, refuse_version, slow_rollouts)
    if fault is not None:
        logger.warning(f"Injecting a log-prob fault: {fault.describe()}")
    if refuse_version is not None:
        logger.warning(
            f"Refusing every request for the first prompt at weight version "
            f"{refuse_version}"
        )
    if slow_rollouts > 0:
        logger.warning(f"Holding every answer back {slow_rollouts:g} s (slow rollouts)")
    runner = web.AppRunner(server.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    real_port = site._server.sockets[0].getsockname()[1]
    addr = f"{host}:{real_port}"
    print(
        f"CPU SGLang-protocol server ready at http://{addr} "
        f"(AREAL_LLM_SERVER_ADDRS={addr})",
        flush=True,
    )
    if addr_file:
        tmp = addr_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(addr)
        os.replace(tmp, addr_file)
    await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description="CPU server speaking SGLang's HTTP protocol."
    )
    ap.add_argument("--model-path", required=True, help="Hugging Face model directory")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--addr-file", default=None, help="write host:port here once serving"
    )
    ap.add_argument(
        "--logprob-fault",
        default=os.environ.get(logprob_fault.ENV) or None,
        metavar="SPEC",
        help="report the sampling log-probs of one weight version (a step) off, "
        "e.g. 'version=2,offset=4,share=0.25' or 'version=1,nan=true' "
        f"(default: ${logprob_fault.ENV})",
    )
    ap.add_argument(
        "--refuse-version",
        type=int,
        default=os.environ.get(REFUSE_ENV) or None,
        metavar="K",
        help="answer 503 to every request for the first prompt asked at weight "
        f"version K (a rollout failing in the engine; default: ${REFUSE_ENV})",
    )
    ap.add_argument(
        "--slow-rollouts",
        type=float,
        default=float(os.environ.get(SLOW_ENV) or 0),
        metavar="SECONDS",
        help="hold every answer back SECONDS after generating it: rollouts slower "
        "than AReaL's 1 s wait, as on a GPU cluster (default: $"
        f"{SLOW_ENV}, else 0)",
    )
    args = ap.parse_args(argv)
    if not 0 <= args.slow_rollouts <= 600:
        ap.error(f"--slow-rollouts {args.slow_rollouts:g}: give 0 to 600 seconds")
    try:
        fault = (
            None
            if args.logprob_fault is None
            else logprob_fault.parse(args.logprob_fault)
        )
    except logprob_fault.FaultError as e:
        ap.error(str(e))
    # The server runs without AReaL (seconds to import, for nothing it needs):
    # its log lines go through the standard library, to stdout like AReaL's.
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s CPUServer %(levelname)s: %(message)s",
        stream=sys.stdout,
    )
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    try:
        asyncio.run(
            serve(
                args.model_path,
                args.host,
                args.port,
                args.seed,
                args.addr_file,
                fault,
                args.refuse_version,
                args.slow_rollouts,
            )
        )
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
