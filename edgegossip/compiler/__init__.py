"""`edgegossip model compile`: an inference ONNX model in, a training graph of standard ONNX ops
out (build.py, the gradient rules in ops.py), written as a folder every device of a fleet can
train from (artifact.py). Runs on the operator's machine only: it needs the onnx package's
shape inference, version converter and reference evaluator, which a device never loads."""
