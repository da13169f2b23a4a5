# SPDX-License-Identifier: Apache-2.0
"""The CPU server, driven by AReaL's real RemoteSGLangEngine where AReaL talks to it."""

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
import torch
from support.waiting import wait_until


@pytest.fixture(scope="module")
def server(tiny_assets, tmp_path_factory):
    d = tmp_path_factory.mktemp("server")
    addr_file = d / "addr"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "areal_debug.tooling.cpu_server",
            "--model-path",
            str(tiny_assets / "model"),
            "--addr-file",
            str(addr_file),
            "--seed",
            "3",
        ],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=open(d / "log", "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_until(
            addr_file.exists,
            120,
            "the server did not start",
            give_up=lambda: None if proc.poll() is None else (d / "log").read_text(),
        )
        yield addr_file.read_text().strip()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def post(addr, path, body, raw=False):
    data = body if raw else json.dumps(body).encode()
    req = urllib.request.Request(f"http://{addr}{path}", data=data, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def greedy(addr, ids, n=6):
    status, out = post(
        addr,
        "/generate",
        {
            "input_ids": ids,
            "sampling_params": {
                "max_new_tokens": n,
                "temperature": 0.0,
                "ignore_eos": True,
            },
        },
    )
    assert status == 200, out
    return out["output_ids"]


@pytest.fixture(scope="module")
def engine(server):
    from areal.api.cli_args import InferenceEngineConfig
    from areal.engine import RemoteSGLangEngine

    eng = RemoteSGLangEngine(
        InferenceEngineConfig(
            experiment_name="srv",
            trial_name="t",
            backend="sglang:d1",
            max_concurrent_rollouts=64,
            request_timeout=60,
        )
    )
    eng.initialize(addr=[server], train_data_parallel_size=1)
    yield eng
    eng.destroy()


def agenerate(engine, ids, **gconfig):
    from areal.api.cli_args import GenerationHyperparameters
    from areal.api.io_struct import ModelRequest

    req = ModelRequest(input_ids=ids, gconfig=GenerationHyperparameters(**gconfig))
    return engine.agenerate(req)


PROMPT = [24, 25, 4, 19, 7, 20, 26, 27]


def test_generate_through_remote_sglang_engine_returns_model_logprobs(
    engine, tiny_assets
):
    from transformers import AutoModelForCausalLM

    resp = asyncio.run(agenerate(engine, PROMPT, max_new_tokens=6, temperature=1.0))
    assert 1 <= len(resp.output_tokens) <= 6
    assert len(resp.output_logprobs) == len(resp.output_tokens)
    assert resp.stop_reason in ("stop", "length")
    model = AutoModelForCausalLM.from_pretrained(tiny_assets / "model")
    ids = torch.tensor([PROMPT + resp.output_tokens])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0].float(), -1)
    expected = [
        float(logp[len(PROMPT) - 1 + i, t]) for i, t in enumerate(resp.output_tokens)
    ]
    assert resp.output_logprobs == pytest.approx(expected, abs=1e-4)


def test_greedy_is_deterministic_and_length_limited(server):
    status, out = post(
        server,
        "/generate",
        {
            "input_ids": PROMPT,
            "sampling_params": {
                "max_new_tokens": 4,
                "temperature": 0.0,
                "ignore_eos": True,
            },
        },
    )
    assert status == 200
    meta = out["meta_info"]
    assert meta["finish_reason"]["type"] == "length"
    assert meta["completion_tokens"] == 4 and meta["prompt_tokens"] == len(PROMPT)
    assert [t for _, t, _ in meta["output_token_logprobs"]] == out["output_ids"]
    assert greedy(server, PROMPT, 4) == out["output_ids"]


def test_stop_token_ends_generation(server):
    first = greedy(server, PROMPT, 1)[0]
    status, out = post(
        server,
        "/generate",
        {
            "input_ids": PROMPT,
            "sampling_params": {
                "max_new_tokens": 5,
                "temperature": 0.0,
                "stop_token_ids": [first],
            },
        },
    )
    assert out["output_ids"] == [first]
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": first}


