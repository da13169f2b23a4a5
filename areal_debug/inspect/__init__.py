# SPDX-License-Identifier: Apache-2.0
"""Looking inside recordings and replays: the logic behind ``areal-debug`` commands.

One module per subcommand (``listing``, ``show``, ``diff``, ``plot``, ``extract``,
``doctor``). Each returns typed data; only :mod:`areal_debug.cli` prints.
"""
