# SPDX-License-Identifier: Apache-2.0
"""Hostile names: recorded text that is code in some language, everywhere
areal-debug writes or prints it.

Each case is a recording whose experiment and trial names, model path
(``actor.path``) and a config value (``tokenizer_path``) hold quotes of every
kind, newlines, ``\\N``, backslashes, ``$(...)``, backticks, ``;``, ``</script>``,
``<!--``, ``{{ }}``, ``${...}`` and Python that would run if pasted into code,
and whose directory names (the recording's, ``extract -o``'s, the demo's) hold
text that is not valid UTF-8. Handled means:

- ``extract`` writes the fixed test and ``replay.py`` (byte for byte the package's),
  every recorded value exactly in ``reproducer.json``, and a ``config.yaml`` whose
  values OmegaConf (AReaL's config loading) reads back exactly; its "run it" line
  is one argument per word;
- collecting the generated tests and running their payload check runs nothing else
  (each hostile text holds a probe: a command or Python that would create a marker
  file, and the marker directory stays empty);
- the demo's ``run_replay.sh`` passes ``bash -n`` and its arguments, the ones it
  holds and the ones given to it, arrive unchanged; doctor's suggested overrides
  split back into the recorded values;
- the report page, in a headless browser, shows the names and the decoded tokens
  (words of HTML and script) as text, and no script of the data runs
  (``window.__pwned`` stays undefined).
"""

from __future__ import annotations

import json
import os
import random
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from reliability import recording
from reliability.tally import Tally

# Relative marker names: every process a check starts runs in the marker
# directory, so a probe that runs leaves a file there.
PROBES = (
    "$(touch PWNED-dollar)",
    "`touch PWNED-backtick`",
    "; touch PWNED-semicolon;",
    '"""; open("PWNED-docstring", "w"); """',
    "'''; open('PWNED-single', 'w'); '''",
    "{__import__('os').system('touch PWNED-format')}",
    "\n__import__('os').system('touch PWNED-newline')\n",
    "</script><script>window.__pwned=1</script>",
    "<!--",
    "<img src=x onerror=window.__pwned=1>",
)
FRAGMENTS = (
    *PROBES,
    '"',
    "'",
    "\\N",
    "\\",
    "\\u0041",
    "{{ }}",
    "{0}",
    "${oc.env:HOME}",
)
# Directory names: no "/" (one path component), with bytes that are not UTF-8.
DIR_FRAGMENTS = (
    b"$(touch PWNED-dir)",
    b"`touch PWNED-dirtick`",
    b"; x",
    b"'\"",
    b"\\N",
    b"\n",
    b"{{ }}",
    b"\xff\xfe",
    b"\xc3(",
)


@dataclass
class HostileCase:
    experiment: str
    trial: str
    model: str
    value: str
    dirname: str  # one path component, decoded as the OS does (surrogateescape)

    @classmethod
    def everything(cls) -> HostileCase:
        """Every fragment in every field."""
        text = "x" + "".join(FRAGMENTS) + "y"
        return cls(
            experiment=text,
            trial="t" + text,
            model="/models/" + text,
            value="tok" + text,
            dirname=os.fsdecode(b"d" + b"".join(DIR_FRAGMENTS)),
        )

    @classmethod
    def random(cls, rng: random.Random) -> HostileCase:
        def text(prefix: str) -> str:
            picked = rng.choices(FRAGMENTS, k=rng.randint(1, 5))
            return prefix + "".join(p + rng.choice(("", " ", "a")) for p in picked)

        parts = rng.choices(DIR_FRAGMENTS, k=rng.randint(1, 4))
        return cls(
            experiment=text("e"),
            trial=text("t"),
            model="/m/" + text("model"),
            value=text("v"),
            dirname=os.fsdecode(b"d" + b"".join(parts)),
        )


