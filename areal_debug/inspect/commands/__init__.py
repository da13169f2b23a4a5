# SPDX-License-Identifier: Apache-2.0
"""The ``areal-debug`` subcommands, one module each: its ``--help`` text, the
function adding its arguments, and the one running it (``areal_debug.cli`` holds
the table of them).

A command module reads its arguments, calls the logic of its concept (``inspect/``,
``stages/``, ``tooling/``) and writes the result; it imports nothing heavy at its
top, so that ``areal-debug --help``, which loads every one of them, loads neither
torch nor AReaL (``tests/test_cli.py`` checks which commands load what).
"""
