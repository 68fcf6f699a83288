"""The agent's control endpoint: a ZeroMQ socket over TCP beside the data plane, CURVE-encrypted
and answering only allow-listed client keys (zmq.auth), so the operator's fleet commands can ask
an agent how it is doing and tell it to stop, pause, resume or checkpoint.

    messages.py  the requests and replies (JSON), and how a bad one is answered
    server.py    the agent side: a thread serving one socket
    client.py    the operator side: one request, one reply, bounded in time
"""
