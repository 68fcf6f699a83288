"""A local fleet: N agent processes, each a light device of its own (device.py: network, mount,
PID and UTS namespaces, an unprivileged user) on one bridge (or, without root, plain processes on
127.0.0.0/8 with loss injected in the receive path), configured, watched and stopped.

Teardown is unconditional: processes are stopped (SIGTERM, then SIGKILL), namespaces, veths,
the bridge and their nftables tables are removed, whether the run ended, failed or was
interrupted."""

from __future__ import annotations

import functools
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from edgegossip import artifact
from edgegossip import config as agent_config
from edgegossip.config import AgentConfig, Peer
from edgegossip.data import mnist, own
from edgegossip.dataplane import payload
from edgegossip.emulate import cgroups, device, netns
from edgegossip.emulate.schedule import late
from edgegossip.errors import PREFIX as ERROR_PREFIX
from edgegossip.metrics import read as read_metrics
from edgegossip.models import NAMED, make_model
from edgegossip.run import Run, rate_to_mbps

log = logging.getLogger(__name__)

PORT = 47000  # each device's, in its own namespace
# loopback devices share this machine's ports: below the kernel's ephemeral range (from 32768),
# where no other socket is handed one (a CI run once found 47101 taken by another's)
LOOPBACK_PORT = 27100


# what an emulated fleet sets otherwise than an agent's own default (config.py): it evaluates
# more often, for the progress lines and the report's curves
EMULATED = {"eval_every": 50}
STACKS_S = 1.0  # for an agent that would not stop to print its threads' stacks
# a capped device's row in the summary: its CPU share, the seconds its quota held it back, its
# memory limit and the most its group held, in MB, and the processes the kernel killed at it
LIMITS = ("cpu_share", "cpu_throttled_s", "memory_limit_mb", "memory_peak_mb", "oom_kills")
# the agent settings the fleet sets itself, from its layout, its network and its own fields
# (EmulatedFleet._config), beside the tooling's (config.py's scope "managed"): a run's
# `settings` may not name them
FLEET_SETS = frozenset(
    ("algorithm", "workers", "source", "max_steps", "duration_s", "inject_loss", "inject_burst")
    + ("inject_loss_model", "gso", "closing_s")
)


@dataclass(frozen=True)
class FleetSpec(Run):
    """A run (run.Run) as emulate and bench overhead make it: its agents as processes, on
    `backend` (netns | loopback), each writing under `out`."""

    backend: str = "netns"
    out: Path = Path("runs/emulate")
    # the last closing_s of duration_s in the closing phase, started on every device at once
    # (EmulatedFleet.close_when_due)
    closing_s: float = 0.0
    metrics_port: int = 0  # each agent's /metrics on this port (loopback: port + id); 0: none
    # node -> the attack it runs instead of training honestly (algorithms/attack.py)
    hostile: tuple[tuple[int, str], ...] = ()

    RESERVED = FLEET_SETS
    DEFAULTS = EMULATED