def write_recording(path: str, case: HostileCase) -> None:
    """The reliability recording (steps 0 and 1), named and configured with the
    case's text."""
    manifest = {
        **recording.MANIFEST,
        "experiment_name": case.experiment,
        "trial_name": case.trial,
        "config": {
            "experiment_name": case.experiment,
            "trial_name": case.trial,
            "tokenizer_path": case.value,
            "actor": {"path": case.model},
            "cluster": {"fileroot": "/fileroot/" + case.value},
        },
    }
    recording.write(path, manifest=manifest)


def check_extract(root: str, case: HostileCase) -> str | None:
    """Extract step 1 of a hostile recording; what is wrong with the files."""
    import yaml
    from omegaconf import OmegaConf

    from areal_debug.inspect import render
    from areal_debug.inspect.reproducer import extract

    rec = os.path.join(root, "rec-" + case.dirname)
    out = os.path.join(root, "out-" + case.dirname)
    write_recording(rec, case)
    result = extract.extract(rec, 0, out)
    for name in ("replay.py", f"test_replay_step_{result.source_step}.py"):
        with open(os.path.join(out, name), "rb") as f:
            written = f.read()
        fixed = "replay.py" if name == "replay.py" else extract.TEST
        with open(extract.REPRODUCER_FILES / fixed, "rb") as f:
            if written != f.read():
                return f"{name} is not the package's fixed {fixed}"
        compile(written, name, "exec")
    with open(os.path.join(out, extract.SPEC), encoding="utf-8") as f:
        spec = json.load(f)
    got = (spec["source"]["experiment"], spec["source"]["trial"], spec["model"])
    if got != (case.experiment, case.trial, case.model):
        return f"reproducer.json holds {got!r}"
    with open(os.path.join(out, extract.CONFIG), encoding="utf-8") as f:
        config = OmegaConf.create(yaml.safe_load(f))
    read = (config.actor.path, config.tokenizer_path, config.cluster.fileroot)
    if read != (case.model, case.value, "/fileroot/" + case.value):
        return f"config.yaml reads back as {read!r}"
    if config.experiment_name != extract.REPRO_EXPERIMENT:
        return f"config.yaml names the run {config.experiment_name!r}"
    # The last thing printed; a quoted newline stays inside its word.
    line = str(render.extract_result(result)).split("run it:", 1)[1]
    words = shlex.split(line)
    if words[1:] != ["-m", "pytest", "-q", result.out] or words[0] not in (
        "python",
        sys.executable,
    ):
        return f"the 'run it' line splits into {words!r}"
    return None


# pytest as a person runs a reproducer: quiet, leaving no cache behind.
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]


