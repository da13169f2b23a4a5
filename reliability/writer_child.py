# SPDX-License-Identifier: Apache-2.0
"""The writer process of a reliability dump child: the dump child's kill point,
installed here too (``writer.process.client.CHILD_MODULE`` names this module),
then the writer process's own loop."""

import sys

from areal_debug.recording.writer.process import server
from reliability.dump_child import kill_in_writer_process

if __name__ == "__main__":
    kill_in_writer_process()
    sys.exit(server._main(sys.argv[1:]))