class EmulatedFleet:
    def __init__(self, spec: FleetSpec):
        self.spec = spec
        self.lan: netns.Lan | None = None
        self.procs: list[subprocess.Popen | None] = [None] * spec.nodes
        self.configs: list[AgentConfig] = []
        self.t0 = 0.0
        self.secret = secrets.token_hex(16)  # this run's own: no two emulations share link keys
        self.model_path = spec.model  # a compiled model's: its shared copy under netns
        self.model_digest = ""  # that copy's, which a device's config names (_shared_cache)
        self.cache = spec.out / "shared-cache"  # what devices read: _shared_cache()
        # the devices each agent's config lists: all but those the schedule joins later
        self.members = set(range(spec.nodes)) - late(list(spec.network.schedule))
        self.addrs: list[tuple[str, int]] = []
        self.data_files: list[Path] = []  # the user's own data: each node's file (_own_data)
        self.starts: dict[int, float] = {}  # node -> its agent's start record's time
        self.closed = False  # close_when_due has put every device in phase closing
        self.groups = cgroups.DeviceGroups(
            f"{os.getpid()}-{secrets.token_hex(3)}",
            {i: d.cpu for i, d in enumerate(spec.devices) if d.cpu},
            {i: d.memory_mb for i, d in enumerate(spec.devices) if d.memory_mb},
        )

    def addresses(self) -> list[tuple[str, int]]:
        if self.lan is not None:
            return [(self.lan.address(i), PORT) for i in range(self.spec.nodes)]
        return [("127.0.0.1", LOOPBACK_PORT + i) for i in range(self.spec.nodes)]

    def _config(self, i: int, addrs: list[tuple[str, int]]) -> AgentConfig:
        """Agent i's config: config.py's defaults < what an emulated fleet derives (its pace and
        deadline) < EMULATED < the run's settings < what the fleet itself sets."""
        s = self.spec
        steps = 0
        if s.epochs:
            rows = own.rows(self.data_files[i]) if self.data_files else mnist.TRAIN_ROWS // s.nodes
            steps = int(s.epochs * rows // s.setting("batch"))
        own_data = bool(self.data_files)
        injects = s.backend == "loopback"
        fleet_sets = {
            "algorithm": s.algorithm,
            "workers": s.nodes,
            "source": "file" if own_data else s.data,
            "max_steps": steps,
            "duration_s": s.duration_s,
            # loopback: the network's loss, injected on receive (netns: the kernel's)
            "inject_loss": s.network.loss if injects else 0.0,
            "inject_loss_model": s.network.loss_model if injects else "bernoulli",
            "inject_burst": s.network.burst if injects else 1.0,
            "gso": True,  # the netns links cut GSO buffers before the loss rule (netns.Lan)
            "closing_s": 0.0,  # not each agent's clock: the fleet's (close_when_due)
        }
        assert fleet_sets.keys() == FLEET_SETS
        return AgentConfig(
            # the model as the agents read it: netns's shared copy of the settings' one
            **{
                **self._derived(i),
                **EMULATED,
                **s.settings,
                **fleet_sets,
                "model": self.model_path,
            },
            id=i,
            listen=f"{addrs[i][0]}:{addrs[i][1]}",
            peers=self._peers_of(i, addrs),
            fleet=4242,
            key=self.secret,
            output=str(s.out / f"agent{i}"),
            path=str(self.data_files[i]) if own_data else "",
            metrics_endpoint=self.metrics_target(i, addrs) if s.metrics_port else "",
            attack=dict(s.hostile).get(i, "none"),
        )

    @functools.cached_property
    def _model_params(self) -> int:
        """The model's parameter count, for the deadlines: built once a fleet, not once a node."""
        return make_model(self.spec.model).n_params

    def _derived(self, i: int) -> dict[str, Any]:
        """Node i's pace and exchange deadline, from its link: what a run's settings may set
        otherwise."""
        s = self.spec
        link = rate_to_mbps(s.network.rate)  # sets the fixed deadline
        if s.network.medium == "wifi" and link:  # each frame twice on air the nodes share
            link /= 2 * s.nodes
        paced = s.network.goodput_mbps(i)  # this node's pacing: alone, as fast as it could
        # under a cap, pace just below it; an uncapped link, as a device paces by default
        # (net.rate_mbps): paced at 200 Mbit/s, the receivers, busy training on shared cores,
        # read 4.6 times the bytes, kept 0.74 of local's steps against 0.87 under a 20 Mbit/s
        # cap, and overflowed their buffers (1.5 points of loss beyond the network's; `bench
        # overhead --seconds 60 --rate none`, docs/results.md)
        pace = 0.9 * paced if paced else agent_config.default("rate_mbps")
        if "deadline_s" in s.settings:
            return {"rate_mbps": pace}
        codec = payload.codec(s.setting("payload"))
        model_bits = codec.bits * self._model_params / s.setting("slices")
        # three times one model's transfer time at the link's rate, and at least 5 s
        return {"rate_mbps": pace, "deadline_s": max(5.0, 3 * model_bits / ((link or pace) * 1e6))}

    def _peers_of(self, i: int, addrs: list[tuple[str, int]]) -> tuple[Peer, ...]:
        return tuple(Peer(j, *addrs[j]) for j in sorted(self.members - {i}))

    def join(self, i: int) -> None:
        """Device i starts, and every running agent's config gains it (reloaded, no restart)."""
        self.members.add(i)
        self._tell_members()
        self.start_agent(i)

    def remove(self, i: int) -> None:
        """Device i dies, and every running agent's config loses it (reloaded, no restart)."""
        self.kill_agent(i)
        self.members.discard(i)
        self._tell_members()

    def _tell_members(self) -> None:
        for j in sorted(self.members):
            self.configs[j] = replace(self.configs[j], peers=self._peers_of(j, self.addrs))
            self.reload_agent(j)

    def reload_agent(self, i: int) -> None:
        """Agent i's config as it is now, swapped in whole where the agent reads it, then
        SIGHUP to the agent itself (agent/reload.py); nothing to a device that is off."""
        p = self.procs[i]
        pid = device.agent_pid(p.pid) if p is not None and p.poll() is None else None
        if pid is None:
            return
        text = self._config_text(i)
        path = self.spec.out / f"agent{i}.toml"  # what the loopback agent reads; the run's record
        path.with_suffix(".new").write_text(text)
        path.with_suffix(".new").replace(path)
        if self.lan is not None:  # a device reads its own copy, in its own mount namespace
            device.replace_config(pid, text)
        os.kill(pid, signal.SIGHUP)

    def _config_text(self, i: int) -> str:
        cfg = self.configs[i]
        if self.lan is not None:  # a device of its own reads its state folder as STATE
            cfg = replace(cfg, output=device.STATE)
            if self.model_digest:  # and the compiled model in its cache, as a fleet's device
                cfg = replace(cfg, model=f"{device.CACHE}/model", model_digest=self.model_digest)
            if self.data_files:  # and its own data there too
                cfg = replace(cfg, path=f"{device.CACHE}/data/{Path(cfg.path).name}")
        return agent_config.to_toml(cfg)

    def metrics_target(self, i: int, addrs) -> str:
        """Agent i's /metrics: its namespace's address, or a port of its own on loopback."""
        port = self.spec.metrics_port + (0 if self.spec.backend == "netns" else i)
        return f"{addrs[i][0]}:{port}"

    def up(self) -> None:
        s = self.spec
        s.out.mkdir(parents=True, exist_ok=True)
        if not own.named(s.data):  # refused before any namespace exists
            self.data_files = self._own_data()
        self.groups.create()
        if s.backend == "netns":
            net = s.network
            self.lan = netns.Lan(
                s.nodes,
                loss=net.loss,
                rate=net.rate,
                rates=dict(net.slow),
                model=net.links(),
                seed=s.setting("seed"),
                medium=net.medium,
            ).up()
        if s.backend == "netns":
            self.cache = self._shared_cache()  # before the configs: they name the model's copy
        addrs = self.addrs = self.addresses()
        self.configs = [self._config(i, addrs) for i in range(s.nodes)]
        for i in range(s.nodes):
            if i in self.members:  # a node the schedule joins later starts then
                self.start_agent(i)
        self.t0 = time.monotonic()

    def start_agent(self, i: int) -> None:
        cfg = self.configs[i]
        path = self.spec.out / f"agent{i}.toml"
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        path.write_text(self._config_text(i))
        if self.lan is not None:  # a device of its own: namespaces, its own unprivileged user
            env.update(device.prepare(Path(cfg.output), i))
            command = device.argv(
                self.lan.ns(i),
                i,
                Path(cfg.output),
                path,
                self.cache,
                self._agent_command(device.CONFIG),
            )
        else:
            command = self._agent_command(str(path))
        log_f = open(self.spec.out / f"agent{i}.log", "a")
        self.procs[i] = subprocess.Popen(
            command,
            stdout=log_f,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=self.groups.joiner(i),  # its CPU and memory from its first instruction
        )
        log_f.close()

    @staticmethod
    def _agent_command(config_path: str) -> list[str]:
        return [sys.executable, "-m", "edgegossip.cli.app", "agent", "--config", config_path]

    def _shared_cache(self) -> Path:
        """The data set, and a compiled model's files, where an unprivileged device can read
        them: copied into the folder each device mounts read-only as its cache (the
        operator's cache, the run's folder and its parents may be private: a `mktemp -d`
        folder, a 0700 home), so the model's config path is the device's own mount of it."""
        dest = self.spec.out / "shared-cache"
        if own.named(self.spec.data):
            device.share_read_only(mnist.cache_path(self.spec.data), dest)
        if self.spec.model not in NAMED:
            for f in sorted(Path(self.spec.model).iterdir()):
                device.share_read_only(f, dest / "model")
            self.model_path = str((dest / "model").resolve())  # checked here; a device reads
            self.model_digest = artifact.read(dest / "model").digest  # its own mount (_config_text)
        return dest

    def _own_data(self) -> list[Path]:
        """Each node's file of the user's data, in the folder every device mounts read-only
        (a user's folder may be private to them, as the model's may)."""
        s = self.spec
        dest = s.out / "shared-cache" / "data"
        cut_by = {"beta": s.setting("beta"), "k": s.setting("classes_per_worker")}
        files = own.per_node(
            s.data, s.nodes, s.setting("seed"), dest, s.setting("partition"), **cut_by
        )
        files = [f if f.parent == dest else device.share_read_only(f, dest) for f in files]
        for f in files:
            f.chmod(0o444)
        for d in (dest, dest.parent):
            d.chmod(0o755)
        return files

    def test_set(self):
        """What the summary scores each model on: the named data set's test split, or the
        user's own (data/own.py)."""
        if own.named(self.spec.data):
            return mnist.load(name=self.spec.data)
        files = self.data_files or own.files_of(self.spec.data, self.spec.nodes)
        mse = make_model(self.spec.model).loss == "mse"
        fraction = agent_config.default("eval_fraction")
        return own.test_set(self.spec.data, files, fraction, self.spec.setting("seed"), targets=mse)

    def _signal(self, p: subprocess.Popen, sig: int) -> None:
        """To the agent's whole process group: unshare does not pass signals on to the agent."""
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass

    def kill_agent(self, i: int, sig: int = signal.SIGKILL) -> None:
        p = self.procs[i]
        if p is not None and p.poll() is None:
            self._signal(p, sig)
            p.wait(timeout=30)

    def set_loss(self, i: int, loss: float) -> None:
        if self.lan is None:
            raise RuntimeError("changing a link's loss needs the netns backend")
        self.lan.set_loss(i, loss)

    def set_rate(self, i: int, rate: str | None) -> None:
        if self.lan is None:
            raise RuntimeError("changing a link's rate needs the netns backend")
        self.lan.set_rate(i, rate)

    def close_when_due(self) -> bool:
        """Phase closing on every device at once (as `fleet set phase=closing` does to a fleet,
        taken live: agent/reload.py), closing_s before the first agent to start ends its
        duration_s. By each agent's own clock, a device that started late (a small CPU share
        takes a while to import) would still be training while the others close, and close
        after they have stopped, with nobody to close with. True once done."""
        s = self.spec
        if self.closed or not s.closing_s:
            return self.closed
        for i in sorted(self.members - set(self.starts)):
            path = s.out / f"agent{i}" / "metrics.jsonl"
            recs = read_metrics(path) if path.is_file() else []
            start = next((r for r in recs if r.get("event") == "start"), None)
            if start is not None:
                self.starts[i] = start["time"]
        if not self.starts or time.time() < min(self.starts.values()) + s.duration_s - s.closing_s:
            return False
        for i in range(s.nodes):
            self.configs[i] = replace(self.configs[i], phase="closing")
            self.reload_agent(i)
        self.closed = True
        return True

    def latest(self) -> list[dict | None]:
        out = []
        for i in range(self.spec.nodes):
            path = self.spec.out / f"agent{i}" / "metrics.jsonl"
            recs = read_metrics(path) if path.is_file() else []
            recs = [r for r in recs if "step" in r and "accuracy" in r]
            out.append(recs[-1] if recs else None)
        return out

    def running(self) -> list[bool]:
        return [p is not None and p.poll() is None for p in self.procs]

    def why(self, i: int) -> str:
        """Agent i's own one-line reason for stopping, from the end of its log: its last
        `edgegossip: error:` line (what the CLI prints for a refusal), else the last line (a
        traceback's exception), and where the whole log is."""
        killed = self._killed_at_limit(i)
        if killed:
            return killed
        path = self.spec.out / f"agent{i}.log"
        try:
            with open(path, "rb") as f:
                f.seek(max(0, f.seek(0, 2) - 65536))
                lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines()]
        except OSError:
            return f"no log at {path}"
        lines = [ln for ln in lines if ln]
        errors = [ln for ln in lines if ln.startswith(ERROR_PREFIX)]
        said = errors[-1][len(ERROR_PREFIX) :] if errors else (lines[-1] if lines else "")
        return f"{said or 'nothing said'} (log: {path})"

    def _killed_at_limit(self, i: int) -> str | None:
        """What the kernel did to agent i if it killed it at its board's memory limit: its
        exit then says nothing of why (a SIGKILL; in a device, the wrapper's own error)."""
        if not self.groups.oom_kills(i):
            return None
        peak = self.groups.memory_peak_mb(i)
        return (
            f"killed by the kernel at its board's memory limit, "
            f"{self.groups.memory_limit_mb(i)} MB (peak {'?' if peak is None else peak} MB): "
            "the model and its batch do not fit this board"
        )

    def failed(self) -> list[int]:
        return [
            i
            for i, p in enumerate(self.procs)
            if p is not None
            and p.poll() is not None
            and (p.poll() not in (0, -signal.SIGTERM, -signal.SIGKILL) or self.groups.oom_kills(i))
        ]

    def stop(self, grace_s: float = 30.0) -> None:
        for p in self.procs:
            if p is not None and p.poll() is None:
                self._signal(p, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for p in self.procs:
            if p is None:
                continue
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._dump_stacks(p)
                self._signal(p, signal.SIGKILL)
                p.wait()

    @staticmethod
    def _dump_stacks(p: subprocess.Popen) -> None:
        """An agent that did not stop in its grace: its threads' stacks into its log (the
        agent's SIGUSR1, cli/agent.py) before it is killed, so that where it hung is known."""
        pid = device.agent_pid(p.pid)
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGUSR1)
            p.wait(timeout=STACKS_S)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass

    def overdue(self, grace_s: float = 15.0) -> bool:
        """True once a duration-limited run is past its duration plus grace: agents still up
        then are waiting on peers that left (an all-reduce ring) and should be stopped."""
        return (
            bool(self.spec.duration_s)
            and time.monotonic() - self.t0 > self.spec.duration_s + grace_s
        )

    def wait(self, timeout_s: float, poll_s: float = 0.5) -> None:
        """Wait for the agents to finish (or be overdue), then stop whatever still runs."""
        deadline = time.monotonic() + timeout_s
        while any(self.running()) and not self.overdue() and time.monotonic() < deadline:
            time.sleep(poll_s)
        self.stop()

    def air(self) -> dict | None:
        """The Wi-Fi channel's counts (netns.Lan.air); None on a switch."""
        if self.lan is None or self.spec.network.medium != "wifi":
            return None
        return self.lan.air()

    def kernel_dropped(self) -> list[int] | None:
        if self.lan is None:
            return None
        return [self.lan.dropped_packets(i) for i in range(self.spec.nodes)]

    def limits(self) -> dict[int, dict]:
        """Each capped device's limits as the kernel holds them, keyed as LIMITS."""
        g = self.groups
        return {
            i: dict(
                zip(
                    LIMITS,
                    (
                        g.shares.get(i),
                        g.throttled_s(i),
                        g.memory_limit_mb(i),
                        g.memory_peak_mb(i),
                        g.oom_kills(i),
                    ),
                )
            )
            for i in sorted(set(g.shares) | set(g.memory))
        }

    def down(self) -> None:
        try:
            self.stop(grace_s=10.0)
        finally:
            if self.lan is not None:
                self.lan.down()
                self.lan = None
            self.groups.remove()
