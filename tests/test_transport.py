"""Both transports over real loopback sockets: delivery, interop with libzmq both ways, and bad
datagrams sent at the socket. UDP tests assert fractions delivered, never exact counts."""

import os
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import zmq
from helpers.datagrams import reseal

from edgegossip.dataplane import wire
from edgegossip.dataplane.chunking import ChunkPlan
from edgegossip.dataplane.inbox import Inbox
from edgegossip.dataplane.outbox import Encoder
from edgegossip.dataplane.sender import send_vector
from edgegossip.transport import ReceiveThread, make_transport

KEY = b"k" * 32
PLAN = ChunkPlan(200_000, wire.default_chunk_bytes())


@pytest.fixture
def receiver(free_udp_port):
    opened = []

    def start(kind):
        t = make_transport(kind)
        port = free_udp_port()
        t.bind(("127.0.0.1", port))
        inbox = Inbox.build(PLAN, KEY, 1)
        rt = ReceiveThread(t, inbox.ingest, inbox.counter.drop, inbox.fast).start()
        opened.append((rt, t))
        return ("127.0.0.1", port), inbox

    yield start
    for rt, t in opened:
        rt.stop()
        t.close()


def _send_model(kind, peer, x, round=0, rate=50e6):
    t = make_transport(kind, rate_bytes_per_s=rate)
    try:
        send_vector(t, Encoder(PLAN, KEY, 1, sender=2), peer, 0, x, wire.MsgType.PARAMS, round)
    finally:
        time.sleep(0.05)
        t.close()


def _collect(inbox, round=0, wait=3.0):
    out = np.zeros(PLAN.n_params, np.float32)
    mask = np.zeros(PLAN.n_chunks, np.uint8)
    got = inbox.rounds.collect(2, wire.MsgType.PARAMS, round, time.monotonic() + wait, out, mask)
    return got, out, mask


@pytest.mark.parametrize("tx,rx", [("udp", "udp"), ("zmq", "zmq"), ("zmq", "udp"), ("udp", "zmq")])
def test_model_crosses(receiver, tx, rx):
    """zmq->udp is a libzmq RADIO read by our native receiver; udp->zmq is our native sender
    read by a libzmq DISH: the two speak the same bytes."""
    peer, inbox = receiver(rx)
    time.sleep(0.05)
    x = np.random.default_rng(0).standard_normal(PLAN.n_params, dtype=np.float32)
    _send_model(tx, peer, x, rate=20e6)
    got, out, mask = _collect(inbox)
    assert got >= 0.99 * PLAN.n_chunks, (got, inbox.counter.snapshot())
    sel = np.repeat(mask.astype(bool), PLAN.chunk_elems)[: PLAN.n_params]
    np.testing.assert_array_equal(out[sel], x[sel])
    assert inbox.counter.dropped == 0


def test_raw_socket_frame_reaches_dish(free_udp_port):
    """FACTS: b'\\x02eg' + body sent by a plain socket is received by a DISH joined to 'eg'."""
    ctx = zmq.Context.instance()
    dish = ctx.socket(zmq.DISH)
    dish.rcvtimeo = 2000
    port = free_udp_port()
    dish.bind(f"udp://127.0.0.1:{port}")
    dish.join("eg")
    time.sleep(0.1)  # bind and join complete asynchronously on libzmq's I/O thread
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(b"\x02eghello", ("127.0.0.1", port))
        frame = dish.recv(copy=False)
        assert frame.group == "eg" and bytes(frame.buffer) == b"hello"
        s.close()
    finally:
        dish.close(linger=0)


