# SPDX-License-Identifier: Apache-2.0
"""A writer process that first reports where it imports from (its sys.path, the
standard library's and the site-packages directories, the file ``areal_debug``
came from) as JSON into the file named by ``$REPORT_ENV``, then serves as the
real one; run as ``writer.process.client.CHILD_MODULE``."""

import json
import os
import site
import sys
import sysconfig

import areal_debug
from areal_debug.recording.writer.process import server

REPORT_ENV = "AREAL_DEBUG_TEST_SYS_PATH_REPORT"

if __name__ == "__main__":
    with open(os.environ[REPORT_ENV], "w") as f:
        json.dump(
            {
                "sys_path": sys.path,
                "stdlib": sysconfig.get_paths()["stdlib"],
                "site_packages": [*site.getsitepackages(), site.getusersitepackages()],
                "areal_debug": areal_debug.__file__,
            },
            f,
        )
    sys.exit(server._main(sys.argv[1:]))
