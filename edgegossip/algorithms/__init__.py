"""One module per algorithm; each states its rule in its docstring and applies it to flat float32
vectors through the kernels, with one mask byte per chunk saying which datagrams arrived."""

NAMES = ("elastic-gossip", "gossip-pull", "gossip-push", "rps", "allreduce", "local")