def test_compute_logp_through_remote_sglang_engine_scores_the_given_tokens(
    server, engine, tiny_assets
):
    """A teacher served as an inference engine scores tokens with SGLang's
    ``input_token_logprobs`` (AReaL's ``RemoteInfEngine.compute_logp``)."""
    from transformers import AutoModelForCausalLM

    model_path = str(tiny_assets / "model")
    # Another test may have loaded other weights into the module's server.
    assert (
        post(server, "/update_weights_from_disk", {"model_path": model_path})[0] == 200
    )
    ids = torch.tensor([PROMPT, PROMPT[::-1]])
    loss_mask = torch.zeros_like(ids)
    loss_mask[:, 5:] = 1
    (out,) = engine.compute_logp([{"input_ids": ids, "loss_mask": loss_mask}])
    model = AutoModelForCausalLM.from_pretrained(model_path, torch_dtype=torch.float32)
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits.float(), -1)
    # The log-prob of token j given the tokens before it, written at j.
    expected = torch.zeros(ids.shape)
    expected[:, 5:] = logp[:, 4:-1].gather(-1, ids[:, 5:, None])[..., 0]
    assert out.shape == ids.shape
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    assert bool((out[:, :5] == 0).all())
    status, bad = post(
        server,
        "/generate",
        {"input_ids": PROMPT, "return_logprob": True, "logprob_start_len": 99},
    )
    assert status == 400 and "logprob_start_len" in bad["error"]


def test_weight_update_from_disk_changes_outputs(server, tmp_path):
    from transformers import AutoModelForCausalLM

    from areal_debug.tooling.tiny_task import build_tiny_model

    new = build_tiny_model(str(tmp_path / "new"), seed=123)
    before = greedy(server, PROMPT)
    status, out = post(server, "/update_weights_from_disk", {"model_path": new})
    assert status == 200 and out["success"] is True
    after = greedy(server, PROMPT)
    model = AutoModelForCausalLM.from_pretrained(new)
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        local = model.generate(ids, max_new_tokens=6, do_sample=False, min_new_tokens=6)
    assert after == local[0, len(PROMPT) :].tolist()
    assert after != before


def test_pause_holds_requests_until_continue(server):
    assert post(server, "/pause_generation", {})[0] == 200
    done = threading.Event()
    threading.Thread(
        target=lambda: (greedy(server, PROMPT, 2), done.set()), daemon=True
    ).start()
    assert not done.wait(1.5), "a request completed while generation was paused"
    assert post(server, "/continue_generation", {})[0] == 200
    assert done.wait(30)


@pytest.mark.parametrize(
    "body,message",
    [
        (b"{not json", "malformed JSON"),
        (json.dumps({"sampling_params": {}}).encode(), "'input_ids' is required"),
        (json.dumps({"input_ids": ["a"]}).encode(), "integers only"),
        (
            json.dumps(
                {"input_ids": [1], "sampling_params": {"max_new_tokens": "x"}}
            ).encode(),
            "max_new_tokens has the wrong type",
        ),
        (json.dumps({"input_ids": [10**6]}).encode(), "outside the vocabulary"),
    ],
)
def test_bad_payloads_get_400_and_the_server_keeps_serving(server, body, message):
    status, out = post(server, "/generate", body, raw=True)
    assert status == 400 and message in out["error"]
    assert greedy(server, PROMPT, 1)


def test_unknown_endpoint_is_a_json_404(server):
    status, out = post(server, "/no_such_endpoint", {})
    assert status == 404 and "/no_such_endpoint" in out["error"]
    status, out = post(
        server, "/update_weights_from_disk", {"model_path": "/nonexistent"}
    )
    assert status == 400 and "not a directory" in out["error"]


