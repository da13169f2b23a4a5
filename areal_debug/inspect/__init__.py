# SPDX-License-Identifier: Apache-2.0
"""Looking inside recordings and replays: the logic behind ``areal-debug`` commands.

One module per concept (``listing``, ``show``, ``resume``, ``tokens``, ...) and a
package per larger subject (``diff/``: two runs compared; ``plots/``: the PNGs;
``page/``: the report page; ``reproducer/``: extract; ``preflight/``: doctor).
Each returns typed data; only the command modules (``inspect/commands/``, one per
subcommand) read arguments and print.
"""