def check_generated_tests(outs: list[str], markers: str) -> str | None:
    """Collect every generated test and run its payload check (no replay), in one
    pytest process started in ``markers``; any probe that ran leaves a file."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        *PYTEST,
        "--import-mode=importlib",
        "-k",
        "intact",
        *outs,
    ]
    proc = subprocess.run(
        cmd, cwd=markers, env=env, capture_output=True, timeout=600, check=False
    )
    log = (proc.stdout + proc.stderr).decode(errors="replace")
    passed = f"{len(outs)} passed"
    if proc.returncode != 0 or passed not in log:
        return f"the generated tests did not pass ({passed} expected): {log[-2000:]}"
    return None


def check_replay_script(root: str, case: HostileCase, markers: str) -> str | None:
    """The demo's run_replay.sh in a hostile directory, with hostile overrides of
    its own and given to it: ``bash -n`` and the arguments as they arrive."""
    from pathlib import Path

    from areal_debug.tooling import demo

    workdir = Path(root) / ("demo-" + case.dirname)
    workdir.mkdir()
    probe, seen = workdir / "probe.py", workdir / "argv.json"
    probe.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        "json.dump({'argv': sys.argv[1:], 'workdir': os.environ['AREAL_DEBUG_WORKDIR']},"
        " open(os.environ['PROBE_OUT'], 'w'))\n"
    )
    probe.chmod(0o755)
    own = [f"experiment_name={case.experiment}", f"actor.path={case.model}"]
    given = [f"tokenizer_path={case.value}", case.trial]
    real, sys.executable = sys.executable, str(probe)
    try:
        script = demo.write_replay_script(workdir, 1, 2, overrides=own)
        expected = demo.mode_command("replay", 1, 2, overrides=own)[1:] + given
    finally:
        sys.executable = real
    if subprocess.run(["bash", "-n", str(script)], check=False).returncode != 0:
        return "run_replay.sh does not pass bash -n"
    env = {**os.environ, "PROBE_OUT": str(seen)}
    subprocess.run(
        ["bash", str(script), *given], cwd=markers, env=env, check=True, timeout=60
    )
    got = json.loads(seen.read_text())
    if got != {"argv": expected, "workdir": str(workdir)}:
        return f"run_replay.sh passed {got!r}, not {expected!r}"
    return None


def check_doctor_words(case: HostileCase) -> str | None:
    """doctor's suggested overrides give back the recorded values when pasted."""
    from areal_debug.inspect.preflight.doctor import config_differences

    recorded = {"actor": {"path": case.model}, "tokenizer_path": case.value}
    current = {"actor": {"path": "other"}, "tokenizer_path": "other"}
    for finding in config_differences(recorded, current):
        word = finding.fix.removeprefix("set ").split(" to reproduce")[0]
        key = finding.what.split(" ", 1)[0]
        want = case.model if key == "actor.path" else case.value
        if shlex.split(word) != [f"{key}={want}"]:
            return f"doctor suggests {finding.fix!r} for {key}"
    return None


def tokenizer(path: str) -> str:
    """A word-level tokenizer whose words are HTML, script and template text: the
    recording's token ids (0-49) decode to them."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = [p.replace(" ", "_").replace("\n", "_") for p in PROBES]
    words += ["{{7*7}}", "${x}", "&amp;", "\\u003c", "-->"]
    vocab = {w: i for i, w in enumerate(words)}
    vocab.update({f"w{i}": i for i in range(len(words), 50)})
    vocab["<unk>"] = 50
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>").save_pretrained(
        path
    )
    return path


def check_page(root: str, case: HostileCase, tok: str) -> str | None:
    """The report page in headless chromium: the hostile text shown as text, no
    script of the data run."""
    from areal_debug.inspect.page import report as html_report

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
    from support.browser import open_page

    rec = os.path.join(root, "rec-" + case.dirname)
    out = os.path.join(root, "page-" + case.dirname + ".html")
    html_report.build_report(rec, None, out, tokenizer=tok)
    with open_page(out) as page:
        scripts = page.evaluate("document.scripts.length")
        page.click(".stepbtn[data-step='1']")
        page.click("#traj-rows tr >> nth=0")
        shown = page.evaluate("document.body.textContent")
        if page.evaluate("typeof window.__pwned") != "undefined":
            return "a script from the recording ran (window.__pwned is set)"
        if page.errors:
            return f"the page raised {page.errors}"
        if page.evaluate("document.scripts.length") != scripts:
            return "the recording's text added a script element"
    missing = [t for t in (case.experiment, case.trial) if t not in shown]
    tokens = [w for w in ("</script><script>window.__pwned=1</script>", "<!--")]
    missing += [t for t in tokens if t not in shown]
    if missing:
        return f"the page does not show {missing!r} as text"
    return None


# Python that leaves a marker file where it runs: a model's custom code (a config's
# auto_map) that a reproducer must not import unasked.
MODEL_CODE = "open({marker!r}, 'w').write('the recorded model ran its code')\n"


def check_model_code(root: str, case: HostileCase, markers: str) -> str | None:
    """A recording whose model carries custom code (``auto_map`` -> a Python file
    that leaves a marker), and one naming a hub repository: the generated test
    refuses each before any process starts, saying which opt-in would allow it,
    and the model's code never runs."""
    from areal_debug.inspect.reproducer import extract, model_source

    model = os.path.join(root, "model-" + case.dirname)
    os.makedirs(model)
    with open(os.path.join(model, "config.json"), "w") as f:
        json.dump({"model_type": "qwen2", "auto_map": {"AutoConfig": "probe.C"}}, f)
    with open(os.path.join(model, "probe.py"), "w") as f:
        f.write(MODEL_CODE.format(marker=os.path.join(markers, "PWNED-model-code")))
    wants = {
        model: model_source.ALLOW_CODE_ENV,
        "org/model": model_source.ALLOW_HUB_ENV,
    }
    for i, (path, opt_in) in enumerate(wants.items()):
        named = HostileCase(case.experiment, case.trial, path, case.value, case.dirname)
        rec = os.path.join(root, f"code-rec-{i}-" + case.dirname)
        out = os.path.join(root, f"code-out-{i}-" + case.dirname)
        write_recording(rec, named)
        result = extract.extract(rec, 0, out)
        if not any(opt_in in n for n in result.notes):
            return f"extract did not say the model {path!r} needs {opt_in}"
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        env.pop(opt_in, None)
        cmd = [*PYTEST, "--import-mode=importlib", "-k", "replay_of", out]
        proc = subprocess.run(
            cmd, cwd=markers, env=env, capture_output=True, timeout=600, check=False
        )
        log = (proc.stdout + proc.stderr).decode(errors="replace")
        if proc.returncode == 0 or opt_in not in log or "1 failed" not in log:
            return f"the generated test did not refuse {path!r}: {log[-2000:]}"
    return None


