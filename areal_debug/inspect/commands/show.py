# SPDX-License-Identifier: Apache-2.0
"""``areal-debug show``: one recorded step, trajectory by trajectory
(``inspect/show.py``)."""

from __future__ import annotations

import argparse

from areal_debug.inspect.commands.output import emit, json_flag, logs_to_stderr

ABOUT = (
    "show one recorded step trajectory by trajectory: texts, rewards, lengths, "
    "policy versions"
)
EXAMPLES = """examples:
  areal-debug show REC --step 3                   lengths, rewards, versions per trajectory
  areal-debug show REC --step 3 --traj 0,2 --decode   with prompt and completion texts
  areal-debug show REC --step 3 --decode --tokenizer /models/qwen --full
  areal-debug show REC --step 3 --json

Texts are decoded with the run's tokenizer (tokenizer_path or actor.path of the
recorded config) or --tokenizer. "versions" are the policy versions that
generated each completion's tokens, "staleness" the step minus them."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="recording directory (holds manifest.json)")
    p.add_argument("--step", type=int, required=True, help="global step to show")
    p.add_argument("--shard", type=int, help="only this shard (data-parallel head)")
    p.add_argument(
        "--group",
        "--traj",
        dest="traj",
        help="groups (trajectory dicts: a prompt and its samples) to show, e.g. "
        "0,3,5-7 (index in the step, or in --shard); the page and mismatch --top "
        "number them the same",
    )
    p.add_argument(
        "--decode", action="store_true", help="decode prompts and completions"
    )
    p.add_argument("--tokenizer", help="tokenizer to decode with (implies --decode)")
    p.add_argument(
        "--full",
        action="store_true",
        help="do not truncate texts (JSON: keep token ids)",
    )
    json_flag(p)


def run(args: argparse.Namespace) -> int:
    from areal_debug.inspect.common import parse_int_list

    with logs_to_stderr():
        from areal_debug.inspect import render, show

        view = show.view_step(
            args.path,
            args.step,
            shard=args.shard,
            trajectories=parse_int_list(args.traj, "--traj"),
            decode=args.decode or args.tokenizer is not None,
            tokenizer=args.tokenizer,
        )
    if args.json and not args.full:
        # Token ids are bulky; --full keeps them.
        for t in view.trajectories:
            for s in t.sequences:
                s.prompt_ids, s.completion_ids = [], []
    emit(args, view, render.show(view, args.full))
    return 0