def _bad_datagrams():
    enc = Encoder(PLAN, KEY, 1, sender=2)
    good = [bytes(d) for d in enc.chunks(np.ones(PLAN.n_params, np.float32), 1, 0, chunks=[0, 1])]
    other = Encoder(PLAN, b"z" * 32, 1, sender=2)
    forged = bytes(next(other.chunks(np.ones(PLAN.n_params, np.float32), 1, 0, chunks=[2])))
    nan = np.ones(PLAN.n_params, np.float32)
    nan[PLAN.chunk_elems * 3] = np.nan
    nan_dg = bytes(next(enc.chunks(nan, 1, 0, chunks=[3])))
    h = wire.unpack(memoryview(good[1])[3:])
    past = bytearray(good[1])
    wire.pack_into(past, 3, h._replace(byte_offset=PLAN.model_bytes, seq=h.seq + 100))
    past[3:] = reseal(past[3:], KEY)
    return good[0], {
        "truncated": good[1][:25],
        "random": bytes(np.random.default_rng(1).integers(0, 256, 500, dtype=np.uint8)),
        "high_first_byte": b"\x80" + good[1][1:],
        "oversized": b"\x02eg" + b"\x00" * 8900,
        "bad_tag": forged,
        "non_finite": nan_dg,
        "out_of_bounds": bytes(past),
        "replayed": good[0],
    }


@pytest.mark.parametrize("kind", ["udp", "zmq"])
def test_bad_datagrams_over_the_socket(receiver, kind):
    peer, inbox = receiver(kind)
    time.sleep(0.05)
    first, bad = _bad_datagrams()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(first, peer)
    deadline = time.monotonic() + 2
    while inbox.counter.accepted < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    before = _collect(inbox, wait=0.01)[1].copy()
    for dg in bad.values():
        s.sendto(dg, peer)
        time.sleep(0.005)
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and inbox.counter.drops["out_of_bounds"] < 1:
        time.sleep(0.01)
    time.sleep(0.1)
    s.close()
    drops = inbox.counter.drops
    for reason in ("bad_tag", "non_finite", "out_of_bounds", "replayed", "truncated"):
        assert drops[reason] >= 1, (reason, dict(drops))
    if kind == "udp":  # libzmq filters these before we see them: wrong group, oversized
        assert drops["oversized"] == 1 and drops["bad_group"] >= 1, dict(drops)
    assert inbox.counter.accepted == 1
    np.testing.assert_array_equal(_collect(inbox, wait=0.01)[1], before)
    # still receiving after all of it
    _send_model("udp", peer, np.full(PLAN.n_params, 3, np.float32), round=1, rate=20e6)
    got, out, _ = _collect(inbox, round=1)
    assert got >= 0.99 * PLAN.n_chunks


RECEIVER = textwrap.dedent("""
    import sys, time
    from edgegossip.dataplane.chunking import ChunkPlan
    from edgegossip.dataplane.inbox import Inbox
    from edgegossip.transport import ReceiveThread, make_transport
    t = make_transport("zmq"); t.bind(("127.0.0.1", int(sys.argv[1])))
    inbox = Inbox.build(ChunkPlan(1000, 400), b"k" * 32, 1)
    ReceiveThread(t, inbox.ingest, inbox.counter.drop).start()
    print("ready", flush=True)
    time.sleep(float(sys.argv[2]))
    print("alive", inbox.counter.accepted, flush=True)
""")


def test_zmq_receiver_survives_high_first_byte(free_udp_port, tmp_path):
    """Unpatched libzmq 4.3.4 aborts the whole process on such a datagram; ours must not."""
    port = free_udp_port()
    script = tmp_path / "recv.py"
    script.write_text(RECEIVER)
    p = subprocess.Popen(
        [sys.executable, str(script), str(port), "1.5"],
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    try:
        assert p.stdout.readline().strip() == "ready"
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for first in (0x80, 0xFF, 0xC3):
            s.sendto(bytes([first]) + b"x" * 40, ("127.0.0.1", port))
        s.sendto(b"", ("127.0.0.1", port))
        enc = Encoder(ChunkPlan(1000, 400), KEY, 1, sender=2)
        time.sleep(0.2)
        s.sendto(bytes(next(enc.chunks(np.ones(1000, np.float32), 1, 0))), ("127.0.0.1", port))
        out, _ = p.communicate(timeout=10)
        assert p.returncode == 0, f"receiver died with {p.returncode}"
        assert out.strip() == "alive 1"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_zmq_refuses_oversized_body():
    t = make_transport("zmq")
    try:
        with pytest.raises(ValueError):
            t.send(("127.0.0.1", 9), memoryview(b"\x02eg" + b"\x00" * 8200))
    finally:
        t.close()


def test_udp_fallback_without_recvmmsg(receiver, monkeypatch):
    """Where the batched receive extension is not built, one recvmsg per datagram."""
    from edgegossip.transport import udp

    monkeypatch.setattr(udp, "recv_batch", None)
    peer, inbox = receiver("udp")
    time.sleep(0.05)
    x = np.random.default_rng(2).standard_normal(PLAN.n_params, dtype=np.float32)
    _send_model("udp", peer, x, rate=20e6)
    got, out, _ = _collect(inbox)
    assert got >= 0.99 * PLAN.n_chunks
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"\x02eg" + b"\x00" * 9500, peer)  # longer than a receive row: seen as oversized
    s.close()
    deadline = time.monotonic() + 2
    while inbox.counter.drops["oversized"] < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert inbox.counter.drops["oversized"] == 1


