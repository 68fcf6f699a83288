"""The long-running process on one device: composes data, model, optimizer, protocol, transport,
checkpoints and metrics from one AgentConfig. Stops cleanly on SIGTERM/SIGINT (final checkpoint,
sockets closed) and resumes from its last checkpoint after a crash."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from edgegossip.models.onnx_backend import OnnxTrainer

from edgegossip import __version__, algorithms, checkpoint, clock
from edgegossip.agent import report
from edgegossip.agent.checkpoints import Checkpoints
from edgegossip.agent.keys import link_keys
from edgegossip.agent.reload import Live, Reader, apply, config_hash
from edgegossip.agent.shard import Shard, after_prefix, held, load_data
from edgegossip.algorithms.base import CLOSING_ALPHA, SNAPSHOTS
from edgegossip.config import AgentConfig, ConfigError
from edgegossip.control.server import Controls
from edgegossip.data import device
from edgegossip.dataplane import payload
from edgegossip.dataplane.plane import DataPlane, PlaneSpec
from edgegossip.dataplane.sender import Snapshots
from edgegossip.metrics import peak_rss_mb
from edgegossip.models import ONNX_MISSING, footprint, make_model, onnx_available
from edgegossip.models.base import Model
from edgegossip.models.optim import NesterovSGD
from edgegossip.protocol import Context, Protocol, make_protocol
from edgegossip.protocol.base import Stopped
from edgegossip.storage import StepTimes, Storage, checkpoint_bytes, metrics_share
from edgegossip.transport.lossmodel import LossModel
from edgegossip.transport.peers import PeerBook

log = logging.getLogger(__name__)
# the closing phase (train.phase): a step is the exchanges alone, then this pause; a record
# (a held-out evaluation, the most such an agent does) at most every CLOSING_RECORD_S
CLOSING_TICK_S = 0.01
CLOSING_RECORD_S = 5.0
# a record's held-out evaluation takes at most this share of a device's time: on 8 emulated
# boards (Fashion CNN, eval_examples 2000) a Pi Zero 2 W spent 26 s of its 2% of a core on one,
# a third of its training time and nearly all of a 30 s closing phase (5 closing steps in it)
EVAL_SHARE = 0.1


def injected(cfg: AgentConfig) -> LossModel | None:
    """The loss a loopback emulation injects on receive, as its config names it; None: none."""
    if not cfg.inject_loss:
        return None
    return LossModel(cfg.inject_loss_model, cfg.inject_loss, cfg.inject_burst)


def _check_digest(cfg: AgentConfig, digest: str | None) -> None:
    """A fleet's device trains the model the operator shipped, or does not start."""
    if cfg.model_digest and digest != cfg.model_digest:
        held = "a named model" if digest is None else f"model {digest[:12]}"
        raise ConfigError(
            f"train.model: {cfg.model} holds {held}, not the fleet's {cfg.model_digest[:12]}: "
            "run `edgegossip fleet deploy` again"
        )


def _check_fits(cfg: AgentConfig, model, data: device.DeviceData) -> None:
    """A compiled model whose step, as model compile measured it, and data exceed this device's
    memory is refused before it trains, not killed by the kernel mid-run (models/footprint.py)."""
    if model.digest is None:
        return
    why = footprint.refusal(cfg.model, cfg.batch, *held(model, data))
    if why is not None:
        raise ConfigError(f"train.batch: {why}")


