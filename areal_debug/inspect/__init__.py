# SPDX-License-Identifier: Apache-2.0
"""Looking inside recordings and replays: the logic behind ``areal-debug`` commands.

One module per concept (``listing``, ``show``, ``diff``, ``plot``, ``extract``,
``doctor``, ``html_report``, ...). Each returns typed data; only the command
modules (``inspect/commands/``, one per subcommand) read arguments and print.
"""