def test_many_concurrent_requests_through_the_engine(engine):
    async def many():
        return await asyncio.gather(
            *[
                agenerate(engine, PROMPT, max_new_tokens=4, temperature=1.0)
                for _ in range(32)
            ]
        )

    results = asyncio.run(many())
    assert len(results) == 32
    assert all(1 <= len(r.output_tokens) <= 4 for r in results)
    assert len({tuple(r.output_tokens) for r in results}) > 1  # sampling varies


# -- the log-prob fault (tooling/logprob_fault.py) -----------------------------------
def sampled(gen, n=3):
    """(tokens, log-probs) of ``n`` sampled requests of ``gen``, in order."""
    params = {
        "max_new_tokens": 12,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "ignore_eos": True,
        "stop_token_ids": [],
    }
    outs = [gen.generate(PROMPT, params)["meta_info"] for _ in range(n)]
    return (
        [[t for _, t, _ in o["output_token_logprobs"]] for o in outs],
        [[lp for lp, _, _ in o["output_token_logprobs"]] for o in outs],
    )


def test_a_logprob_fault_shifts_only_its_versions_tokens_and_samples_the_same(
    tiny_assets,
):
    from areal_debug.tooling.cpu_server import Generator
    from areal_debug.tooling.logprob_fault import parse

    model = str(tiny_assets / "model")
    clean = Generator(model, seed=5)
    faulty = Generator(model, seed=5, fault=parse("version=1,offset=-4,share=0.5"))
    for version in (0, 1, 2):
        tokens, logps = sampled(clean)
        f_tokens, f_logps = sampled(faulty)
        # The same tokens: the fault draws from an RNG of its own.
        assert f_tokens == tokens
        shifts = [round(b - a, 4) for x, y in zip(logps, f_logps) for a, b in zip(x, y)]
        if version == 1:
            assert set(shifts) == {0.0, -4.0}, shifts
            assert 0.3 < shifts.count(-4.0) / len(shifts) < 0.7
            assert faulty.fault.tokens_hit == shifts.count(-4.0)
        else:
            assert set(shifts) == {0.0}
        for gen in (clean, faulty):
            gen.load_weights(model)  # the next weight version, as AReaL's update


def test_a_refused_version_refuses_its_first_prompt_only(tiny_assets):
    """--refuse-version K: at weight version K, every request for the first
    prompt asked (its group's samples, AReaL's retries) and no other."""
    from areal_debug.tooling.cpu_server import CPUServer

    model = str(tiny_assets / "model")
    server = CPUServer(model, refuse_version=1)
    other = PROMPT[::-1]
    assert not server._refuses(PROMPT) and not server._refuses(other)  # version 0
    server.gen.load_weights(model)
    assert [server._refuses(p) for p in (other, PROMPT, other)] == [True, False, True]
    server.gen.load_weights(model)
    assert not server._refuses(other)  # version 2
    server.worker.shutdown()