@pytest.mark.parametrize("gso", [True, False])
def test_send_batch_leaves_as_separate_datagrams(free_udp_port, gso):
    """A batch (with UDP GSO or one sendmmsg entry per row) reaches a plain socket as the same
    datagrams, in order, a short last row included."""
    plan = ChunkPlan(20_000, wire.max_chunk_bytes())
    enc = Encoder(plan, KEY, 1, sender=2)
    x = np.random.default_rng(3).standard_normal(plan.n_params, dtype=np.float32)
    expected = [bytes(d) for d in Encoder(plan, KEY, 1, sender=2).chunks(x, 1, 0)]
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", free_udp_port()))
    rx.settimeout(2)
    t = make_transport("udp", gso=gso)
    try:
        got = []
        for n in enc.batches(x, 1, 0):
            t.send_batch(rx.getsockname(), enc.rows, enc.lengths, n)
            got += [enc.rows[i, : enc.lengths[i]].tobytes() for i in range(n)]
        arrived = [rx.recv(65536) for _ in got]
    finally:
        t.close()
        rx.close()
    assert len(got) == plan.n_chunks == 10 and len(set(map(len, got))) == 2
    assert arrived == got
    assert [len(d) for d in got] == [len(d) for d in expected]  # bytes differ only in seq/tag


def test_peer_names_that_resolve_late_are_retried_and_skipped_meanwhile(monkeypatch, receiver):
    """A peer whose name is not known yet (a compose service still starting, a Pi switched off)
    does not stop the agent: its sends are skipped and counted, and once the name resolves the
    datagrams go to the address it resolved to."""
    from edgegossip.dataplane.sender import Sender, Snapshots
    from edgegossip.transport import peers as peers_mod

    known: dict[str, str] = {}
    monkeypatch.setattr(peers_mod, "lookup", lambda host, port: known.get(host))
    monkeypatch.setattr(peers_mod, "RETRY_S", 0.05)
    (_, port), inbox = receiver("udp")
    book = peers_mod.PeerBook({0: ("node0", port), 3: ("127.0.0.1", port)})
    assert book.endpoint(3) == ("127.0.0.1", port)  # an address needs no lookup
    t0 = time.monotonic()
    assert book.resolve(wait_s=0.2) == [0]
    assert time.monotonic() - t0 >= 0.2
    tx = make_transport("udp", rate_bytes_per_s=50e6)
    sender = Sender(tx, Encoder(PLAN, KEY, 1, sender=2), book)
    snaps = Snapshots(PLAN.n_params, 1)
    x = np.arange(PLAN.n_params, dtype=np.float32)
    try:
        snap = snaps.take(x)
        sender.send(0, snap, wire.MsgType.PARAMS, 0)
        snap.release()
        deadline = time.monotonic() + 5
        while book.skipped == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert book.skipped == 1
        known["node0"] = "127.0.0.1"
        while book.endpoint(0) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert book.endpoint(0) == ("127.0.0.1", port) and book.unresolved == []
        snap = snaps.take(x)
        sender.send(0, snap, wire.MsgType.PARAMS, 1)
        snap.release()
        got, out, mask = _collect(inbox, round=1)
        assert got >= 0.99 * PLAN.n_chunks, (got, inbox.counter.snapshot())
        sel = np.repeat(mask.astype(bool), PLAN.chunk_elems)[: PLAN.n_params]
        np.testing.assert_array_equal(out[sel], x[sel])
    finally:
        sender.close()
        book.close()
        tx.close()


