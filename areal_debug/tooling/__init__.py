# SPDX-License-Identifier: Apache-2.0
"""Tooling around the plugin, not the plugin.

``areal_debug.tooling`` holds what lets areal-debug be shown and tested on a
machine without GPUs; a training script that uses ``DebugPPOTrainer`` never
imports any of it:

- ``cpu_server``: a CPU inference server speaking the part of SGLang's HTTP
  API that AReaL uses (``python -m areal_debug.tooling.cpu_server``);
- ``tiny_task``: the tiny offline model and arithmetic task it serves;
- ``demo``: ``areal-debug demo``, a real GRPO run on CPU recorded and replayed.

The example script and configs the demo runs ship as package data in
``areal_debug/examples`` and ``areal_debug/configs``; ``areal_debug.testing``
names them, with the commands and environment to run them.
"""
