"""Waiting for a condition in tests, always bounded."""

import time


def until(predicate, timeout=60, what="condition", every=0.2):
    """predicate()'s first truthy value, or AssertionError after timeout seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")
