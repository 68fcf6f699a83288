"""`edgegossip bench transport`: send the seed MLP (2,913,290 float32) from one process to another
on loopback over each transport, at the default and the largest chunk size, beside a plain
`socket.sendto` loop of the same payload sizes measured in the same run.

The receiver is a separate process that, for our transports, runs the full receive path: framing,
header checks, ChaCha20-Poly1305 verification, replay window, finiteness check and scatter into
the model buffer (for `udp`, the compiled fast path of edgegossip/dataplane/inbox.py once a round
is open). The sender frames and seals each batch in C and, for `udp`, hands it to the kernel with
sendmmsg and UDP GSO, exactly as the agent's sender thread does. `udp-enc` is `udp` with the
payloads encrypted (`net.encrypt`); `udp-f16`, `udp-bf16`, `udp-int8` and `udp-d4` (delta4) are
`udp` with compressed payloads (`net.payload`): those datagrams take the receiver's one-at-a-time
path, which decodes each chunk (delta4's sender also encodes each in Python), so
`params_per_s` (model parameters accepted per second) is the figure to compare across payloads.
Goodput counts payload bytes accepted per second between the first and last datagram. The raw
loop sends unpaced (its delivered fraction says what an unpaced sender loses); ours send unpaced
first and are paced, lower step by step, only if no trial delivered at least 99.9%. Every row is
the best of several trials (run()).
"""

from __future__ import annotations

import multiprocessing as mp
import socket
import time

import numpy as np

from edgegossip.dataplane import payload, wire
from edgegossip.dataplane.chunking import ChunkPlan

N_PARAMS = 2_913_290
DATAGRAMS = 40_000  # per measurement: long enough that socket buffers do not flatter a burst
KEY = b"bench-key-0123456789abcdef012345"
FLEET = 1
IDLE_S = 0.5
CODEC_KINDS = {"f16": "float16", "bf16": "bfloat16", "int8": "int8", "d4": "delta4"}
# the rows a run measures unless told; KINDS are all it can
DEFAULT_KINDS = ("raw", "udp", "udp-enc", "zmq")
KINDS = (*DEFAULT_KINDS, *(f"udp-{k}" for k in CODEC_KINDS))


def _kind(kind: str) -> tuple[str, payload.Codec, bool]:
    """(transport, payload codec, encrypt) of a benchmark row name like udp, udp-enc, udp-f16."""
    name, _, suffix = kind.partition("-")
    codec = payload.codec(CODEC_KINDS.get(suffix, "float32"))
    if codec.relative:  # sender and receiver hold the same initial model: here, zeros
        codec = codec.with_reference(np.zeros(N_PARAMS, np.float32))
    return name, codec, suffix == "enc"


def _plan(kind: str, chunk_bytes: int) -> ChunkPlan:
    return _kind(kind)[1].plan(N_PARAMS, chunk_bytes)


def _receiver(kind: str, chunk_bytes: int, conn, ready) -> None:
    from edgegossip.dataplane.plane import DataPlane, PlaneSpec

    plan = _plan(kind, chunk_bytes)
    if kind == "raw":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        s.bind(("127.0.0.1", 0))
        s.settimeout(0.05)
        ready.send(s.getsockname()[1])
        buf = bytearray(65536)
        count = nbytes = 0
        first = last = 0.0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                n = s.recv_into(buf)
            except TimeoutError:
                if count and time.perf_counter() - last > IDLE_S:
                    break
                continue
            last = time.perf_counter()
            if not count:
                first = last
            count += 1
            nbytes += n
        conn.send((count, nbytes, last - first, {}))
        return
    port = _free_port()
    name, codec, encrypt = _kind(kind)
    plane = DataPlane(
        PlaneSpec(name, ("127.0.0.1", port), FLEET, 0, encrypt=encrypt), plan, KEY, codec
    )
    inbox = plane.inbox
    ready.send(port)
    first = last = 0.0
    seen = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.01)
        c = inbox.counter.accepted + inbox.counter.dropped
        now = time.perf_counter()
        if c != seen:
            if not seen:
                first = now
            seen, last = c, now
        elif seen and now - last > IDLE_S:
            break
    plane.close()
    snap = inbox.counter.snapshot()
    conn.send((snap["accepted"], snap["accepted_bytes"], last - first, snap["drops"]))


