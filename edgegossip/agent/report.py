"""What an agent says about itself, read from counters it already keeps: the traffic and CPU
parts of every metrics record, of the control endpoint's `status` and of a /metrics scrape."""

from __future__ import annotations

import time

from edgegossip.dataplane.drops import fates
from edgegossip.metrics import thread_cpu_s
from edgegossip.protocol import Context, Protocol

NO_TRAFFIC = {
    "bytes_sent": 0,
    "datagrams_sent": 0,
    "bytes_received": 0,
    "datagrams_received": 0,
    "datagrams_dropped": 0,
    "datagrams_lost": 0,
    "datagrams_late": 0,
    "datagrams_refused": 0,
    "drops": {},
    "link_loss": {},
}


def traffic(ctx: Context, sender, inbox, protocol: Protocol) -> dict:
    """What crossed the network."""
    if sender is None:  # no data plane: nothing sent, unless the protocol says so (the ring)
        return {**NO_TRAFFIC, **protocol.metrics()}
    snap = inbox.counter.snapshot()
    link_arrived, link_expected = inbox.links.loss()
    return {
        "link_arrived": link_arrived,
        "link_expected": link_expected,
        "link_gaps": inbox.links.gaps(),
        "link_loss": inbox.links.by_link(),  # observed on each incoming link, by peer id
        "session": sender.encoder.session,
        "bytes_sent": sender.encoder.bytes,
        "datagrams_sent": sender.encoder.datagrams,
        "bytes_received": snap["accepted_bytes"],
        "datagrams_received": snap["accepted"],
        "datagrams_dropped": snap["dropped"],
        # what was not merged, as a person reads it: never arrived, arrived too late, refused
        **{
            f"datagrams_{k}": n
            for k, n in fates(snap["drops"], link_arrived, link_expected).items()
        },
        "drops": snap["drops"],
        "send_skipped": ctx.snapshots.skipped if ctx.snapshots is not None else 0,
        "send_unresolved": sender.peers.skipped,
        "send_errors": sender.errors,
        # receive calls that brought datagrams: datagrams_received / this is the batch a wake-up
        # handled (udp; None for a transport that does not count them)
        "receive_batches": getattr(sender.transport, "batches", None),
        **sender.controller.metrics(),
        **protocol.metrics(),
    }


def cpu(threads: dict) -> dict:
    """CPU seconds so far: the calling thread (the training thread: records are made on it),
    each other thread of the agent by role, and the whole process; what the data plane costs
    the device."""
    out: dict[str, float | None] = {"train": round(time.thread_time(), 3)}
    for role, thread in threads.items():
        out[role] = thread_cpu_s(thread)
    out["process"] = round(time.process_time(), 3)
    return out
