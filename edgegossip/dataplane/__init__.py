"""The data plane: how a parameter vector becomes authenticated datagrams and back.

wire (the datagram format, pure), chunking (vector to chunks), outbox (framing and tagging),
sender (the background send thread), inbox (validation, drop counting, receive slots and masks),
replay (per-link replay windows and jump bounds), linkstate (what a receiver persists per peer).
The sockets live in edgegossip.transport; the compiled steady state in native/_wire_c.pyx."""
