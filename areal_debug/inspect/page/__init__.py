# SPDX-License-Identifier: Apache-2.0
"""The page `areal-debug report` writes: one self-contained HTML file.

``report`` gathers the run's and the replay's data and fills the template in;
``steps`` gathers each step's trajectories and tokens; ``template/`` is the
page itself (HTML, CSS and the script that draws it), inlined into every page.
"""
