# SPDX-License-Identifier: Apache-2.0
"""Hostile names, the fast slice of `make reliability`'s family
(reliability/hostile_names.py): a recording named with shell, Python, HTML and
template text and with directory names that are not UTF-8, through extract, the
generated tests, run_replay.sh, doctor's suggestions and the report page in a
headless browser. (The replay of such a reproducer: tests/test_cli_extract.py.)"""

import os

from support.browser import missing_browser
from support.system_parts import missing_system_part

from reliability import hostile_names


def test_hostile_names_stay_text_everywhere_areal_debug_writes_them(tmp_path):
    if (why := missing_browser()) is not None:
        missing_system_part(why)
    tallies = hostile_names.run(str(tmp_path), cases=3, seed=0, pages=2)
    by_family = {t.family: t for t in tallies}
    assert len(by_family) == 5, sorted(by_family)  # the page family included
    for tally in tallies:
        assert tally.all_handled, (tally.family, tally.failures)
    assert by_family["hostile names: report page"].tried == 2


def test_a_probe_that_runs_is_seen(tmp_path):
    """The marker probe can fail: a generated test that does run recorded text as
    a command leaves its file, and the family reports it."""
    markers = tmp_path / "markers"
    markers.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "test_probe.py").write_text(
        "import subprocess\n\n\ndef test_intact():\n"
        "    subprocess.run('true $(touch PWNED-dollar)', shell=True)\n"
    )
    assert hostile_names.check_generated_tests([str(out)], str(markers)) is None
    assert os.listdir(markers) == ["PWNED-dollar"]
