"""The kernel's floor under a data plane: what the same traffic costs the training when nothing but
the kernel, and one batched system call a burst, handles it (`bench overhead --variant
floor:PAYLOAD`).

Beside each local-only agent, one process in the node's network namespace sends what a gossip run
of the same invocation sent from that node, through the same links: its bytes per second, in its
datagram size, as rounds of one model's datagrams to one peer at a time (peers in turn), paced at
the agent's pace in the pacer's bursts (transport/udp.py, transport/pacing.py), idle between rounds
so that its mean rate is the gossip run's. Its receive thread reads as an agent's does (the same
batches and pauses) and lets go of what it read unlooked at. Neither thread frames, encodes, tags,
checks or merges, and neither runs Python between bursts: a round is one compiled call
(_udp_c.send_rows_paced, the agent's send_paced without the framing) and the receive loop is one
(_udp_c.drain), so that the floor's cost is the kernel's, not an interpreter's: between a gossip
run's share of local's steps and the floor's lies what the data plane's own code costs; between the
floor's and local's, what the kernel and the emulated network cost for those bytes, which no code
of ours can take away."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgegossip import extensions
from edgegossip.transport.pacing import WIRE_OVERHEAD
from edgegossip.transport.udp import (
    BATCH,
    LINGER_MAX_S,
    LINGER_MIN_S,
    RECV_BUFFER,
    UdpTransport,
)

_udp = extensions.load("_udp_c")
drain = _udp.drain if _udp is not None else None
send_rows_paced = _udp.send_rows_paced if _udp is not None else None

NAME = "floor"  # the variant's algorithm field: local-only training under replayed traffic
PORT_OFFSET = 1  # the floor listens beside the agent's data-plane port, never on it


@dataclass(frozen=True)
class Load:
    """What one node sends: a gossip agent's measured traffic."""

    bytes_per_s: float
    datagram_bytes: int
    per_round: int  # datagrams of one model in the payload's encoding


def _sender(
    tx: UdpTransport, peers, load: Load, stop: threading.Event, halt: np.ndarray, out: dict
) -> None:
    assert send_rows_paced is not None  # serve() refused to start without the compiled calls
    batch = tx.batch_hint(load.datagram_bytes)
    # what the datagrams hold is never read: any bytes of the right length do
    rows = np.random.default_rng(0).integers(0, 256, (batch, load.datagram_bytes), np.uint8)
    lengths = np.full(batch, load.datagram_bytes, np.intp)
    t0, sent, k = time.monotonic(), 0, 0
    while not halt[0]:
        link = tx.paced_link(peers[k % len(peers)])  # the bucket as the last round left it
        if link is None:
            raise ValueError("the floor sends to IPv4 addresses only")
        k += 1
        n, _, link.next_at, err, link.gso = send_rows_paced(
            link.fd,
            rows,
            lengths,
            load.per_round,
            link.ip4,
            link.port,
            link.gso,
            batch,
            link.rate,
            link.burst_s,
            link.next_at,
            halt,
            WIRE_OVERHEAD,
        )
        tx.settle(link)
        sent += n
        if err:
            raise OSError(err, f"sendmmsg to {link.ip4.tolist()}:{link.port} failed")
        ahead = t0 + sent * load.datagram_bytes / load.bytes_per_s - time.monotonic()
        if ahead > 0:
            stop.wait(ahead)
    out.update(send_cpu_s=round(time.thread_time(), 3), datagrams_sent=sent)
    out["bytes_sent"] = sent * load.datagram_bytes


def _receiver(rx: UdpTransport, halt: np.ndarray, out: dict) -> None:
    assert drain is not None
    bufs = np.zeros((BATCH, RECV_BUFFER), np.uint8)
    lengths = np.zeros(BATCH, np.intp)
    batches, datagrams, nbytes, err = drain(
        rx.receive_fd(), bufs, lengths, 50, halt, LINGER_MIN_S, LINGER_MAX_S
    )
    if err:
        raise OSError(err, "receive failed")
    out.update(
        receive_cpu_s=round(time.thread_time(), 3),
        bytes_received=nbytes,
        datagrams_received=datagrams,
        receive_batches=batches,
    )


