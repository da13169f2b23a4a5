# SPDX-License-Identifier: Apache-2.0
"""The report page's group view, its tokens outside the loss, its search and two
recordings side by side, in headless chromium, on small recordings written
through the real writer: GRPO groups (one with equal rewards), a multi-turn
sample whose completion holds a tool's output outside the loss, and a second
run whose step 1 generated another token for one sample."""

from __future__ import annotations

import os

import torch
from support.browser import needs_browser, open_page
from test_store import manifest

from areal_debug.cli import main
from areal_debug.inspect.page import report as html_report
from areal_debug.recording.writer.recording_writer import RecordingWriter
from areal_debug.recording.writer.start import write_manifest

# Group 0, sample 0: prompt 1 2 3, then the model's 10 11, a tool's 50 51
# (outside the loss), the model's 12.
MULTI_TURN = ([1, 2, 3, 10, 11, 50, 51, 12], [0, 0, 0, 1, 1, 0, 0, 1])


def group(rows: list[tuple[list[int], list[int]]], rewards: list[float]) -> dict:
    width = max(len(ids) for ids, _ in rows)

    def padded(values):
        return values + [0] * (width - len(values))

    return {
        "input_ids": torch.tensor([padded(ids) for ids, _ in rows], dtype=torch.int32),
        "loss_mask": torch.tensor([padded(m) for _, m in rows], dtype=torch.int32),
        "attention_mask": torch.tensor(
            [padded([1] * len(ids)) for ids, _ in rows], dtype=torch.bool
        ),
        "logprobs": -0.25 * torch.tensor([padded(m) for _, m in rows]).float(),
        "versions": torch.tensor(
            [padded([-1 if x == 0 else 0 for x in m]) for _, m in rows],
            dtype=torch.int32,
        ),
        "rewards": torch.tensor(rewards),
    }


def step_batch(step: int) -> list[dict]:
    answer = ([4, 5, 20 + step, 21], [0, 0, 1, 1])
    return [
        group([MULTI_TURN if step == 0 else answer, answer], [1.0, 0.0]),
        group([([6, 7, 30, 31], [0, 0, 1, 1]), ([6, 7, 32], [0, 0, 1])], [1.0, 1.0]),
        group([([8, 9, 40 + k], [0, 0, 1]) for k in range(3)], [0.0, 0.5, 1.0]),
    ]


def record(path: str, other: bool = False) -> None:
    """Two steps; ``other``: another run (trial t1) whose step 1 generated token
    99 in place of the second token of group 0's sample 1."""
    write_manifest(path, manifest(trial="t1" if other else "t0"))
    w = RecordingWriter(path, shard=0, num_shards=1, steps_per_epoch=10)
    for step in (0, 1):
        batch = step_batch(step)
        if other and step == 1:
            batch[0]["input_ids"][1, 3] = 99
        w.submit_batch(step, batch)
        w.submit_stats(step, {"ppo_actor/task_reward/avg": 0.5 + step * (1 - other)})
    w.close()