class Agent:
    def __init__(self, cfg: AgentConfig, data: device.DeviceData | None = None):
        self.model = make_model(cfg.model, cfg.seed, cfg.inputs, cfg.classes)
        _check_digest(cfg, self.model.digest)
        # a compiled model's manifest says its shapes; the settings say the named models'
        inputs, classes = self.model.shapes(cfg.inputs, cfg.classes)
        cfg = self.cfg = replace(cfg, inputs=inputs, classes=classes)
        self.out = Path(cfg.output)
        self.stop_event = threading.Event()
        self.reload_event = threading.Event()  # SIGHUP: read the config again (reload.py)
        self.config_path: str | None = None  # where the CLI read cfg from; reload reads it
        self.restart = False  # stopped to restart on a changed config
        self.live: Live | None = None  # what a reload reaches, while run() runs
        self.reader: Reader | None = None  # reads agent.toml on SIGHUP, while run() runs
        self.data = self._data(cfg, data)
        self.x = self.model.init(cfg.seed)  # one shared initialisation across the fleet
        # a relative payload (delta4) sends against that initialisation: a copy of its own
        x0 = self.x.copy() if payload.CODECS[cfg.payload].relative else None
        self.codec = payload.codec(cfg.payload, reference=x0)
        self.plan = self.codec.plan(self.model.n_params, cfg.chunk_bytes)
        self.shard = Shard(cfg, self.data)
        self.opt = NesterovSGD(self.model.n_params, cfg.lr, cfg.momentum)
        self.algorithm = algorithms.get(cfg.algorithm)
        if self.algorithm.datagrams and cfg.transport == "zmq":  # refused before the data loads
            from edgegossip.transport.zmq import require_draft

            require_draft()
        self._trainer(cfg)
        self.step = 0
        self._last: dict | None = None
        self._first_step = 0
        self._t0 = time.monotonic()
        self.config_hash = config_hash(cfg)
        self.rng = np.random.default_rng([cfg.seed, cfg.id, 7])
        self.storage: Storage | None = None  # opened by run()
        self._starting = True  # until the clock wait at start is over
        self._steps = StepTimes()
        self._ticks = 0  # steps of the closing phase taken (_close_tick)
        self._closing = False  # in the closing phase now (_closing_now)
        self._next_record = 0.0
        self._threads: dict = {}  # the agent's other threads by role, for their CPU time
        try:
            metrics_share(int(cfg.budget_mb * 1e6), checkpoint_bytes(self.plan.n_params))
        except ValueError as e:
            raise ConfigError(str(e)) from None
        checkpoint.clean(self.out)
        self.checkpoints = Checkpoints(cfg, self.model.digest)
        resumed = self.checkpoints.resume(self.x, self.opt.v)
        self.resumed = resumed is not None
        if resumed is not None:
            self.step = resumed
            self.rng = np.random.default_rng([cfg.seed, cfg.id, 7, self.step])
        self.keys = link_keys(cfg) if self.algorithm.datagrams else None
        if self.keys is not None and self.model.digest is not None:
            self.keys = self.keys.bound(self.model.digest)

    def _data(self, cfg: AgentConfig, data: device.DeviceData | None) -> device.DeviceData:
        """This device's data (loaded here unless given), checked to fit beside the model's
        step, as a frozen prefix computes it where the model has one (computed once)."""
        data = data if data is not None else load_data(cfg, self.model)
        _check_fits(cfg, self.model, data)
        return after_prefix(self.model, data)

    def _trainer(self, cfg: AgentConfig) -> None:
        """What computes loss and gradient (NumPy, or onnxruntime), and its gradient buffer."""
        self.backend: Model | OnnxTrainer = self.model
        # NumPy MLP under gossip: the optimiser steps layer by layer inside the backward pass,
        # so the gradient buffer holds one layer, not the model (all-reduce needs it whole)
        self.layerwise = (
            cfg.backend == "numpy" and self.model.layerwise and not self.algorithm.whole_gradient
        )
        self.g = np.zeros(
            self.model.max_layer_params() if self.layerwise else self.model.n_params, np.float32
        )
        if cfg.backend == "onnx" and self.model.digest is None:  # a compiled one is onnx
            if not onnx_available():
                raise ConfigError(f"train.backend: {ONNX_MISSING}")
            from edgegossip.models.onnx_backend import OnnxTrainer

            self.backend = OnnxTrainer(self.model)  # validate(): a model the onnx backend runs

    def _checkpoint_now(self) -> dict:
        return self.checkpoints.now(self.x, self.step)

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop_event.set())
        signal.signal(signal.SIGHUP, lambda *_: self.reload_event.set())

    def _step_layer(self, lo: int, hi: int, g: np.ndarray) -> None:
        self.opt.step_slice(self.x, g, lo, hi)

    def _open_control(self, controls):
        """The control socket, when the config asks for one; None otherwise."""
        cfg = self.cfg
        if not cfg.endpoint:
            return None
        import zmq

        from edgegossip.control.server import ControlServer

        try:
            return ControlServer(
                cfg.endpoint, cfg.server_key, cfg.client_keys, controls, cfg.allow_from
            ).start()
        except (OSError, ValueError, zmq.ZMQError) as e:
            raise ConfigError(f"control: cannot serve {cfg.endpoint}: {e}") from None

    def _open_metrics(self, status):
        """The /metrics endpoint, when the config asks for one; None otherwise (the client
        library is not even imported then)."""
        cfg = self.cfg
        if not cfg.metrics_endpoint:
            return None
        from edgegossip.control.prometheus import MetricsServer

        try:
            return MetricsServer(cfg.metrics_endpoint, status, cfg.metrics_allow_from).start()
        except OSError as e:
            raise ConfigError(f"metrics: cannot serve {cfg.metrics_endpoint}: {e}") from None

    def status(self, ctx: Context, sender, inbox, controls, protocol) -> dict:
        """What the control endpoint's `status` answers (control/messages.py), and what a
        /metrics scrape reads (control/prometheus.py): counters only, nothing evaluated."""
        last = self._last or {}
        state = (
            "stopping"
            if self.stop_event.is_set()
            else "starting"
            if self._starting
            else "paused"
            if controls.paused.is_set()
            else "closing"
            if self._closing
            else "training"
        )
        return {
            **self._counters(ctx, sender, inbox, protocol),
            "algorithm": self.cfg.algorithm,
            "version": __version__,
            "config_hash": self.config_hash,
            "model_digest": self.model.digest,
            "state": state,
            "loss": last.get("loss"),
            "accuracy": last.get("accuracy"),
            "eval_mse": last.get("eval_mse"),
            "uptime_s": round(time.monotonic() - self._t0, 1),
        }

    def _counters(self, ctx: Context, sender, inbox, protocol) -> dict:
        """What status and every metrics record both carry: counters read as they are,
        nothing evaluated (catalog.py says what each is)."""
        return {
            "agent": self.cfg.id,
            "step": self.step,
            "epoch": round(self.step / self.shard.steps_per_epoch, 3),
            "clock": clock.state(),
            "exchanges": dict(ctx.exchanges),
            "peak_rss_mb": peak_rss_mb(),
            **(self.storage.report() if self.storage is not None else {}),
            **report.traffic(ctx, sender, inbox, protocol),
        }

    def _open_plane(self, peers: PeerBook) -> DataPlane | None:
        cfg = self.cfg
        if not self.algorithm.datagrams:  # ZeroMQ's TCP connect resolves names itself
            return None
        peers.resolve(wait_s=cfg.peer_wait_s)
        spec = PlaneSpec(
            cfg.transport,
            cfg.listen_endpoint,
            cfg.fleet,
            cfg.id,
            rate_bytes_per_s=cfg.rate_mbps * 1e6 / 8,
            congestion=cfg.congestion,
            gso=cfg.gso,
            encrypt=cfg.encrypt,
            session=checkpoint.next_session(self.out),  # before anything is sent
            inject=injected(cfg),
            loss_seed=cfg.id + self.step,
            senders=frozenset(peers),
            rps_blocks=cfg.workers if self.algorithm.rps_blocks else 0,
            slices=cfg.slices,
            # gossip: buffers for the exchanges in flight, not for every peer
            receive_buffers=self.algorithm.receive_buffers_for(self.model.n_params),
            messages=self.algorithm.messages,
            stale_s=cfg.deadline_s,
        )
        assert self.keys is not None  # datagrams: link keys were loaded at start
        plane = DataPlane(
            spec, self.plan, self.keys, self.codec, peers, replay=self.checkpoints.replay
        )
        self.checkpoints.inbox = plane.inbox
        return plane

    def run(self) -> dict:
        """Train until the step or time limit, or a stop; every resource this opens is closed
        by one ExitStack, in reverse, after a last checkpoint and a last metrics record."""
        cfg = self.cfg
        with contextlib.ExitStack() as stack:
            peers = PeerBook({p.id: (p.host, p.port) for p in cfg.peers})
            stack.callback(peers.close)
            plane = self._open_plane(peers)
            if plane is not None:
                stack.callback(plane.close)
                self._threads.update(plane.threads())
            inbox = plane.inbox if plane is not None else None
            sender = plane.sender if plane is not None else None
            # base.SNAPSHOTS copies of the parameters in flight at most
            snapshots = Snapshots(self.plan.n_params, SNAPSHOTS) if sender is not None else None
            rounds = inbox.rounds if inbox is not None else None
            ctx = Context(
                cfg, self.plan, rounds, sender, peers, self.rng, snapshots, stop=self.stop_event
            )
            protocol = make_protocol(ctx)
            stack.callback(protocol.close)
            protocol.restore(self.checkpoints.kept)
            self.live = Live(peers, plane, protocol, ctx)
            self.checkpoints.protocol = protocol
            controls = Controls(
                lambda: self.status(ctx, sender, inbox, controls, protocol), self.stop_event
            )
            # the files and sockets the agent needs are open before the control port: an
            # outsider's flood of connections to it can use up the descriptors (EMFILE)
            self.storage = self.checkpoints.storage = metrics = Storage(
                self.out,
                int(cfg.budget_mb * 1e6),
                checkpoint_bytes(self.plan.n_params),
                resumed_step=self.step if self.resumed else -1,
            )
            stack.callback(metrics.close)
            self._threads["storage"] = metrics._thread
            if self.config_path is not None:
                self.reader = self._read_on_sighup(metrics)
                stack.callback(self.reader.close)
            scrape = self._open_metrics(controls.status)
            if scrape is not None:
                stack.callback(scrape.close)
            control = self._open_control(controls)
            if control is not None:
                stack.callback(control.close)
            self.checkpoints.pool = snapshots or Snapshots(self.plan.n_params, 1)
            self._first_step = self.step
            losses: list[float] = []
            self._start(metrics)
            self._starting = False
            try:
                self._train(protocol, controls, metrics, losses, (ctx, sender, inbox))
            finally:
                self.checkpoints.save(self.x, self.step)
                final = self._record(losses, ctx, sender, inbox, protocol)
                metrics.record({**final, "event": "stop"})
        return final

    def _read_on_sighup(self, metrics: Storage) -> Reader:
        assert self.config_path is not None
        return Reader(
            self.config_path,
            self.reload_event,
            self.stop_event,
            lambda why: metrics.record(
                {"event": "reload_refused", "agent": self.cfg.id, "step": self.step, "why": why}
            ),
        )

    def _start(self, metrics: Storage) -> None:
        """The start record, then the wait for a synchronised clock (answering status
        meanwhile, state "starting", so a device that waits is seen) and its record."""
        cfg = self.cfg
        metrics.record(
            {
                "event": "start",
                "agent": cfg.id,
                "step": self.step,
                "resumed": self.resumed,
                "algorithm": cfg.algorithm,
                "transport": cfg.transport,
                # trains on a frozen prefix's outputs, computed once (compiler/prefix.py)
                "prefix_cached": getattr(self.model, "on_prefix", False),
            }
        )
        waited = time.monotonic()
        now = clock.wait(cfg.clock_wait_s, self.stop_event)
        metrics.record(
            {
                "event": "clock",
                "agent": cfg.id,
                "step": self.step,
                "clock": now,
                "waited_s": round(time.monotonic() - waited, 1),
            }
        )

    def _train(
        self, protocol: Protocol, controls, metrics, losses: list[float], seen: tuple
    ) -> None:
        cfg = self.cfg
        storage = self.storage
        assert storage is not None
        t0 = time.monotonic()
        while not self.stop_event.is_set():
            if cfg.max_steps and self.step >= cfg.max_steps:
                break
            if cfg.duration_s and time.monotonic() - t0 >= cfg.duration_s:
                break
            new = self.reader.take() if self.reader is not None else None
            if new is not None:
                apply(self, new)
                continue  # a restart stops the loop at its top
            controls.wait_while_paused(self._checkpoint_now)
            controls.serve_checkpoint(self._checkpoint_now)
            if self._closing_now(t0, seen[0]):
                self._close_tick(protocol, metrics, seen)
                continue
            self._steps.start()  # a step's time: not the pause, not the evaluation
            protocol.before_step(self.x, self.step)
            xb, yb = self.shard.batch_at(self.step)
            if self.layerwise:
                loss = self.model.loss_grad_layerwise(
                    self.x, self.g, xb, yb, self.rng, self._step_layer
                )
            else:
                loss = self.backend.loss_grad(self.x, self.g, xb, yb, self.rng)
                try:
                    protocol.step(self.x, self.g, self.opt)
                except Stopped:  # stopping mid all-reduce: this step is not taken
                    break
            losses.append(loss)
            self.step += 1
            protocol.after_step(self.x, self.step)
            self._steps.tick(writing=storage.busy.is_set())
            if self.step % cfg.eval_every == 0 and time.monotonic() >= self._next_record:
                self._record_now(losses, seen, protocol, metrics, cfg.record_every_s)
                losses.clear()
            if self.checkpoints.due(self.step):
                self.checkpoints.in_background(self.x, self.step)

    def _closing_now(self, t0: float, ctx: Context) -> bool:
        """In the closing phase (train.phase, or the last closing_s of duration_s): no more
        training, every step an exchange (algorithms/base.py: CLOSING_ALPHA). Entering it
        sets the protocol's p and alpha (again after a reload of the peers)."""
        cfg = self.cfg
        late = cfg.closing_s > 0 and time.monotonic() - t0 >= cfg.duration_s - cfg.closing_s
        if cfg.phase != "closing" and not late:
            if (ctx.cfg.p, ctx.cfg.alpha) != (cfg.p, cfg.alpha):  # back to training (reload.py)
                ctx.cfg = replace(ctx.cfg, p=cfg.p, alpha=cfg.alpha)
            self._closing = False
            return False
        if (ctx.cfg.p, ctx.cfg.alpha) != (1.0, CLOSING_ALPHA):
            ctx.cfg = replace(ctx.cfg, p=1.0, alpha=CLOSING_ALPHA)
        if not self._closing:
            self._closing = True
            assert self.storage is not None
            self.storage.record({"event": "closing", "agent": cfg.id, "step": self.step})
        return True

    def _close_tick(self, protocol: Protocol, metrics, seen: tuple) -> None:
        """One step of the closing phase: the exchanges only, then a pause so that an agent
        with no training to do does not spin (the sender paces the exchanges themselves)."""
        self._ticks += 1
        protocol.before_step(self.x, self._ticks)  # RPS counts its period in these steps
        protocol.after_step(self.x, self._ticks)
        if time.monotonic() >= self._next_record:
            # evaluating is the most a closing agent does: not more often than CLOSING_RECORD_S
            every = max(self.cfg.record_every_s, CLOSING_RECORD_S)
            self._record_now([], seen, protocol, metrics, every)
        self.stop_event.wait(CLOSING_TICK_S)

    def _record_now(
        self, losses: list[float], seen: tuple, protocol, metrics, every_s: float
    ) -> None:
        """A metrics record with its held-out evaluation; the next one not before every_s, nor
        before the evaluation's share of the time since is down to EVAL_SHARE."""
        t = time.monotonic()
        ctx, sender, inbox = seen
        self._last = self._record(losses, ctx, sender, inbox, protocol)
        metrics.record(self._last)
        took = time.monotonic() - t
        self._next_record = t + max(every_s, took / EVAL_SHARE)

    def _record(self, losses, ctx: Context, sender, inbox, protocol) -> dict:
        return {
            **self._counters(ctx, sender, inbox, protocol),
            "loss": round(float(np.mean(losses)), 5) if losses else None,
            **self.data.evaluate(self.model, self.x, self.cfg.eval_examples),
            # the rate that really ran, to set beside train.p (this run's steps only)
            "exchanges_initiated_per_step": round(
                ctx.exchanges["initiated"] / max(1, self.step - self._first_step), 5
            ),
            "cpu_s": report.cpu(self._threads),
            "closing_steps": self._ticks,
            **self._steps.take(),
        }