def _free_port() -> int:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def rounds_for(chunk_bytes: int, datagrams: int = DATAGRAMS, kind: str = "udp") -> int:
    return max(1, -(-datagrams // _plan(kind, chunk_bytes).n_chunks))


def _send(
    kind: str, chunk_bytes: int, port: int, rate: float | None, x: np.ndarray, datagrams: int
) -> tuple[int, float]:
    from edgegossip.dataplane.outbox import Encoder
    from edgegossip.dataplane.sender import send_vector
    from edgegossip.transport import make_transport

    plan = _plan(kind, chunk_bytes)
    rounds = rounds_for(chunk_bytes, datagrams, kind)
    peer = ("127.0.0.1", port)
    t0 = time.perf_counter()
    if kind == "raw":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        raw = memoryview(x.view(np.uint8))
        sent = 0
        for _ in range(rounds):
            for c in range(plan.n_chunks):
                a, b = plan.chunk_range(c)
                s.sendto(raw[a:b], peer)
                sent += 1
        s.close()
        return sent, time.perf_counter() - t0
    name, codec, encrypt = _kind(kind)
    t = make_transport(name, rate_bytes_per_s=rate)
    enc = Encoder(plan, KEY, FLEET, sender=2, encrypt=encrypt, codec=codec)
    if kind == "zmq":
        time.sleep(0.2)  # let the RADIO's connect complete before the burst
        t._radio(peer)  # type: ignore[attr-defined]  # the zmq transport's RADIO, connected early
        time.sleep(0.2)
        t0 = time.perf_counter()
    for r in range(rounds):
        send_vector(t, enc, peer, 0, x, wire.MsgType.PARAMS, r)
    elapsed = time.perf_counter() - t0
    time.sleep(0.2)
    t.close()
    return enc.datagrams, elapsed


def measure(
    kind: str, chunk_bytes: int, rate: float | None, x: np.ndarray, datagrams: int = DATAGRAMS
) -> dict:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    ready_r, ready_w = ctx.Pipe()
    p = ctx.Process(target=_receiver, args=(kind, chunk_bytes, child, ready_w), daemon=True)
    p.start()
    try:
        if not ready_r.poll(30):
            raise RuntimeError(f"{kind} receiver did not start")
        port = ready_r.recv()
        time.sleep(0.1)
        sent, send_s = _send(kind, chunk_bytes, port, rate, x, datagrams)
        if not parent.poll(90):
            raise RuntimeError(f"{kind} receiver did not report")
        got, nbytes, elapsed, drops = parent.recv()
    finally:
        p.join(5)
        if p.is_alive():
            p.kill()
    elapsed = max(elapsed, 1e-9)
    return {
        "transport": kind,
        "chunk_bytes": chunk_bytes,
        "goodput_mbps": round(nbytes / elapsed / 1e6, 1),
        "datagrams_per_s": round(got / elapsed),
        "params_per_s": round(got * _plan(kind, chunk_bytes).chunk_elems / elapsed),
        "delivered": round(got / sent, 5) if sent else 0.0,
        "pace_mbps": round(rate / 1e6, 1) if rate else None,
        "sent": sent,
        "received": got,
        "receiver_drops": drops,
        "sender_s": round(send_s, 3),
    }


def run(
    transports=DEFAULT_KINDS,
    chunk_sizes=None,
    tries: int = 8,
    datagrams: int = DATAGRAMS,
    repeats: int = 3,
) -> dict:
    """Each row is the best of `repeats` trials, the raw loop's included: on a 2-core machine
    the sender, the receiver and the kernel share the cores, and a trial the scheduler disturbed
    says nothing about either. For our transports only trials that delivered at least 99.9%
    count; if no unpaced trial does, the pace is lowered step by step (at most `tries` more)."""
    chunk_sizes = chunk_sizes or (wire.default_chunk_bytes(), wire.max_chunk_bytes())
    x = np.random.default_rng(0).standard_normal(N_PARAMS, dtype=np.float32)
    rows = []
    for cb in chunk_sizes:
        for kind in transports:
            trials = [measure(kind, cb, None, x, datagrams) for _ in range(max(1, repeats))]
            if kind != "raw":
                good = [t for t in trials if t["delivered"] >= 0.999]
                rate = None
                last = max(trials, key=lambda t: t["goodput_mbps"])
                for _ in range(tries if not good else 0):
                    # pace just under what the receiver sustained, then lower further if needed
                    wire_bytes = _kind(kind)[1].encoded_len(_plan(kind, cb).chunk_elems)
                    sustained = (
                        last["goodput_mbps"]
                        * 1e6
                        * (wire.framing_overhead() + wire_bytes)
                        / wire_bytes
                    )
                    rate = 0.9 * min(sustained, rate or sustained)
                    last = measure(kind, cb, rate, x, datagrams)
                    trials.append(last)
                    if last["delivered"] >= 0.999:
                        good = [last]
                        break
            count = len(trials)
            if kind != "raw":  # nothing delivered 99.9%: report the trial closest to it
                trials = good or [max(trials, key=lambda t: t["delivered"])]
            row = max(trials, key=lambda t: t["goodput_mbps"])
            row["trials"] = count
            rows.append(row)
    return {
        "benchmark": "transport",
        "n_params": N_PARAMS,
        "rounds": {cb: rounds_for(cb, datagrams) for cb in chunk_sizes},
        "repeats": repeats,
        "authentication": "chacha20-poly1305",
        "results": rows,
    }
