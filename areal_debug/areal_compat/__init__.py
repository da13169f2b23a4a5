# SPDX-License-Identifier: Apache-2.0
"""The one door to AReaL: every private or undocumented AReaL symbol areal-debug uses.

One module per AReaL subject: ``versions`` (which AReaL is installed),
``trainer`` (PPOTrainer's hooks and state), ``engines`` (stage probes, the
inference-engine stand-ins, instance patches), ``single_controller``,
``schedulers``, ``launchers``, ``checkpoints`` (AReaL's recover checkpoint and
the layout of one kept with a recording) and ``config`` (composing, allocation
strings, log paths). Each entry names the AReaL file it mirrors and its location
in the supported wheels (1.0.4 and 2.0.0); ``tests/test_areal_contract.py``,
organised the same way, checks every entry against the installed AReaL, so a
release that moves one fails that test, naming it, instead of a training run on a
cluster. Public, documented API (``PPOTrainer``, ``PPOConfig``,
``load_expr_config``, ``areal.utils.logging``) is imported where it is used.

Every entry is reached here, ``areal_compat.NAME``, whichever module holds it:
a module is imported on its first use, so importing this package loads no AReaL.
Only ``trainer`` imports AReaL as it is imported (``TrainerHooks`` subclasses
``PPOTrainer``); the others import it inside the functions that need it, so the
light processes (the CLI, the writer process, the reliability suite's stand-in
runs) use ``versions`` and ``checkpoints`` without loading AReaL.
"""

from __future__ import annotations

import importlib

# Module -> the names it exports (the contract test checks that this lists every
# public name of every module, and each module's names only).
SUBJECTS: dict[str, tuple[str, ...]] = {
    "versions": (
        "SUPPORTED_AREAL",
        "TESTED_AREAL",
        "MINIMUM_AREAL",
        "TRAINER_HOOKS",
        "LAUNCHER_HOOKS",
        "missing_hooks",
        "ALLOW_ANY_VERSION_ENV",
        "UnsupportedArealError",
        "installed_areal_version",
        "installed_areal_build",
        "describe_areal_build",
        "AREAL_CHANGE_MOVES",
        "areal_build_change",
        "areal_release",
        "check_areal_version",
        "untested_areal",
    ),
    "trainer": (
        "TrainerHooks",
        "close_half_built",
        "export_and_commit_stats",
        "record_token_stats",
        "record_scalars",
        "stats_tracker_snapshot",
        "restore_stats_tracker",
        "stats_tracker_lengths",
        "LOSS_TOKEN_MASKS",
        "loss_token_counts",
        "trains_on_cpu",
        "cpu_group",
        "train_dp_size",
        "train_world_size",
        "rollout_dp_size",
        "rollout_backend",
        "online_mode",
        "teacher_dp_size",
        "teacher_backend",
        "collects_in_several_calls",
        "batch_users",
    ),
    "engines": (
        "STAGE_METHODS",
        "OPTIONAL_STAGE_METHODS",
        "stage_engine_classes",
        "stage_engines",
        "engine_named_parameters",
        "engine_model",
        "optimizer_steps",
        "engine_dp_group",
        "shadowed",
        "zero_gradients",
        "inference_engine_interface",
        "ROLLOUT_ENGINE_CALLERS",
        "TEACHER_ENGINE_CALLERS",
        "workflow_engine",
        "note_agenerate_failures",
        "MethodPatches",
        "SglangGuard",
    ),
    "single_controller": (
        "single_controller_mode",
        "worker_engine_class",
        "use_worker_engine_class",
        "call_engines",
        "rtensor_types",
        "fetch_rtensor_shards",
        "unpad_trajectory",
        "train_item_weight",
        "inference_server_info",
        "rollout_controller_class",
        "rollout_controller_version",
        "rollout_worker_engine_class",
        "watch_rollout_workers",
        "call_rollout_workers",
    ),
    "schedulers": (
        "scheduler_has_workers",
        "importable_class",
        "send_importable_config",
        "default_worker_commands",
        "run_rpc_server",
        "RAY_WORKER_SETUP_HOOK_ENV",
        "RAY_MIN_STARTUP_TIMEOUT",
        "ray_workers_are_actors",
        "is_ray_scheduler",
        "lengthen_ray_startup",
        "ray_connected",
    ),
    "launchers": (
        "parse_launcher_cli_args",
        "device_control_env_var",
        "cpu_safe_local_launcher_class",
        "job_exception_types",
        "LAUNCHER_ENV_PARAM",
        "LAUNCHER_CLASS_ATTR",
        "launcher_class",
        "run_launcher_main",
    ),
    "checkpoints": (
        "RECOVER_ACTOR_NAME",
        "RECOVER_CRITIC_NAME",
        "recover_model_names",
        "recover_paths",
        "LATEST_POINTER",
        "RecoverLayoutError",
        "checkpoint_pointer_module",
        "save_root",
        "saved_recover_paths",
        "install_generation",
        "generation_pointer",
        "DATALOADER_INFO",
        "write_dataloader_state",
        "recover_start_step",
        "last_recover_step",
        "KEPT_INFO_DIR",
        "KEPT_MODELS_DIR",
        "STEP_INFO",
        "kept_info_dir",
        "kept_model_dir",
        "kept_step_info",
        "kept_trees",
    ),
    "seams": (
        "Capability",
        "Seam",
        "SEAMS",
        "MissingSeam",
        "check_seams",
        "lost_capabilities",
        "refuses",
        "check_seams_at_start",
    ),
    "draws": (
        "rollout_dispatcher",
        "watch_submissions",
        "active_task_ids",
        "BATCHES_YIELDED",
        "UNTRAINED_KEY",
        "EPOCH_KEY",
        "batches_drawn",
        "read_dataloader_states",
        "serve_untrained_first",
        "untrained_served_first",
    ),
    "config": (
        "compose_config",
        "held_config_warnings",
        "TRAIN_BACKENDS",
        "allocation_spans",
        "allocation_backend",
        "allocation_name",
        "unnamed_allocation",
        "is_bare_allocation",
        "parse_allocation",
        "CONTROLLER_VERSION_KEYS",
        "controller_v2_keys",
        "allocation_train_world_size",
        "allocation_train_dp_size",
        "TRAIN_ENGINE_KEYS",
        "same_model_allocation",
        "trial_log_dir",
        "stats_log_dir",
    ),
}

_EXPORTS = {name: module for module, names in SUBJECTS.items() for name in names}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    # Kept here: the next look-up is a plain attribute, and a test that patches
    # areal_compat.NAME patches what every ``areal_compat.NAME`` caller reads.
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