def test_a_start_that_waits_for_peer_names_says_which_it_waits_for(monkeypatch, caplog):
    """A name that does not resolve keeps an agent from training for up to net.peer_wait_s;
    meanwhile its log names the peer it waits for, at a pace, not only when the wait ends."""
    from edgegossip.transport import peers as peers_mod

    monkeypatch.setattr(peers_mod, "lookup", lambda host, port: None)
    monkeypatch.setattr(peers_mod, "SAY_EVERY_S", 0.2)
    book = peers_mod.PeerBook({0: ("node0", 9), 3: ("127.0.0.1", 9)})
    try:
        with caplog.at_level("WARNING", logger=peers_mod.__name__):
            assert book.resolve(wait_s=2.0) == [0]
        waiting = [r.getMessage() for r in caplog.records if "waiting for" in r.getMessage()]
        assert 2 <= len(waiting) <= 10, waiting  # said along the way, at its pace
        assert all("0 (node0)" in m and "127.0.0.1" not in m for m in waiting)
    finally:
        book.close()


def test_a_paced_stream_is_read_in_batches(free_udp_port):
    """A receive thread woken for every datagram of a steady stream cost the training more than
    the datagrams: it lingers after a short batch, so a paced stream is read many at a wake-up,
    and nothing is lost to the wait (the socket holds what arrives meanwhile)."""
    t = make_transport("udp")
    port = free_udp_port()
    t.bind(("127.0.0.1", port))
    inbox = Inbox.build(PLAN, KEY, 1)
    rt = ReceiveThread(t, inbox.ingest, inbox.counter.drop, inbox.fast).start()
    try:
        x = np.random.default_rng(4).standard_normal(PLAN.n_params, dtype=np.float32)
        _send_model("udp", ("127.0.0.1", port), x, rate=5e6)  # about 3,500 datagrams a second
        got, out, mask = _collect(inbox)
    finally:
        rt.stop()
        t.close()
    assert got >= 0.99 * PLAN.n_chunks, inbox.counter.snapshot()
    assert t.datagrams >= got
    assert t.datagrams / t.batches >= 4, (t.datagrams, t.batches)


def test_recv_batch_pauses_before_it_waits(free_udp_port):
    """The receive thread's pause is taken inside the compiled call: datagrams that arrive
    during it are read together, in one batch."""
    import threading

    from edgegossip.transport import udp

    if udp.recv_batch is None:
        pytest.skip("built without the batch calls")
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", free_udp_port()))
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    bufs = np.zeros((8, 64), np.uint8)
    lengths = np.zeros(8, np.intp)

    def later():
        time.sleep(0.02)
        for i in range(5):
            tx.sendto(bytes([i]) * 10, rx.getsockname())

    th = threading.Thread(target=later)
    try:
        th.start()
        n = udp.recv_batch(rx.fileno(), bufs, lengths, 2000, 300_000)
    finally:
        th.join()
        rx.close()
        tx.close()
    assert n == 5 and list(lengths[:5]) == [10] * 5
    assert [bufs[i, 0] for i in range(5)] == list(range(5))