@pytest.mark.each_areal
def test_a_nan_fault_reaches_areals_client_and_a_refusal_is_noted_by_step(workdir):
    """The fault's NaN travels as JSON's NaN (what the engine computed; SGLang's
    orjson would send null). AReaL 1.0.4 takes it into the batch. AReaL main
    refuses it (HttpGenerationResult, PR #1554): the request fails in the engine
    the workflows call, where a dump notes it under the step being prepared
    (modes/engines.py RolloutFailures; DumpMode pins the step with it)."""
    from areal.api.cli_args import InferenceEngineConfig
    from areal.api.io_struct import HttpGenerationResult
    from areal.engine import RemoteSGLangEngine

    from areal_debug import areal_compat
    from areal_debug.modes.engines import RolloutFailures
    from areal_debug.testing import end_process, start_server

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc, addr = start_server(workdir, env, logprob_fault="version=0,nan=true")
    eng = RemoteSGLangEngine(
        InferenceEngineConfig(
            experiment_name="srv", trial_name="t", backend="sglang:d1"
        )
    )
    patches = areal_compat.MethodPatches()
    try:
        with urllib.request.urlopen(f"http://{addr}/get_model_info") as r:
            assert json.loads(r.read())["logprob_fault_tokens"] == 0
        eng.initialize(addr=[addr], train_data_parallel_size=1)
        failures = RolloutFailures(lambda: 3)  # as if preparing step 3's batch
        inner = areal_compat.workflow_engine(eng)
        failures.watch(inner, patches)
        if hasattr(HttpGenerationResult, "__post_init__"):  # AReaL main
            with pytest.raises(ValueError, match="must be a real, finite number"):
                asyncio.run(agenerate(inner, PROMPT, max_new_tokens=3))
            (reason,) = failures.reasons(3)
            assert reason.startswith("1 rollout request(s) failed in the inference")
            assert "ValueError: Malformed generation result" in reason
            assert "got nan" in reason
        else:
            resp = asyncio.run(agenerate(inner, PROMPT, max_new_tokens=3))
            assert len(resp.output_logprobs) == len(resp.output_tokens) > 0
            assert all(math.isnan(lp) for lp in resp.output_logprobs)
        # Taken once: the next step starts with none.
        assert failures.reasons(3) == [] and failures.reasons(4) == []
        with urllib.request.urlopen(f"http://{addr}/get_model_info") as r:
            info = json.loads(r.read())
        assert info["logprob_fault_tokens"] > 0
        assert "NaN" in info["logprob_fault"]
        assert "Injecting a log-prob fault" in (workdir / "server.log").read_text()
    finally:
        patches.remove_all()
        eng.destroy()
        end_process(proc)


@pytest.mark.parametrize(
    "spec,message",
    [
        ("offset=4", "no version="),
        ("version=1", "changes nothing"),
        ("version=x,offset=1", "invalid literal"),
        ("version=1,offset=1,share=0", "share must be in (0, 1]"),
        ("version=1,offst=1", "unknown keys ['offst']"),
        ("version=1,nan=maybe", "is not true or false"),
    ],
)
def test_a_fault_spec_the_server_cannot_read_says_how_to_write_one(
    spec, message, capsys
):
    from areal_debug.tooling import cpu_server

    with pytest.raises(SystemExit) as e:
        cpu_server.main(["--model-path", "unused", "--logprob-fault", spec])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"--logprob-fault {spec!r}" in err and message in err


def test_slow_rollouts_hold_each_answer_back_and_keep_its_tokens(tiny_assets):
    """--slow-rollouts S: each answer comes S seconds after its generation, with
    the tokens and log-probs a server without it gives (generation keeps the
    arrival order)."""
    from aiohttp.test_utils import TestClient, TestServer

    from areal_debug.tooling.cpu_server import CPUServer

    body = {
        "input_ids": PROMPT,
        "sampling_params": {"max_new_tokens": 4, "temperature": 1.0},
    }

    async def ask(slow: float):
        server = CPUServer(str(tiny_assets / "model"), seed=3, slow_rollouts=slow)
        async with TestClient(TestServer(server.app())) as client:
            t0 = time.monotonic()
            response = await client.post("/generate", json=body)
            answer = await response.json()
            return answer, time.monotonic() - t0

    plain, _ = asyncio.run(ask(0.0))
    held, took = asyncio.run(ask(1.5))
    assert (
        held["meta_info"]["output_token_logprobs"]
        == (plain["meta_info"]["output_token_logprobs"])
    )
    assert took >= 1.5, took


def test_slow_rollouts_out_of_range_are_refused(tiny_assets):
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "areal_debug.tooling.cpu_server",
            "--model-path",
            str(tiny_assets / "model"),
            "--slow-rollouts",
            "-1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2
    assert "--slow-rollouts -1: give 0 to 600 seconds" in run.stderr
