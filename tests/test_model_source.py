# SPDX-License-Identifier: Apache-2.0
"""Which models a reproducer loads unasked (areal_debug/inspect/model_source.py):
local directories without custom code; a hub name or an ``auto_map`` needs the
user's opt-in. (The generated test refusing them: tests/test_cli_extract.py and
the model-code family of reliability/hostile_names.py.)"""

import json

import pytest

from areal_debug.inspect.reproducer import model_source as ms


def model_dir(tmp_path, name, **config):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "qwen2", **config}))
    return str(d)


def test_every_model_and_tokenizer_the_config_names_is_a_source(tmp_path):
    config = {
        "tokenizer_path": "tok",
        "actor": {"path": "a"},
        "ref": {"path": "r"},
        "teacher": {"train": {"path": "t"}},
        "debug": {"path": "/recording"},
        "stats_logger": {"tensorboard": {"path": "/tb"}},
    }
    got = {(s.where, s.value) for s in ms.model_sources(config)}
    assert got == {
        ("tokenizer_path", "tok"),
        ("actor.path", "a"),
        ("ref.path", "r"),
        ("teacher.train.path", "t"),
    }


def test_a_plain_local_model_is_loaded_unasked(tmp_path):
    plain = model_dir(tmp_path, "plain")
    ms.check([ms.ModelSource("actor.path", plain)], allow_hub=False, allow_code=False)


def test_custom_code_in_any_config_needs_the_opt_in(tmp_path):
    coded = model_dir(tmp_path, "coded")
    with open(f"{coded}/tokenizer_config.json", "w") as f:
        json.dump({"auto_map": {"AutoTokenizer": ["probe.T", None]}}, f)
    src = [ms.ModelSource("tokenizer_path", coded)]
    with pytest.raises(ms.UntrustedModelError) as e:
        ms.check(src, allow_hub=True, allow_code=False)
    assert "tokenizer_config.json: auto_map" in str(e.value)
    assert ms.ALLOW_CODE_ENV in str(e.value) and "tokenizer_path" in str(e.value)
    ms.check(src, allow_hub=False, allow_code=True)


def test_a_hub_name_needs_the_opt_in_and_the_env_decides_by_default(monkeypatch):
    src = [ms.ModelSource("actor.path", "org/model")]
    monkeypatch.delenv(ms.ALLOW_HUB_ENV, raising=False)
    with pytest.raises(ms.UntrustedModelError, match=ms.ALLOW_HUB_ENV):
        ms.check(src)
    assert ms.offline_env({})["HF_HUB_OFFLINE"] == "1"
    monkeypatch.setenv(ms.ALLOW_HUB_ENV, "1")
    ms.check(src)
    assert "HF_HUB_OFFLINE" not in ms.offline_env({ms.ALLOW_HUB_ENV: "1"})


def test_a_path_not_on_this_machine_is_left_to_the_caller(tmp_path):
    ms.check([ms.ModelSource("actor.path", str(tmp_path / "gone"))], False, False)