def test_the_pacer_books_what_it_lets_out(monkeypatch):
    """reserve() returns the wait before a burst may leave (slept by the caller, inside its
    send call); an idle sender saves up at most one burst. It books frames: the rate is the
    link's, and each datagram's headers cross it too."""
    from edgegossip.transport import pacing

    w = pacing.WIRE_OVERHEAD
    now = [100.0]
    monkeypatch.setattr(pacing.time, "perf_counter", lambda: now[0])
    p = pacing.Pacer(1e6, burst_s=0.01)  # 1 MB/s, 10 KB bursts
    assert p.reserve(10_000 - w) == pytest.approx(0.01)  # a new pacer has nothing saved up
    assert p.reserve(100 - w) == pytest.approx(0.0101)  # one 100-byte frame
    assert p.reserve(2 * (50 - w), 2) == pytest.approx(0.0102)  # two 50-byte frames
    now[0] += 60.0  # idle for a minute: still only one burst ahead
    assert p.reserve(10_000 - w) == 0.0
    assert p.reserve(10_000 - w) == pytest.approx(0.01)
    assert p.datagrams_per_burst(1000 - w) == 10  # 1,000-byte frames in a 10 KB burst
    assert pacing.Pacer(None).reserve(10**9) == 0.0


@pytest.mark.parametrize("codec", ["float32", "int8"])
@pytest.mark.parametrize("encrypt", [False, True])
def test_a_round_sent_paced_in_one_call_is_the_framed_datagrams(free_udp_port, codec, encrypt):
    """send_vector hands a whole round to the compiled sender (frame, pace, send without the
    GIL): a plain socket gets exactly what chunks() frames, in order, numbered on from the
    link's last sequence number, and no faster than the pacer's rate allows."""
    from edgegossip.dataplane import payload

    c = payload.codec(codec)
    plan = c.plan(60_000, wire.default_chunk_bytes())
    x = np.random.default_rng(6).standard_normal(plan.n_params, dtype=np.float32)
    ref = Encoder(plan, KEY, 1, sender=2, codec=c, encrypt=encrypt)
    enc = Encoder(plan, KEY, 1, sender=2, codec=c, encrypt=encrypt)
    for e in (ref, enc):
        e._seq[0] = 41  # a link already in use
    expected = [bytes(d) for d in ref.chunks(x, wire.MsgType.PARAMS, 3)]
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    rx.bind(("127.0.0.1", free_udp_port()))
    rx.settimeout(2)
    rate = 2e6  # bytes a second
    t = make_transport("udp", rate_bytes_per_s=rate)
    link = t.paced_link(rx.getsockname())
    assert link is not None, "the compiled path is built"
    try:
        start = time.perf_counter()
        send_vector(t, enc, rx.getsockname(), 0, x, wire.MsgType.PARAMS, 3)
        took = time.perf_counter() - start
        arrived = [rx.recv(65536) for _ in expected]
    finally:
        t.close()
        rx.close()
    assert arrived == expected
    assert enc._seq[0] == ref._seq[0] == 41 + plan.n_chunks
    assert enc.datagrams == len(expected) and enc.bytes == sum(map(len, expected))
    # a pacer starts with nothing saved up, so every byte but the last burst waited its turn
    assert took >= (enc.bytes - t.pacer.burst_s * rate) / rate
    assert t.pacer.next_at >= start + enc.bytes / rate - 1e-3


def test_a_failed_paced_send_raises_and_never_reuses_a_sequence_number(free_udp_port):
    plan = ChunkPlan(20_000, wire.default_chunk_bytes())
    x = np.zeros(plan.n_params, np.float32)
    enc = Encoder(plan, KEY, 1, sender=2)
    t = make_transport("udp")
    link = t.paced_link(("127.0.0.1", free_udp_port()))
    assert link is not None
    link.fd = -1  # a socket that is gone
    with pytest.raises(OSError):
        enc.send_paced(link, x, wire.MsgType.PARAMS, 1, batch=4)
    t.close()
    assert enc.datagrams == 0
    assert enc._seq[0] == 4  # the first batch was framed: its numbers are spent


def test_a_paced_round_stops_when_its_transport_closes(free_udp_port):
    """A round on a slow link is one compiled call that can take seconds: closing the
    transport ends it at the next batch, before the socket's number can be reused."""
    import threading

    plan = ChunkPlan(200_000, wire.default_chunk_bytes())  # 142 datagrams, about 200 KB
    x = np.zeros(plan.n_params, np.float32)
    enc = Encoder(plan, KEY, 1, sender=2)
    t = make_transport("udp", rate_bytes_per_s=20e3)  # 10 s for the round
    peer = ("127.0.0.1", free_udp_port())
    done = threading.Event()

    def send():
        try:
            send_vector(t, enc, peer, 0, x, wire.MsgType.PARAMS, 1)
        except OSError:
            pass
        done.set()

    th = threading.Thread(target=send, daemon=True)
    th.start()
    time.sleep(0.3)
    t.close()
    assert done.wait(2.0), "the send went on after close"
    assert 0 < enc.datagrams < plan.n_chunks


