"""edgegossip: train one neural network across a fleet of small devices over lossy UDP gossip."""

__version__ = "0.1.0"
