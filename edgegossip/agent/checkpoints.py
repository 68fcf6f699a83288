"""The running agent's checkpoints: what resuming needs, when one is due, and the copy of the
parameters a background write reads while training goes on."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np

from edgegossip import checkpoint
from edgegossip.config import AgentConfig
from edgegossip.dataplane.inbox import Inbox
from edgegossip.dataplane.sender import Snapshots
from edgegossip.protocol import Protocol
from edgegossip.storage import Storage

log = logging.getLogger(__name__)
# the rest of a checkpoint is the protocol's
AGENT_FIELDS = ("params", "momentum", "step", "replay", checkpoint.DIGEST)


class Checkpoints:
    def __init__(self, cfg: AgentConfig, digest: str | None):
        self.cfg = cfg
        self.digest = digest  # the compiled model's, recorded in every checkpoint
        self.out = Path(cfg.output)
        self.replay = np.zeros((0, 3), np.int64)  # the inbox's replay marks, as checkpointed
        self.kept: dict[str, np.ndarray] = {}  # the protocol's own fields, as checkpointed
        # set by the running agent once it has them
        self.inbox: Inbox | None = None
        self.protocol: Protocol | None = None
        self.storage: Storage | None = None
        self.pool: Snapshots | None = None  # where a background checkpoint copies x to
        self._next = time.monotonic() + cfg.checkpoint_every_s
        self._last_step = 0  # the step of the last checkpoint handed over or resumed from

    def resume(self, x: np.ndarray, momentum: np.ndarray) -> int | None:
        """Load the last checkpoint into x (and momentum, if it has one); its step, or None
        when there is none."""
        state = checkpoint.load(self.out)
        if state is None:
            return None
        if state["params"].shape != x.shape:
            raise ValueError(f"checkpoint in {self.out} is for another model")
        if checkpoint.DIGEST in state:  # one written before digests were recorded: not checked
            checkpoint.check_model(state, self.digest)
        np.copyto(x, state["params"])
        if "momentum" in state:  # checkpoints no longer keep it: it is rebuilt in a few steps
            np.copyto(momentum, state["momentum"])
        self.replay = state.get("replay", self.replay)
        self.kept = {k: v for k, v in state.items() if k not in AGENT_FIELDS}
        self._last_step = int(state["step"])
        log.info("resumed from step %d", self._last_step)
        return self._last_step

    def state(self, params: np.ndarray, step: int) -> dict[str, np.ndarray]:
        """What resuming needs: the parameters, the step, the inbox's replay marks and the
        protocol's own fields. Not the momentum buffer (as large as the model): a resumed
        agent rebuilds it within a few steps, and a checkpoint half the size halves the wear."""
        replay = self.inbox.links.state() if self.inbox is not None else self.replay
        kept = self.protocol.checkpoint() if self.protocol is not None else self.kept
        return {
            "params": params,
            "step": np.array(step),
            "replay": replay,
            **checkpoint.digest_array(self.digest),
            **kept,
        }

    def save(self, x: np.ndarray, step: int) -> bool:
        """Write a checkpoint now and wait for it (at stop, or when the operator asks); False if
        the disk refused it. The last good checkpoint then stays, and training goes on."""
        assert self.storage is not None, "save() belongs to a running agent"
        job = self.storage.checkpoint(self.state(x, step), step)
        job.finished.wait()
        return job.ok

    def now(self, x: np.ndarray, step: int) -> dict:
        """The operator's `checkpoint`: written and waited for, or an error for the reply."""
        if not self.save(x, step):
            assert self.storage is not None
            raise RuntimeError(self.storage.checkpoint_error or "not written")
        return {"path": str(self.out / checkpoint.NAME), "step": step}

    def due(self, step: int) -> bool:
        """By steps, counted from the last one handed over (or from the step resumed at), not
        step % every == 0: a checkpoint skipped because no copy was free is then still due at
        the next step instead of waiting a whole interval."""
        cfg = self.cfg
        by_steps = cfg.checkpoint_every and step - self._last_step >= cfg.checkpoint_every
        by_time = cfg.checkpoint_every_s and time.monotonic() >= self._next
        return bool(by_steps or by_time)

    def in_background(self, x: np.ndarray, step: int) -> None:
        """Hand the storage thread a copy of x to write while training goes on; when no copy
        is free (both are in an exchange), try again at the next step."""
        assert self.storage is not None and self.pool is not None
        if self.storage.busy.is_set():
            return
        snap = self.pool.take(x, count=False)
        if snap is None:
            return
        self.storage.checkpoint(self.state(snap.vec, step), step, done=snap.release)
        self._next = time.monotonic() + self.cfg.checkpoint_every_s
        self._last_step = step
