# SPDX-License-Identifier: Apache-2.0
"""Below the log-probs stage: the first layer, sample and token (issue 59).

The suite's recordings digest step 0's layers (``debug.layer_digests=0``); these
replays change one thing the dump run did and check that the report names where
in the model step 0 first computes something else. The demo's own what-if replay
(one sequence per micro-batch) is checked in tests/test_demo.py's SPMD demo.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from support.browser import needs_browser, open_page
from support.harness import replay_report
from test_reproduce import replay

from areal_debug.compare.layers import compare_layers
from areal_debug.inspect.page import report as html_report
from areal_debug.stages.digest import span_digests, token_digests
from areal_debug.stages.layers import digested_modules
from areal_debug.stages.names import layer_entry_name


def _model_copy(workdir, where):
    model = where / "model"
    shutil.copytree(workdir / "model", model)
    return model


def _nudged(model, name: str) -> None:
    from safetensors.torch import load_file, save_file

    (weights,) = model.glob("*.safetensors")
    tensors = load_file(weights)
    tensors[name][0].add_(1e-3)
    save_file(tensors, weights, metadata={"format": "pt"})


def _with_rms_norm_eps(model, eps: float) -> None:
    config = model / "config.json"
    data = json.loads(config.read_text())
    data["rms_norm_eps"] = eps
    config.write_text(json.dumps(data))


def _step0_logp(report: dict) -> dict:
    (step0,) = [e for e in report["steps"] if e["global_step"] == 0]
    return step0["stages"]["logp"]


@pytest.mark.areal
def test_a_nudged_layer_weight_is_named_below_the_logprobs(spmd_d1, tmp_path):
    """One weight of layer 1's MLP nudged: the model check names the parameter,
    and the log-probs' layers name layer 1's MLP as the first module that differs
    (layer 0 and layer 1's attention identical), at a sample and token."""
    model = _model_copy(spmd_d1.workdir, tmp_path)
    _nudged(model, "model.layers.1.mlp.down_proj.weight")
    run = replay(spmd_d1, "nudged", "total_train_steps=1", f"actor.path={model}")
    assert run.returncode == 0, run.log[-3000:]
    report = replay_report(str(spmd_d1.workdir), trial="nudged")
    assert report["model"]["status"] == "differs"
    assert report["model"]["where"].endswith("layers.1.mlp.down_proj.weight")
    layers = _step0_logp(report)["layers"]
    assert layers["status"] == "differs" and layers["module"] == "model.layers.1.mlp"
    assert layers["token"] == 0  # every token goes through the nudged row
    # The story's headline is the model check's (it names the parameter); the
    # step's line goes one level down.
    assert report["headline"].startswith("the model is not the recorded one")
    assert "below it, first at model.layers.1.mlp, group " in run.log


@needs_browser
@pytest.mark.areal
def test_another_rms_norm_eps_names_the_first_norm(spmd_d1, tmp_path):
    """The model's config with another rms_norm_eps: the weights are the recorded
    ones (the model check says so), and the first module that differs is the
    first norm the forward pass runs, layer 0's input norm. The page names it
    in the stage table and on the named sample's view."""
    model = _model_copy(spmd_d1.workdir, tmp_path)
    _with_rms_norm_eps(model, 1e-2)
    run = replay(spmd_d1, "eps", "total_train_steps=1", f"actor.path={model}")
    assert run.returncode == 0, run.log[-3000:]
    report = replay_report(str(spmd_d1.workdir), trial="eps")
    assert report["model"]["status"] == "identical"
    logp = _step0_logp(report)
    assert logp["status"] == "differs"
    assert logp["layers"]["module"] == "model.layers.0.input_layernorm"
    assert logp["below"].startswith("model.layers.0.input_layernorm, group ")
    out = tmp_path / "eps.html"
    (folder,) = (spmd_d1.workdir / "root" / "logs").rglob("eps")
    html_report.build_report(spmd_d1.path, str(folder), str(out))
    group, sample = logp["layers"]["group"], logp["layers"]["group_sample"]
    with open_page(f"{out}") as page:
        assert page.errors == []
        table = page.inner_text("#stage-table")
        assert "below it, first at model.layers.0.input_layernorm" in table
        page.evaluate(f"location.hash = '#step=0&group={group}&sample={sample}'")
        page.wait_for_selector("p.divergence")
        note = page.inner_text("body")
        assert (
            "Below the log-probs, the replay first computes something else in this "
            "sequence at model.layers.0.input_layernorm"
        ) in note


def _sc_replay(sc_d2, trial: str, *overrides: str) -> dict:
    run = subprocess.run(
        [
            "bash",
            str(sc_d2.workdir / "run_replay.sh"),
            f"debug.replay_trial_name={trial}",
            "debug.replay_end_step=0",
            *overrides,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return replay_report(str(sc_d2.workdir), "tinydemo", trial)


# Single-controller twins of test_a_nudged_layer_weight_is_named_below_the_logprobs
# and of the README demo's what-if (tests/test_demo.py), both in make test; the
# workers' layer digests are compared in make test by the single-controller demo's
# replay. Here: make test-long, run by CI.
@pytest.mark.variant
@pytest.mark.scheduler
def test_single_controller_names_a_nudged_layer(sc_d2, tmp_path):
    """The nudged model copy of the SPMD test above, replayed in single-controller
    mode on two workers: the same module named. (Which module a change names is
    the comparison's, tested once in SPMD mode for a changed norm; what this mode
    adds is the digests taken in the RPC workers and brought to the controller.)"""
    nudged = _model_copy(sc_d2.workdir, tmp_path / "nudged")
    _nudged(nudged, "model.layers.1.mlp.down_proj.weight")
    report = _sc_replay(sc_d2, "nudged", f"actor.path={nudged}")
    assert report["model"]["where"].endswith("layers.1.mlp.down_proj.weight")
    assert _step0_logp(report)["layers"]["module"] == "model.layers.1.mlp"


@pytest.mark.variant
@pytest.mark.scheduler
def test_single_controller_what_if_names_layer_0s_attention(sc_d2):
    """Single-controller mode (the layers digested in the RPC workers): the demo's
    what-if replay, one sequence per micro-batch, names layer 0's attention as
    where step 0 first computes something else, at the first token of a
    sequence the dump run packed behind another (a row after the first of its
    trainer's trajectory), on one of the two ranks."""
    report = _sc_replay(sc_d2, "unpacked", "actor.mb_spec.max_tokens_per_mb=16")
    layers = _step0_logp(report)["layers"]
    assert layers["status"] == "differs", layers
    assert layers["module"] == "model.layers.0.self_attn"
    assert layers["token"] == 0 and layers["sample"] >= 1
    assert "rank " in layers["where"]  # two ranks: named
    assert "first at model.layers.0.self_attn, group " in report["headline"]


def test_modules_are_walked_in_the_order_the_forward_pass_ran_them():
    """Entries carry the module's place in the pass (stages.json sorts its keys):
    the first differing module is the earliest run, not the first by name; a
    sample only one side has is named missing; per-token digests give the token."""
    import torch

    def side(digests: dict[str, str]) -> list[dict]:
        entries = [
            (layer_entry_name(2, 1, i, module), [hex_, None])
            for i, (module, hex_) in enumerate(digests.items())
        ]
        return [{"layers": dict(reversed(entries))}]  # the last run first

    order = ["model.layers.0.input_layernorm", "model.layers.0.self_attn", "lm_head"]
    rec = side(dict.fromkeys(order, "aa"))
    rep = side({order[0]: "aa", order[1]: "bb", order[2]: "bb"})
    name = layer_entry_name(2, 1, 1, order[1])
    tokens = {
        f"rank 0/layers/{name}": torch.tensor([[1, 2], [3, 4], [5, 6]]),
    }
    changed = {f"rank 0/layers/{name}": torch.tensor([[1, 2], [3, 4], [5, 7]])}
    result = compare_layers(rec, rep, tokens, changed)
    assert result["module"] == order[1] and result["token"] == 2
    assert result["where"] == (
        "model.layers.0.self_attn, the trainer's trajectory 2 row 1, token 2"
    )
    assert compare_layers(rec, rec)["status"] == "identical"
    assert compare_layers(rec, [{}])["status"] == "not_compared"
    assert compare_layers([{}], [{}]) is None


def test_the_digested_modules_of_a_decoder_model_and_a_tokens_digests():
    """Each decoder layer's children and the layer, the final norm, the logits;
    a token's digest is the two sums over that token's values alone."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from areal_debug.stages.digest import digest_pair

    cfg = Qwen2Config(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    names = [n for n, _ in digested_modules(Qwen2ForCausalLM(cfg))]
    assert names[-2:] == ["model.norm", "lm_head"]
    assert "model.layers.1" in names and "model.layers.0.self_attn" in names
    assert "model.layers.0.input_layernorm" in names
    x = torch.randn(6, 5)
    per_token = token_digests(x)
    for t in range(6):
        assert per_token[t].tolist() == digest_pair(x[t]).tolist()
    # A sample's digest from its tokens' is the digest of its span.
    spans = [(0, 6), (2, 5), (3, 4), (5, 6)]
    got = span_digests(per_token, spans, 5).tolist()
    assert got == [digest_pair(x[a:b]).tolist() for a, b in spans]
