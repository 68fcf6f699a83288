"""The data plane as one object: a bound transport, the inbox its receive thread files datagrams
into, the encoder, and (for an agent) the sender thread, built together from one spec and closed
together, in reverse, by one ExitStack. The agent, `edgegossip exchange` and `bench transport`
all open it here, so the wiring, and its one rule (injected loss must meet every datagram, so it
turns the compiled fast path off), is written once."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np

from edgegossip.dataplane import congestion
from edgegossip.dataplane.chunking import ChunkPlan
from edgegossip.dataplane.gate import Gate
from edgegossip.dataplane.inbox import Inbox
from edgegossip.dataplane.keys import LinkKeys
from edgegossip.dataplane.outbox import Encoder
from edgegossip.dataplane.payload import CODECS, Codec
from edgegossip.dataplane.reassembly import Reassembly
from edgegossip.dataplane.sender import Sender
from edgegossip.transport import ReceiveThread, Transport, make_transport
from edgegossip.transport.base import Endpoint, FastPath, Handler
from edgegossip.transport.lossmodel import LossModel
from edgegossip.transport.lossy import injected_loss
from edgegossip.transport.peers import PeerBook


@dataclass(frozen=True)
class PlaneSpec:
    transport: str  # udp | zmq
    listen: Endpoint  # where this end receives
    fleet: int  # fleet id in every datagram
    me: int  # this end's worker id
    rate_bytes_per_s: float | None = None  # send pacing, at most; None: unpaced
    congestion: str = "fixed"  # how the pace follows the links' reports (dataplane/congestion)
    gso: bool = True  # udp: send runs of datagrams as one GSO buffer
    encrypt: bool = False  # send encrypted payloads, accept only encrypted ones
    session: int = 1  # this start's session number (checkpoint.next_session)
    # loopback emulation: the loss to inject on receive (None: none), and its random stream
    inject: LossModel | None = None
    loss_seed: int = 0
    senders: frozenset[int] | None = None  # whom the inbox accepts; None: anyone
    rps_blocks: int = 0  # the inbox keeps one buffer per RPS block
    slices: int = 1  # a PARAMS carries one of this many slices of the model (train.slices)
    receive_buffers: int = 0  # buffers shared by all senders (0: one set per sender)
    messages: frozenset[int] | None = None  # the message types accepted; None: any
    stale_s: float = 10.0  # a round nobody collected for this long gives its buffer up


def _inbox(spec: PlaneSpec, plan: ChunkPlan, keys, codec: Codec) -> Inbox:
    gate = Gate(
        plan,
        LinkKeys.of(keys),
        spec.fleet,
        me=spec.me,
        peers=spec.senders,
        require_encryption=spec.encrypt,
        codec=codec,
        rps_blocks=spec.rps_blocks,
        slices=spec.slices,
        messages=spec.messages,
    )
    rounds = Reassembly(
        plan, spec.rps_blocks, spec.receive_buffers, spec.stale_s, slices=spec.slices
    )
    return Inbox(gate, rounds)


class DataPlane:
    def __init__(
        self,
        spec: PlaneSpec,
        plan: ChunkPlan,
        keys: LinkKeys | bytes,
        codec: Codec = CODECS["float32"],
        peers: PeerBook | None = None,
        replay: np.ndarray | None = None,
    ):
        """Bind and start; with peers, also a sender thread that sends to them. replay: the
        inbox's replay marks from a checkpoint, restored before the first datagram is read."""
        self.spec = spec
        self._stack = contextlib.ExitStack()
        try:
            self.transport: Transport = make_transport(
                spec.transport, rate_bytes_per_s=spec.rate_bytes_per_s, gso=spec.gso
            )
            self._stack.callback(self.transport.close)
            self.transport.bind(spec.listen)
            self.inbox = _inbox(spec, plan, keys, codec)
            if replay is not None:
                self.inbox.links.restore(replay)
            handler: Handler = self.inbox.ingest
            fast: FastPath | None = self.inbox.fast
            if spec.inject:  # every datagram must meet the injected loss: no fast path
                drop = self.inbox.counter.drop
                handler = injected_loss(handler, spec.inject, drop, spec.loss_seed)
                fast = None
            self.receiver = ReceiveThread(self.transport, handler, self.inbox.counter.drop, fast)
            self.receiver.start()
            self._stack.callback(self.receiver.stop)
            self.encoder = Encoder(
                plan,
                keys,
                spec.fleet,
                spec.me,
                session=spec.session,
                encrypt=spec.encrypt,
                codec=codec,
            )
            self.sender: Sender | None = None
            if peers is not None:
                control = congestion.make(spec.congestion, spec.rate_bytes_per_s)
                self.sender = Sender(self.transport, self.encoder, peers, control)
                self._stack.callback(self.sender.close)
                self.inbox.on_feedback = control.report
                self.inbox.on_report = self.sender.report
        except BaseException:
            self._stack.close()
            raise

    def use_keys(self, keys: LinkKeys, senders: frozenset[int]) -> None:
        """Another set of peers (agent/reload.py): the keys of every link now, and whom the
        inbox admits. Each is one attribute swap, which the receive and send threads see whole
        at their next datagram."""
        self.inbox.gate.keys = keys
        self.inbox.gate.peers = senders
        self.encoder.keys = keys

    def threads(self) -> dict:
        """The data plane's threads by role, for their CPU time (metrics.thread_cpu_s)."""
        out = {"receive": self.receiver._thread}
        if self.sender is not None:
            out["send"] = self.sender._thread
        return out

    def close(self) -> None:
        """Stop sending, stop receiving, close the socket; safe to call twice."""
        self._stack.close()

    def __enter__(self) -> DataPlane:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
