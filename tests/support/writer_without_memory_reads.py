# SPDX-License-Identifier: Apache-2.0
"""A writer process where reading the training process's memory is refused
(process_vm_readv fails with EPERM, as a ptrace policy would); run as
``writer.process.client.CHILD_MODULE``."""

import ctypes
import errno
import sys

from areal_debug.recording.writer.process import memory, server


def refused(*args):
    ctypes.set_errno(errno.EPERM)
    return -1


if __name__ == "__main__":
    memory._process_vm_readv = lambda: refused
    sys.exit(server._main(sys.argv[1:]))
