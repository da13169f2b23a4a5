# SPDX-License-Identifier: Apache-2.0
"""The reproducer (``areal-debug extract``): one recorded step as a directory with
its own test. ``files/`` holds the fixed test and replay script every extract
copies (package data, never generated from recorded text); ``model_source`` decides
which models the test may load."""
