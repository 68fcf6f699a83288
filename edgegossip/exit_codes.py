"""Exit codes of the CLI, one table, never reused."""

OK = 0
FAILURE = 1  # an operation failed at run time (a peer process died, a benchmark broke)
USAGE = 2  # bad arguments or configuration (click uses 2 for usage errors too)
NEEDS_ROOT = 3  # network emulation asked for without root
MISSING_DATA = 4  # a data set is not in the cache and no source could be reached
RESTART = 75  # the agent stopped to start again on a changed config (systemd restarts it)
INTERRUPTED = 130  # Ctrl-C