@pytest.fixture
def udp_c():
    from edgegossip import extensions

    mod = extensions.load("_udp_c")
    if mod is None:
        pytest.skip("built without the batch calls")
    return mod


def test_the_receive_pause_follows_its_rule(udp_c):
    """The one linger rule (both the agent's receive loop and the floor's use it): a full batch
    halves the pause, one under half full grows it by half, bounded by least and most."""
    lo, hi = 0.0005, 0.04
    assert udp_c.next_linger(0.01, 128, 128, lo, hi) == 0.005
    assert udp_c.next_linger(0.0006, 128, 128, lo, hi) == lo
    assert udp_c.next_linger(0.01, 10, 128, lo, hi) == pytest.approx(0.015)
    assert udp_c.next_linger(0.035, 1, 128, lo, hi) == hi
    assert udp_c.next_linger(0.01, 64, 128, lo, hi) == 0.01  # half full: kept
    assert udp_c.next_linger(0.01, 0, 128, lo, hi) == 0.01  # nothing came: kept


def test_rows_sent_paced_arrive_whole_and_book_the_bucket(udp_c, free_udp_port):
    """The floor's send: count datagrams from a few rows, each batch booked in the bucket as
    its bytes and headers; a stop flag already set sends nothing."""
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", free_udp_port()))
    rx.settimeout(2.0)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rows = np.arange(4 * 300, dtype=np.uint8).reshape(4, 300)
    lengths = np.full(4, 300, np.intp)
    ip4 = np.frombuffer(socket.inet_aton("127.0.0.1"), np.uint8)
    port = rx.getsockname()[1]
    stop = np.zeros(1, np.uint8)
    rate = 200_000.0
    try:
        t0 = time.perf_counter()
        sent, nbytes, next_at, err, gso = udp_c.send_rows_paced(
            tx.fileno(), rows, lengths, 10, ip4, port, True, 4, rate, 0.01, t0, stop, 42
        )
        got = [rx.recv(2048) for _ in range(10)]
        stop[0] = 1
        none = udp_c.send_rows_paced(
            tx.fileno(), rows, lengths, 10, ip4, port, True, 4, rate, 0.01, t0, stop, 42
        )
    finally:
        rx.close()
        tx.close()
    assert (sent, nbytes, err) == (10, 3000, 0)
    assert [g for g in got] == [rows[i % 4].tobytes() for i in range(10)]
    # the bucket moved on by the booked frames (less any idle allowance, at most a burst)
    assert next_at >= t0 + 10 * 342 / rate - 0.01
    assert none[:2] == (0, 0)


def test_drain_reads_what_arrives_until_stopped(udp_c, free_udp_port):
    """The floor's receive: it reads in batches with the GIL released and counts what it let
    go of, until its stop flag is set from another thread."""
    import threading

    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", free_udp_port()))
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for i in range(40):
        tx.sendto(bytes([i]) * (100 + i), rx.getsockname())
    bufs = np.zeros((16, 512), np.uint8)
    lengths = np.zeros(16, np.intp)
    stop = np.zeros(1, np.uint8)
    out = []
    th = threading.Thread(
        target=lambda: out.append(udp_c.drain(rx.fileno(), bufs, lengths, 20, stop, 0.0005, 0.04))
    )
    try:
        th.start()
        time.sleep(0.3)
        stop[0] = 1
        th.join(5.0)
    finally:
        rx.close()
        tx.close()
    assert not th.is_alive() and out
    batches, datagrams, nbytes, err = out[0]
    assert (datagrams, nbytes, err) == (40, sum(100 + i for i in range(40)), 0)
    assert 3 <= batches <= 40  # 16 rows a call
