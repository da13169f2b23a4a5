# SPDX-License-Identifier: Apache-2.0
"""The wheel ships what `areal-debug demo` runs, and the installed copy finds it
in the installed package, not in a source checkout. Nothing here trains."""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHIPPED_CONFIGS = {"tiny_cpu.yaml", "tiny_cpu_sc.yaml", "gsm8k_grpo_debug.yaml"}

# Run by the installed copy: which files the demo would run, and the replay
# script it writes.
PROBE = """
import json, sys
from pathlib import Path
import areal_debug
from areal_debug import testing
from areal_debug.tooling import demo
wd = Path(sys.argv[1])
print(json.dumps({
    "package": areal_debug.__file__,
    "testing": testing.__file__,
    "demo": demo.__file__,
    "spmd_dump": demo.mode_command("dump", 1, 2),
    "sc_replay": demo.mode_command("replay", 1, 2, sc=True),
    "configs": [str(p) for p in testing.shipped_configs()],
    "replay_script": str(demo.write_replay_script(wd, 1, 2)),
}))
"""


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)


def build_wheel(tmp_path: Path) -> Path:
    """Build the checkout's wheel offline with the venv's setuptools.

    From a copy of the build inputs: an in-tree build would write build/ and
    an egg-info into the checkout, and setuptools packs whatever an earlier
    build left in build/lib, so the wheel could hold files the checkout no
    longer has."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(
        REPO / "areal_debug",
        src / "areal_debug",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    dist = tmp_path / "dist"
    pip = [sys.executable, "-m", "pip"]
    offline = ["--no-deps", "--no-index", "--no-cache-dir", "--quiet"]
    build = run([*pip, "wheel", *offline, "--no-build-isolation", "-w", dist, src])
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (wheel,) = dist.glob("areal_debug-*.whl")
    return wheel


def test_wheel_ships_the_demo_and_the_installed_copy_uses_it(tmp_path):
    wheel = build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"areal_debug/configs/{c}" for c in SHIPPED_CONFIGS} <= names
    in_checkout = {p.name for p in (REPO / "areal_debug" / "configs").glob("*.yaml")}
    assert {n.rsplit("/", 1)[1] for n in names if "/configs/" in n} == in_checkout
    assert {
        "areal_debug/examples/rlvr_debug.py",
        "areal_debug/testing.py",
        "areal_debug/tooling/__init__.py",
        "areal_debug/tooling/demo.py",
        "areal_debug/tooling/cpu_server.py",
        "areal_debug/tooling/tiny_task.py",
    } <= names
    # Moved for good: no stale top-level copies.
    assert not names & {
        f"areal_debug/{m}.py" for m in ("demo", "cpu_server", "tiny_task")
    }

    site = tmp_path / "site"
    install = run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index"]
        + ["--no-cache-dir", "--quiet", "--target", site, wheel]
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    site = site.resolve()

    # Away from the checkout, with only the installed copy on the path.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1"}

    help_run = run(
        [sys.executable, "-m", "areal_debug.cli", "demo", "--help"],
        cwd=elsewhere,
        env=env,
    )
    assert help_run.returncode == 0, help_run.stderr[-3000:]
    assert "areal-debug demo" in help_run.stdout
    assert "--single-controller" in help_run.stdout
    assert "--workdir" in help_run.stdout

    workdir = tmp_path / "wd"
    workdir.mkdir()
    probe = run([sys.executable, "-c", PROBE, str(workdir)], cwd=elsewhere, env=env)
    assert probe.returncode == 0, probe.stderr[-3000:]
    info = json.loads(probe.stdout.strip().splitlines()[-1])

    def installed(path) -> Path:
        p = Path(path).resolve()
        assert p.is_relative_to(site), f"{p} is not in the installed copy {site}"
        return p

    assert installed(info["package"]) == site / "areal_debug" / "__init__.py"
    installed(info["testing"])
    installed(info["demo"])
    for key, config in (
        ("spmd_dump", "tiny_cpu.yaml"),
        ("sc_replay", "tiny_cpu_sc.yaml"),
    ):
        cmd = info[key]
        i = cmd.index("--config")
        script, cfg = installed(cmd[i - 1]), installed(cmd[i + 1])
        assert script == site / "areal_debug" / "examples" / "rlvr_debug.py"
        assert cfg == site / "areal_debug" / "configs" / config
        assert script.is_file() and cfg.is_file()
    assert {installed(c).name for c in info["configs"]} == in_checkout
    # The replay script runs from anywhere: no cd, the installed example.
    text = Path(info["replay_script"]).read_text()
    assert "\ncd " not in text
    assert str(site / "areal_debug" / "examples" / "rlvr_debug.py") in text
    assert str(REPO / "areal_debug") not in text


# The AReaL an existing environment may hold: the tested releases, and one that
# reports a release areal-debug was not tested with (accepted at start when its
# hooks are there: areal_compat.check_areal_version).
AREAL_IN_USERS_ENVIRONMENTS = ("1.0.4", "2.0.0", "2.1.0", "3.0.0")


def test_installing_the_wheel_replaces_neither_areal_nor_torch(tmp_path):
    """Every requirement of the built wheel is met by what an AReaL environment
    already has, whichever AReaL it holds: pip, asked to install areal-debug
    there, replaces nothing (an upper bound on areal had made it swap a newer
    AReaL for 1.0.4, the one release the index serves)."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import Requirement

    wheel = build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as z:
        (meta,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        lines = z.read(meta).decode().splitlines()
    requirements = [
        Requirement(line.split(":", 1)[1].strip())
        for line in lines
        if line.startswith("Requires-Dist:")
    ]
    assert {r.name for r in requirements} >= {"areal", "torch"}
    for req in requirements:
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if req.name == "areal":
            for areal in AREAL_IN_USERS_ENVIRONMENTS:
                assert req.specifier.contains(areal, prereleases=True), (req, areal)
            continue
        if req.name == "torch":
            # Any torch the environment has: a pinned or bounded one could pull
            # another (CUDA) build.
            assert not req.specifier, req
        try:
            installed = version(req.name)
        except PackageNotFoundError:
            raise AssertionError(f"{req} is not installed in the AReaL venv") from None
        assert req.specifier.contains(installed, prereleases=True), (req, installed)


def test_testing_module_imports_neither_torch_nor_areal():
    """areal_debug.testing itself stays light (loaded alone, without the
    package's __init__, which loads AReaL's config classes)."""
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('t', {str(REPO / 'areal_debug' / 'testing.py')!r})\n"
        "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "print(sorted(m for m in ('torch', 'areal') if m in sys.modules))\n"
    )
    out = run([sys.executable, "-c", code])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