@needs_browser
def test_groups_side_by_side_tokens_in_place_and_search(tmp_path):
    rec, out = str(tmp_path / "rec"), str(tmp_path / "page.html")
    record(rec)
    html_report.build_report(rec, None, out)
    with open_page(out) as page:
        page.click(".stepbtn[data-step='0']")
        rows = page.locator("#group-table tr.group-row")
        assert rows.count() == 3
        # The group whose rewards are all equal is marked: it trains nothing.
        assert page.get_attribute("#group-table tr[data-group='1']", "class").endswith(
            "no-spread"
        )
        assert "equal rewards: zero advantage" in page.inner_text(
            "#group-table tr[data-group='1']"
        )
        assert page.locator("#group-table tr.no-spread").count() == 1
        # A group: its prompt once, its samples side by side.
        page.click("#group-table tr[data-group='2']")
        assert page.evaluate("location.hash") == "#step=0&group=2"
        assert page.locator("#group .card").count() == 3
        cards = page.locator("#group .card").all_inner_texts()
        assert [c.split("\n")[1] for c in cards] == [
            "reward 0",
            "reward 0.5",
            "reward 1",
        ]
        assert "advantage -0.5" in cards[0] and "advantage 0.5" in cards[2]
        assert page.inner_text("#group .group-prompt") == "<8> <9>"
        # From a group into a sample's tokens.
        page.click("#group .card[data-sample='2']")
        assert page.inner_text("#traj h2").startswith("Step 0, group 2, sample 2")
        # Back walks to the group again.
        page.go_back()
        assert page.evaluate("location.hash") == "#step=0&group=2"
        assert page.locator("#group .card").count() == 3
        # A link to a group opens it, and says so when it names none.
        page.goto(page.url.split("#")[0] + "#step=0&group=1")
        page.reload()
        assert "advantages are all zero" in page.inner_text("#no-spread")
        page.goto(page.url.split("#")[0] + "#step=0&group=7")
        page.reload()
        assert "names group 7 of step 0, which has 3 groups" in page.inner_text(
            "#link-note"
        )

        # The multi-turn sample: the tool's tokens stay where they are in the
        # completion, dimmed and uncoloured; the prompt is what came before.
        page.goto(page.url.split("#")[0] + "#step=0&group=0&sample=0")
        page.reload()
        assert page.inner_text("#tokens .prompt") == "<1> <2> <3>"
        tokens = page.locator("#tokens .tok").all_inner_texts()
        assert tokens == ["<10>", "<11>", "<50>", "<51>", "<12>"]
        masked = page.eval_on_selector_all(
            "#tokens .tok", "els => els.map(e => e.classList.contains('masked'))"
        )
        assert masked == [False, False, True, True, False]
        colours = page.eval_on_selector_all(
            "#tokens .tok:not(.masked)",
            "els => els.map(e => getComputedStyle(e).backgroundColor)",
        )
        assert len(colours) == 3 and "rgba(0, 0, 0, 0)" not in colours

        # Search across steps: by a completion's token id, by reward, by text.
        page.fill("#search", "id:51")
        assert page.inner_text("#found-count").startswith("1 trajectories")
        page.fill("#search", "reward>0.5")
        found = page.locator("#found-table tr.row")
        # Each step: group 0 sample 0, group 1 both, group 2 sample 2.
        assert page.inner_text("#found-count").startswith("8 trajectories")
        page.fill("#search", "<21>")
        assert page.inner_text("#found-count").startswith("3 trajectories")
        assert found.count() == 3
        page.click("#found-table tr.row >> nth=0")
        assert page.evaluate("location.hash") == "#step=0&group=0&sample=1"
        assert page.inner_text("#traj h2").startswith("Step 0, group 0, sample 1")
        assert page.errors == []
    assert os.path.getsize(out) < 200_000


@needs_browser
def test_two_recordings_side_by_side(tmp_path, capsys):
    a, b, out = str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "two.html")
    record(a)
    record(b, other=True)
    assert main(["report", a, b, "-o", out]) == 0
    assert "the runs part at step 1" in capsys.readouterr().out
    with open_page(out) as page:
        assert page.errors == []
        # The first step where the two part, named at the top and under the step.
        assert page.inner_text("#two-runs").startswith(
            "a exp/t0 and b exp/t1: the runs part at step 1, in completions."
        )
        assert page.get_attribute(".stepbtn[data-step='1']", "title") == (
            "b differs: completions"
        )
        assert "parted" not in page.get_attribute(".stepbtn[data-step='0']", "class")
        # b's statistics over a's in every chart.
        assert page.locator("polyline.oth").count() == page.locator(".chart").count()
        page.click(".stepbtn[data-step='1']")
        assert page.inner_text("#vs-b") == (
            "vs b exp/t1: completions of 1 sample(s) differ; start weights not compared."
        )
        in_b = page.eval_on_selector_all(
            "#traj-rows tr", "rs => rs.map(r => r.lastChild.textContent)"
        )
        assert sorted(in_b) == ["completion differs"] + ["same"] * 6
        # The sample that differs: its tokens and its pair's, aligned, the first
        # that differs outlined in both.
        page.click("#traj-rows tr:has-text('completion differs')")
        assert (
            page.inner_text("#pair-b h2") == "Its pair in b exp/t1: group 0, sample 1"
        )
        assert page.inner_text("#pair-note").startswith(
            "First differing completion token: 1 (a: <21>, b: <99>)"
        )
        for side in ("a", "b"):
            marked = page.eval_on_selector_all(
                f"#tokens-{side} .tok",
                "ts => ts.map(t => t.classList.contains('first-diff'))",
            )
            assert marked == [False, True]
        # A sample both generated alike says so.
        page.goto(page.url.split("#")[0] + "#step=1&group=2&sample=0")
        page.reload()
        assert page.inner_text("#pair-note").startswith("The same 1 completion tokens")
        assert page.errors == []
