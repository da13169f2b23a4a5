# SPDX-License-Identifier: Apache-2.0
"""Every comparison of a replay with its recording, in one home: the training
settings changed (config_changes), the statistics (statistics), the stages
(stages), the model (stages.compare_model), what a replay compares at each
step (replay) and the report it writes (report)."""
