# SPDX-License-Identifier: Apache-2.0
"""Loggers that cost nothing until they log.

Where AReaL is loaded (every training process) a logger is AReaL's own
(``areal.utils.logging.getLogger``: its format, colours and levels). The
``areal-debug`` command never imports AReaL, which takes seconds, just to have a
logger: there, a logger is the standard library's, under ``areal_debug.<name>``.
Where AReaL is not loaded yet, the choice is made at the first message, so
importing a module never loads AReaL.
"""

from __future__ import annotations

import logging
import sys
from typing import Any


class _Logger:
    def __init__(self, name: str):
        self._name = name
        self._logger: Any = None

    def _resolve(self) -> Any:
        if self._logger is None:
            if "areal" in sys.modules:
                from areal.utils import logging as areal_logging

                self._logger = areal_logging.getLogger(self._name)
            else:
                self._logger = logging.getLogger(f"areal_debug.{self._name}")
        return self._logger

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._resolve(), attr)


def get_logger(name: str) -> Any:
    """A logger named ``name``: AReaL's where AReaL is loaded, else the standard one.

    Where AReaL is already loaded the choice is made now, at import, as AReaL's own
    modules make it: ``areal.utils.logging.getLogger`` re-applies AReaL's logging
    configuration, binding every AReaL logger's handler to the current
    ``sys.stdout``, which is not for a first message in mid-run to do."""
    logger = _Logger(name)
    if "areal" in sys.modules:
        logger._resolve()
    return logger
