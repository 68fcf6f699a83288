"""A model's graph as a deployed model runs it: what writeback writes, what a frozen prefix
computes, and what a fixed batch's check runs."""

from __future__ import annotations


def for_inference(graph) -> None:
    """In place: each BatchNormalization on its running statistics (training_mode 0, its
    statistics outputs dropped where nothing reads them) and each Dropout passing its input
    through (its training_mode input removed, which defaults to false): a model exported in
    train mode made what a deployed model is."""
    read = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    for n in graph.node:
        if n.op_type == "BatchNormalization":
            for a in n.attribute:
                if a.name == "training_mode":
                    a.i = 0
            if not read & set(n.output[1:]):
                del n.output[1:]
        elif n.op_type == "Dropout" and len(n.input) > 2:
            del n.input[2:]
