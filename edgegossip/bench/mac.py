"""`edgegossip bench mac`: what authenticating one datagram costs, per candidate, in one run.

The candidates for the v2 wire format: HMAC-SHA256 (v1's MAC; OpenSSL, SHA extensions where the
CPU has them), ChaCha20-Poly1305 with the datagram as associated data (what v2 uses: Poly1305
under a one-time key from ChaCha20), the same with the payload encrypted, and keyed BLAKE2s and
BLAKE2b (hashlib). BLAKE3 appears when the `blake3` package is installed (it is not a
dependency). The compiled rows loop in C; the hashlib rows in Python, whose per-call overhead
(a fraction of a microsecond) is small beside hashing 8 KB but not beside 1.4 KB.
"""

from __future__ import annotations

import hashlib
import time

SIZES = (1471, 8191)  # whole datagrams at the default and the largest chunk


def _timed_c(kind: str, n: int, seconds: float) -> float:
    from edgegossip import _wire_c  # type: ignore[attr-defined]  # compiled, no stub

    count = 256
    while True:
        t = _wire_c.mac_speed(kind, n, count)
        if t >= seconds:
            return t / count
        count = int(count * min(64.0, 1.5 * seconds / max(t, 1e-6)))


def _timed_py(fn, n: int, seconds: float) -> float:
    msg = bytes(n)
    count, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(64):
            fn(msg)
        count += 64
    return (time.perf_counter() - t0) / count


def _candidates():
    key = bytes(range(32))
    rows = []
    try:
        from edgegossip import _wire_c  # noqa: F401

        rows += [
            ("hmac-sha256", "openssl", "c"),
            ("chacha20-poly1305", "openssl", "c"),
            ("chacha20-poly1305-enc", "openssl", "c"),
        ]
    except ImportError:
        rows.append(
            ("hmac-sha256", "hashlib", lambda m: __import__("hmac").digest(key, m, "sha256"))
        )
    rows.append(("blake2s-keyed", "hashlib", lambda m: hashlib.blake2s(m, key=key).digest()))
    rows.append(("blake2b-keyed", "hashlib", lambda m: hashlib.blake2b(m, key=key).digest()))
    try:
        import blake3

        rows.append(("blake3-keyed", "blake3", lambda m: blake3.blake3(m, key=key).digest()))
    except ImportError:
        pass
    return rows


def run(seconds: float = 0.5, sizes=SIZES) -> dict:
    out = []
    for n in sizes:
        base = None
        for name, impl, how in _candidates():
            per = _timed_c(name, n, seconds) if how == "c" else _timed_py(how, n, seconds)
            if name == "hmac-sha256":
                base = per
            out.append(
                {
                    "mac": name,
                    "impl": impl,
                    "datagram_bytes": n,
                    "gbps": round(n / per / 1e9, 3),
                    "us_per_datagram": round(per * 1e6, 3),
                    "vs_hmac_sha256": round(base / per, 2) if base else None,
                }
            )
    return {"benchmark": "mac", "results": out}
