# SPDX-License-Identifier: Apache-2.0
"""areal-debug inspect / verify."""

import os

from test_store import record, traj

from areal_debug.cli import main
from areal_debug.recording.format import STEP_META, shard_payload_name, step_dirname


def test_inspect_lists_steps(tmp_path, capsys):
    record(str(tmp_path), {0: [[traj(0)]], 1: [[traj(1)]]}, steps_per_epoch=5)
    assert main(["inspect", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "0-1 complete" in out and "1 shard(s) per step, 5 steps/epoch" in out
    # Each step's payload in a unit that shows it (a tiny step read "0.00" MiB).
    rows = [line.split() for line in out.splitlines() if line.startswith("     ")]
    assert [r[0] for r in rows] == ["0", "1"], out
    assert all(r[-3] != "0.00" and r[-2] in ("B", "KiB") for r in rows), out


def test_verify_passes_then_names_the_damaged_file(tmp_path, capsys):
    record(str(tmp_path), {0: [[traj(0)]], 1: [[traj(1)]]})
    assert main(["verify", str(tmp_path)]) == 0
    assert "4/4 files of 2 steps verified; 0 problem(s)" in capsys.readouterr().out
    payload = tmp_path / step_dirname(1) / shard_payload_name(0, "zstd")
    data = bytearray(payload.read_bytes())
    data[-1] ^= 0xFF
    payload.write_bytes(bytes(data))
    os.unlink(tmp_path / step_dirname(0) / STEP_META)
    assert main(["verify", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"FAIL Checksum mismatch in {payload}" in out
    assert "step 0 is incomplete" in out


def test_bad_path_is_one_clear_line(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("areal-debug: No recording at") and "Traceback" not in err


def test_verify_shows_progress_only_to_a_person(tmp_path, capsys, monkeypatch):
    from areal_debug.inspect import common

    record(str(tmp_path), {0: [[traj(0)]], 1: [[traj(1)]], 2: [[traj(2)]]})
    seen = []
    real_track = common.track
    monkeypatch.setattr(
        common,
        "track",
        lambda items, *a, **k: (
            seen.append(list(items)),
            real_track(seen[-1], *a, **k),
        )[1],
    )
    assert main(["verify", str(tmp_path)]) == 0
    assert seen == [[0, 1, 2]]
    # Captured output is not a terminal: the bar stays off, the report is whole.
    assert capsys.readouterr().out.endswith(
        "6/6 files of 3 steps verified; 0 problem(s).\n"
    )


FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "recording-v1")


def modules_after(argv: list[str]) -> dict:
    """Run ``areal-debug ARGV`` in a fresh interpreter; which heavy packages it loaded."""
    import json
    import subprocess
    import sys

    code = (
        "import json, sys\n"
        "from areal_debug.cli import main\n"
        "try:\n"
        f"    rc = main({argv!r})\n"
        "except SystemExit as e:\n"  # --help
        "    rc = e.code\n"
        "print(json.dumps({'rc': rc, 'torch': 'torch' in sys.modules,"
        " 'areal': 'areal' in sys.modules}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_metadata_commands_import_neither_areal_nor_torch(tmp_path):
    """--help, ls and inspect read JSON only: they start in a fraction of a second
    (make bench: cli_help_seconds, cli_ls_seconds) because they load neither."""
    import shutil

    recording = tmp_path / "tiny" / "t0" / "areal_debug_recording"
    shutil.copytree(FIXTURE, recording)
    for argv in (["--help"], ["ls", str(tmp_path)], ["inspect", str(recording)]):
        assert modules_after(argv) == {"rc": 0, "torch": False, "areal": False}, argv
    # What reads a payload loads torch (and still not AReaL).
    shown = modules_after(["show", str(recording), "--step", "0"])
    assert shown == {"rc": 0, "torch": True, "areal": False}


def test_processes_that_need_no_areal_load_none():
    """The writer process, the CPU server and the reliability suite's stand-in
    runs (and their writer processes) import no AReaL: `import areal` loads its
    whole stack, about 8 s of CPU in every such process. A module of the
    training side, for contrast, does load it."""
    import json
    import subprocess
    import sys

    code = (
        "import importlib, json, sys\n"
        "for name in sys.argv[1:]:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps('areal' in sys.modules))\n"
    )

    def loads_areal(*modules: str) -> bool:
        out = subprocess.run(
            [sys.executable, "-c", code, *modules],
            capture_output=True,
            text=True,
            check=True,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        ).stdout
        return json.loads(out.strip().splitlines()[-1])

    assert not loads_areal(
        "areal_debug.recording.writer.process.client",
        "areal_debug.recording.writer.process.server",
        "areal_debug.recording.writer.recording_writer",
        "areal_debug.recording.checkpoints",
        "areal_debug.tooling.cpu_server",
        "areal_debug.modes.rng_state",
        "reliability.dump_child",
        "reliability.writer_child",
    )
    assert loads_areal("areal_debug.modes.dump")


def test_printed_commands_run_in_the_shell_they_are_printed_for(monkeypatch):
    """The demo's next: lines and extract's run it: line name areal-debug and the
    interpreter as the user's shell finds them: bare where PATH has this venv's,
    else by path (a venv not activated: "command not found" otherwise)."""
    import os
    import sys

    from areal_debug.inspect.common import cli_command, python_command

    here = os.path.dirname(os.path.abspath(sys.executable))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert cli_command() == os.path.join(here, "areal-debug")
    assert python_command() == sys.executable
    monkeypatch.setenv("PATH", f"{here}:/usr/bin:/bin")
    assert cli_command() == "areal-debug"
    assert python_command() in ("python", sys.executable)
