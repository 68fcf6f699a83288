"""The one place that loads the compiled extensions (native/*.pyx): _kernels_c (kernels.py picks
it or the NumPy reference), _wire_c (batch framing, OpenSSL's AEAD, the inbox fast path; absent
when built without OpenSSL headers) and _udp_c (recvmmsg/sendmmsg). Every caller falls back to
its pure-Python twin when load() gives None: same results, slower.

EDGEGOSSIP_NO_EXTENSIONS=1 turns every extension off at once (the pure-Python paths, as on a
device without a compiler). EDGEGOSSIP_REQUIRE_EXTENSIONS=1 re-raises the first import error
instead of falling back, so a broken build cannot pass for a slow one.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

DISABLED = os.environ.get("EDGEGOSSIP_NO_EXTENSIONS", "") not in ("", "0")
REQUIRED = os.environ.get("EDGEGOSSIP_REQUIRE_EXTENSIONS", "") not in ("", "0")
ERRORS: dict[str, ImportError] = {}  # why an extension did not load, by name


def load(name: str) -> ModuleType | None:
    """edgegossip.<name>, or None when it is switched off or not built."""
    if DISABLED:
        return None
    try:
        return importlib.import_module(f"edgegossip.{name}")
    except ImportError as e:
        ERRORS[name] = e
        if REQUIRED:
            raise
        return None