def serve(
    listen: tuple[str, int],
    peers: list[tuple[str, int]],
    load: Load,
    pace_bytes_per_s: float | None,
    seconds: float,
) -> dict:
    """Send and receive for `seconds` (or until SIGTERM); the counts and each thread's CPU."""
    if drain is None:
        raise RuntimeError("the floor needs the compiled UDP calls (edgegossip._udp_c)")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    halt = np.zeros(1, np.uint8)  # what the compiled loops see of the stop
    rx = UdpTransport()
    rx.bind(listen)
    tx = UdpTransport(rate_bytes_per_s=pace_bytes_per_s)
    out: dict = {}
    threads = [
        threading.Thread(target=_receiver, args=(rx, halt, out), name="receive"),
        threading.Thread(target=_sender, args=(tx, peers, load, stop, halt, out), name="send"),
    ]
    for t in threads:
        t.start()
    stop.wait(seconds)
    halt[0] = 1
    stop.set()
    for t in threads:
        t.join()
    rx.close()
    tx.close()
    return {"seconds": seconds, **out}


def _endpoint(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m edgegossip.emulate.floor")
    ap.add_argument("--listen", type=_endpoint, required=True)
    ap.add_argument("--peer", type=_endpoint, action="append", required=True)
    ap.add_argument("--bytes-per-s", type=float, required=True)
    ap.add_argument("--datagram-bytes", type=int, required=True)
    ap.add_argument("--per-round", type=int, required=True)
    ap.add_argument("--pace-bytes-per-s", type=float, default=0.0)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    load = Load(a.bytes_per_s, a.datagram_bytes, a.per_round)
    result = serve(a.listen, a.peer, load, a.pace_bytes_per_s or None, a.seconds)
    a.out.write_text(json.dumps(result))
    return 0


def argv(
    listen: tuple[str, int],
    peers: list[tuple[str, int]],
    load: Load,
    pace_bytes_per_s: float | None,
    seconds: float,
    out: Path,
) -> list[str]:
    """The command line of one node's floor process."""
    return [
        sys.executable,
        "-m",
        "edgegossip.emulate.floor",
        "--listen",
        f"{listen[0]}:{listen[1]}",
        *[x for p in peers for x in ("--peer", f"{p[0]}:{p[1]}")],
        "--bytes-per-s",
        repr(load.bytes_per_s),
        "--datagram-bytes",
        str(load.datagram_bytes),
        "--per-round",
        str(load.per_round),
        "--pace-bytes-per-s",
        repr(pace_bytes_per_s or 0.0),
        "--seconds",
        repr(seconds),
        "--out",
        str(out),
    ]


class Floors:
    """The floor processes of a fleet: started beside its agents, each in its node's namespace
    (exec_args: that namespace's `ip netns exec`; empty on loopback)."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []
        self.outs: list[Path] = []

    def start(self, commands: list[tuple[list[str], Path]]) -> None:
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        for command, out in commands:
            self.outs.append(out)
            self.procs.append(
                subprocess.Popen(
                    command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
                )
            )

    def finish(self, timeout_s: float) -> list[dict]:
        """Wait for each process to end on its own (then SIGTERM, then SIGKILL); their results."""
        deadline = time.monotonic() + timeout_s
        errors = []
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            if p.returncode != 0:
                tail = (p.stderr.read() if p.stderr else b"").decode(errors="replace")
                errors.append(tail.strip().splitlines()[-1:] or [f"exit {p.returncode}"])
        if errors:
            raise RuntimeError(f"a floor process failed: {errors[0][0]}")
        return [json.loads(o.read_text()) for o in self.outs]

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


if __name__ == "__main__":
    sys.exit(main())
