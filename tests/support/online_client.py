# SPDX-License-Identifier: Apache-2.0
"""A client of AReaL's proxy gateway, as an online-mode user's agent would be.

In online mode (``rollout.agent.mode: online``) the trainer waits for outside
sessions: start a session with the admin key, talk to the model with the session's
key, set a reward, end the session. Each finished session is one trajectory.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

GATEWAY_LINE = re.compile(r"Proxy gateway available at ((?:https?://)?[\w.:-]+)")


def _post(url: str, key: str, body: dict, timeout: float = 60) -> dict:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read() or b"{}")


def gateway_address(log_path: Path, stop: threading.Event) -> str | None:
    """The gateway address the trainer logs once its proxy is up."""
    while not stop.is_set():
        if log_path.exists():
            m = GATEWAY_LINE.search(log_path.read_text(errors="replace"))
            if m:
                addr = m.group(1).rstrip(".:")
                return addr if "://" in addr else f"http://{addr}"
        time.sleep(0.5)
    return None


class OnlineClient(threading.Thread):
    """Runs sessions against the gateway named in ``log_path`` until stopped."""

    def __init__(self, log_path: Path, admin_key: str):
        super().__init__(daemon=True)
        self.log_path = log_path
        self.admin_key = admin_key
        self.stop = threading.Event()
        self.finished = 0
        self.errors: list[str] = []

    def run(self) -> None:
        gateway = gateway_address(self.log_path, self.stop)
        i = 0
        while gateway is not None and not self.stop.is_set():
            i += 1
            try:
                self._session(gateway, i)
                self.finished += 1
            except (urllib.error.URLError, OSError, KeyError, ValueError) as e:
                # No ready worker yet (429), the model answered with EOS only
                # (AReaL's proxy gives 500), or the run is ending: try again.
                self.errors.append(f"session {i}: {e}")
                time.sleep(0.5)

    def _session(self, gateway: str, i: int) -> None:
        session = _post(
            f"{gateway}/rl/start_session", self.admin_key, {"task_id": f"task-{i}"}
        )
        key = session["api_key"]
        try:
            a, b = i % 7, (3 * i) % 5
            comp = _post(
                f"{gateway}/chat/completions",
                key,
                {
                    "model": "default",
                    "messages": [{"role": "user", "content": f"what is {a} + {b} ?"}],
                    "max_completion_tokens": 8,
                    "temperature": 1.0,
                },
            )
            text = comp["choices"][0]["message"].get("content") or ""
            # 0.5 or 1.0: a reward no other path would produce, so a test can
            # tell the client's rewards reached the trainer.
            reward = 1.0 if str(a + b) in text else 0.5
            _post(f"{gateway}/rl/set_reward", key, {"reward": reward})
        finally:
            _post(f"{gateway}/rl/end_session", key, {})

    def close(self) -> None:
        self.stop.set()
        self.join(timeout=30)
