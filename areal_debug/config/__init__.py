# SPDX-License-Identifier: Apache-2.0
"""Configuration: the ``debug:`` section and AReaL experiment configs that carry it.

- ``debug_config``: the section's keys (``RunKeys``, ``CompareKeys``, flat in
  ``DebugConfig``), their help and the checks of their values;
- ``trials``: where a recording is, which trial a replay runs under;
- ``sections``: AReaL experiment config classes with the section;
- ``checks``: a command line and a composed config checked before any process
  starts (mistyped keys with the closest ones, the recording, v2 controllers);
- ``loading``: ``load_expr_config`` and the composing behind it.
"""

from areal_debug.config.checks import (  # noqa: F401
    _dataclass_in,
    _field_type,
    _free_keys,
    _resolves,
    check_debug_keys,
    check_debug_section,
    check_recording,
    refuse_controller_v2,
    unknown_key_hint,
)
from areal_debug.config.debug_config import (  # noqa: F401
    _LAYER_DIGESTS_ALWAYS,
    CompareKeys,
    DebugConfig,
    DebugConfigError,
    RunKeys,
)
from areal_debug.config.loading import (  # noqa: F401
    _append_debug_overrides,
    _load_expr_config,
    agree_argv_with_allocation,
    compose_with_debug_overrides,
    load_expr_config,
)
from areal_debug.config.sections import (  # noqa: F401
    _PARSING_CLASSES,
    DebugGRPOConfig,
    DebugPPOConfig,
    DebugSection,
    _as_user_class,
    _parsing_class,
    debug_config_of,
    has_debug_section,
)
from areal_debug.config.trials import (  # noqa: F401
    REPLAY_TRIAL_SUFFIX,
    _rename_trial,
    default_recording_path,
    earlier_replays_note,
    recorded_trial_of,
    replaced_report_note,
    replay_trial,
    resolve_debug_config,
)