def run(root: str, cases: int, seed: int, pages: int = 5) -> list[Tally]:
    """``cases`` generated cases (the first holds every fragment); the page check
    on the first ``pages`` of them where a headless browser is installed."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
    from support.browser import missing_browser

    rng = random.Random(seed)
    files = Tally("hostile names: extract", "fixed files, values read back exactly")
    shell = Tally("hostile names: shell words", "run_replay.sh, doctor: args unchanged")
    runs = Tally("hostile names: generated tests", "collected and run, no probe runs")
    page = Tally("hostile names: report page", "shown as text, no script of the data")
    code = Tally("hostile names: model code", "hub name, auto_map: refused unasked")
    os.makedirs(root, exist_ok=True)
    markers = tempfile.mkdtemp(prefix="markers-", dir=root)
    tok = tokenizer(os.path.join(root, "tokenizer"))
    browser = missing_browser() is None
    outs = []
    for i in range(cases):
        case = HostileCase.everything() if i == 0 else HostileCase.random(rng)
        where = os.path.join(root, f"case-{i}")
        os.makedirs(where)
        label = f"case {i} ({case.experiment!r})"
        files.record(_guarded(check_extract, where, case), label)
        outs.append(os.path.join(where, "out-" + case.dirname))
        shell.record(
            _guarded(check_replay_script, where, case, markers)
            or _guarded(check_doctor_words, case),
            label,
        )
        if browser and i < pages:
            page.record(_guarded(check_page, where, case, tok), label)
    # Once, with every fragment: each refusal is a pytest process of its own.
    where = os.path.join(root, "model-code")
    os.makedirs(where)
    everything = HostileCase.everything()
    code.record(
        _guarded(check_model_code, where, everything, markers), "every fragment"
    )
    ready = [o for o in outs if os.path.isdir(o)]
    runs.record(check_generated_tests(ready, markers) if ready else "nothing extracted")
    ran = sorted(os.listdir(markers))
    runs.record(f"probes ran: {ran}" if ran else None, "marker directory")
    return [files, shell, runs, code] + ([page] if browser else [])


def _guarded(check, *args) -> str | None:
    try:
        return check(*args)
    except Exception as e:  # a crash is a failure of the case, with its reason
        return f"{type(e).__name__}: {e}"
