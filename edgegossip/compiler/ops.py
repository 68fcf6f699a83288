"""The gradient table: for each ONNX op a training graph may hold, which inputs are
differentiable, how the op runs forward in training, and its vector-Jacobian product written in
standard ONNX ops (the math in each rule's docstring). An op outside this table on the path
from a parameter to the loss is refused at compile time.

The rules are in compiler/rules/ (by kind of op), the definitions of a row and a case in
compiler/table.py.

Notation: y the op's output, g = dL/dy the gradient flowing in, gx = dL/dx what the rule emits;
sum_A sums over axes A. A rule gives one gradient per input; for the slots a row names in
`broadcast` it gives it in the output's shape, and the driver (build._backward) sums it back
over the axes where the input was broadcast, so no rule does that itself.

Each row also carries the graphs that check it (`cases`): tests/test_op_table.py runs every one
against float64 central differences, and a row without one fails; the docs' op list
(docs/ops.md, `python -m edgegossip.reference docs/`) is made from the rows.
"""

from __future__ import annotations

import numpy as np
from onnx import NodeProto

from edgegossip.compiler.rules.conv import (
    avgpool_vjp,
    conv_transpose_vjp,
    conv_vjp,
    global_avgpool_vjp,
    maxpool_forward,
    maxpool_vjp,
)
from edgegossip.compiler.rules.elementwise import (
    abs_vjp,
    add_vjp,
    cast_vjp,
    clip_vjp,
    cos_vjp,
    div_vjp,
    erf_vjp,
    exp_vjp,
    identity_vjp,
    leaky_relu_vjp,
    log_vjp,
    max_vjp,
    min_vjp,
    mul_vjp,
    neg_vjp,
    pow_vjp,
    reciprocal_vjp,
    relu_vjp,
    sigmoid_vjp,
    sin_vjp,
    sqrt_vjp,
    sub_vjp,
    sum_vjp,
    tanh_vjp,
    where_vjp,
)
from edgegossip.compiler.rules.layout import (
    concat_vjp,
    expand_vjp,
    gather_vjp,
    none_vjp,
    pad_vjp,
    reduce_max_vjp,
    reduce_mean_vjp,
    reduce_sum_vjp,
    reshape_back_vjp,
    resize_vjp,
    slice_vjp,
    split_vjp,
    tile_vjp,
    transpose_vjp,
)
from edgegossip.compiler.rules.linear import (
    gemm_vjp,
    matmul_vjp,
)
from edgegossip.compiler.rules.normalization import (
    batchnorm_forward,
    batchnorm_vjp,
    dropout_forward,
    dropout_vjp,
    log_softmax_vjp,
    softmax_vjp,
)
from edgegossip.compiler.table import Case, Op, case, copy_node, node

__all__ = ["OPS", "EXPANDED", "Case", "Op", "copy_node", "diff_slots"]


def _unary(op: str, **attrs) -> tuple[Case, ...]:
    """The case of an elementwise op of one input: on a parameter times the batch."""
    return (case(op, node("Mul x W -> h"), node(f"{op} h -> z", **attrs), W=(4,)),)


def _binary(op: str, low: float = -1.0) -> tuple[Case, ...]:
    """An elementwise op of two inputs, broadcast every way a model broadcasts it."""
    return (
        case("x, W [4]", node(f"{op} x W -> z"), W=(4,), low=low),
        case("W [1, 4], x", node(f"{op} W x -> z"), W=(1, 4), low=low),
        case("W [3, 1, 4], x", node(f"{op} W x -> z"), W=(3, 1, 4), low=low),
        case("x, W [1]", node(f"{op} x W -> z"), W=(1,), low=low),
    )


_AX = np.array([1], np.int64)


def _pooled(op: str, id: str, **attrs) -> Case:
    """A pooling op after a padded convolution of a 2-channel 5x5 batch."""
    return case(
        id,
        node("Conv x W B -> h", pads=[1, 1, 1, 1]),
        node(f"{op} h -> z", **attrs),
        x=(2, 5, 5),
        W=(3, 2, 3, 3),
        B=(3,),
    )


OPS: dict[str, Op] = {
    "Add": Op((0, 1), add_vjp, broadcast=(0, 1), cases=_binary("Add")),
    "Sub": Op((0, 1), sub_vjp, broadcast=(0, 1), cases=_binary("Sub")),
    "Mul": Op((0, 1), mul_vjp, broadcast=(0, 1), cases=_binary("Mul")),
    "Div": Op((0, 1), div_vjp, broadcast=(0, 1), cases=_binary("Div", low=1.0)),
    "Relu": Op((0,), relu_vjp, cases=_unary("Relu")),
    "LeakyRelu": Op((0,), leaky_relu_vjp, cases=_unary("LeakyRelu", alpha=0.1)),
    "Sigmoid": Op((0,), sigmoid_vjp, cases=_unary("Sigmoid")),
    "Tanh": Op((0,), tanh_vjp, cases=_unary("Tanh")),
    "Identity": Op((0,), identity_vjp, cases=_unary("Identity")),
    "Flatten": Op(
        (0,),
        reshape_back_vjp,
        cases=(
            case(
                "axis 1", node("Mul x W -> h"), node("Flatten h -> z", axis=1), x=(2, 4), W=(2, 4)
            ),
        ),
    ),
    "Reshape": Op(
        (0,),
        reshape_back_vjp,
        cases=(
            case(
                "to [batch, 8]",
                node("Mul x W -> h"),
                node("Reshape h shape -> z"),
                x=(2, 4),
                W=(2, 4),
                shape=np.array([0, 8], np.int64),
            ),
        ),
    ),
    "Squeeze": Op(
        (0,),
        reshape_back_vjp,
        cases=(
            case(
                "axis 1",
                node("Mul x W -> h"),
                node("Squeeze h ax -> z"),
                x=(1, 4),
                W=(1, 4),
                ax=_AX,
            ),
        ),
    ),
    "Unsqueeze": Op(
        (0,),
        reshape_back_vjp,
        cases=(case("axis 1", node("Mul x W -> h"), node("Unsqueeze h ax -> z"), W=(4,), ax=_AX),),
    ),
    "Transpose": Op(
        (0,),
        transpose_vjp,
        cases=(
            case(
                "perm 0 2 1",
                node("Mul x W -> h"),
                node("Transpose h -> z", perm=[0, 2, 1]),
                x=(2, 4),
                W=(2, 4),
            ),
        ),
    ),
    "Concat": Op(
        (),
        concat_vjp,
        variadic=True,
        cases=(
            case(
                "two branches",
                node("Mul x W -> h"),
                node("Mul x V -> k"),
                node("Concat h k -> z", axis=1),
                W=(4,),
                V=(4,),
            ),
        ),
    ),
    "Gemm": Op(
        (0, 1, 2),
        gemm_vjp,
        broadcast=(2,),
        cases=(
            case("as nn.Linear", node("Gemm x W b -> z", transB=1), W=(5, 4), b=(5,)),
            case(
                "transA, alpha, beta",
                node("Transpose x -> xT", perm=[1, 0]),
                node("Gemm A xT C -> z", transA=1, alpha=0.5, beta=2.0),
                A=(4, 5),
                C=(5, 1),
            ),
            case(
                "A, transB",
                node("Gemm A x C -> z", transB=1, alpha=0.5, beta=2.0),
                A=(5, 4),
                C=(5, 1),
            ),
            case(
                "transA, transB",
                node("Gemm A x C -> z", transA=1, transB=1, beta=2.0),
                A=(4, 5),
                C=(5, 1),
            ),
            case(
                "under cross-entropy",
                node("Gemm x W b -> z", transB=1),
                node("Softmax z -> p", axis=1),
                loss="cross-entropy",
                W=(5, 4),
                b=(5,),
            ),
        ),
    ),
    "MatMul": Op(
        (0, 1),
        matmul_vjp,
        cases=(
            case("[batch, 4] [4, 5]", node("MatMul x W -> z"), W=(4, 5)),
            case("[batch, 2, 4] [4, 5]", node("MatMul x W -> z"), x=(2, 4), W=(4, 5)),
            case("batched B [1, 4, 5]", node("MatMul x W -> z"), x=(2, 4), W=(1, 4, 5)),
        ),
    ),
    "Conv": Op(
        (0, 1, 2),
        conv_vjp,
        cases=(
            case(
                "2-D, stride 2, pads 1",
                node("Conv x W B -> z", strides=[2, 2], pads=[1, 1, 1, 1]),
                x=(2, 5, 5),
                W=(4, 2, 3, 3),
                B=(4,),
            ),
            case(
                "2-D, groups 2, no bias",
                node("Conv x W -> z", group=2),
                x=(4, 4, 4),
                W=(4, 2, 2, 2),
            ),
            case(
                "1-D, dilation 2, groups 2",
                node("Conv x W B -> z", group=2, dilations=[2]),
                x=(2, 7),
                W=(2, 1, 3),
                B=(2,),
            ),
            case(
                "2-D depthwise, stride 2, pads 1, after a trained layer",
                node("Mul x V -> h"),
                node("Conv h W -> z", group=3, strides=[2, 2], pads=[1, 1, 1, 1]),
                x=(3, 5, 5),
                V=(3, 5, 5),
                W=(3, 1, 3, 3),
            ),
            case(
                "1-D, stride 3, pads 2 0",
                node("Conv x W B -> z", strides=[3], pads=[2, 0]),
                x=(1, 8),
                W=(3, 1, 2),
                B=(3,),
            ),
        ),
    ),
    "ConvTranspose": Op(
        (0, 1, 2),
        conv_transpose_vjp,
        cases=(
            case(
                "2-D, stride 2, pads 1, output padding 1 (a decoder's)",
                node("Mul x V -> h"),
                node(
                    "ConvTranspose h W B -> z",
                    strides=[2, 2],
                    pads=[1, 1, 1, 1],
                    output_padding=[1, 1],
                ),
                x=(2, 3, 3),
                V=(2, 3, 3),
                W=(2, 3, 3, 3),
                B=(3,),
            ),
            case(
                "1-D, stride 3, dilation 2, no bias",
                node("Mul x V -> h"),
                node("ConvTranspose h W -> z", strides=[3], dilations=[2]),
                x=(4, 5),
                V=(4, 5),
                W=(4, 2, 3),
            ),
        ),
    ),
    "Resize": Op(
        (0,),
        resize_vjp,
        cases=(
            case(
                "nearest, scales 2, as nn.Upsample",
                node("Mul x W -> h"),
                node(
                    'Resize h "" sc -> z',
                    mode="nearest",
                    coordinate_transformation_mode="asymmetric",
                    nearest_mode="floor",
                ),
                x=(2, 3, 3),
                W=(2, 3, 3),
                sc=np.array([1, 1, 2, 2], np.float32),
            ),
            case(
                "linear, half-pixel, scales 2, as bilinear",
                node("Mul x W -> h"),
                node(
                    'Resize h "" sc -> z',
                    mode="linear",
                    coordinate_transformation_mode="pytorch_half_pixel",
                ),
                x=(2, 3, 3),
                W=(2, 3, 3),
                sc=np.array([1, 1, 2, 2], np.float32),
            ),
            case(
                "linear, align corners, 1-D, sizes 4 to 7",
                node("Mul x W -> h"),
                node(
                    'Resize h "" "" sz -> z',
                    mode="linear",
                    coordinate_transformation_mode="align_corners",
                ),
                x=(2, 4),
                W=(2, 4),
                sz=np.array([3, 2, 7]),  # the cases' batch is 3
            ),
        ),
    ),
    "MaxPool": Op(
        (0,),
        maxpool_vjp,
        maxpool_forward,
        cases=(
            _pooled("MaxPool", "tiling 2x2", kernel_shape=[2, 2], strides=[2, 2]),
            case(
                "3x3, stride 1, pads 1",
                node("Mul x W -> h"),
                node("MaxPool h -> z", kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]),
                x=(2, 5, 5),
                W=(2, 5, 5),
                runtime="onnxruntime",
            ),
            case(
                "1-D tiling with a remainder",
                node("Mul x W -> h"),
                node("MaxPool h -> z", kernel_shape=[2], strides=[2]),
                x=(1, 7),
                W=(1, 7),
            ),
        ),
    ),
    "AveragePool": Op(
        (0,),
        avgpool_vjp,
        cases=(
            _pooled("AveragePool", "2x2, stride 2", kernel_shape=[2, 2], strides=[2, 2]),
            _pooled(
                "AveragePool",
                "3x3, stride 2, pads 1",
                kernel_shape=[3, 3],
                strides=[2, 2],
                pads=[1, 1, 1, 1],
                count_include_pad=1,
            ),
        ),
    ),
    "GlobalAveragePool": Op((0,), global_avgpool_vjp, cases=(_pooled("GlobalAveragePool", "2-D"),)),
    "ReduceSum": Op(
        (0,),
        reduce_sum_vjp,
        cases=(
            case(
                "axis 1, keepdims 0",
                node("Mul x W -> h"),
                node("ReduceSum h ax -> z", keepdims=0),
                x=(3, 4),
                W=(3, 4),
                ax=_AX,
            ),
            case(
                "axis 1, keepdims 1",
                node("Mul x W -> h"),
                node("ReduceSum h ax -> z"),
                x=(3, 4),
                W=(3, 4),
                ax=_AX,
            ),
        ),
    ),
    "ReduceMax": Op(
        (0,),
        reduce_max_vjp,
        cases=(
            case(
                "axis 1, keepdims 0 (a sequence's max-pooling)",
                node("Mul x W -> h"),
                node("ReduceMax h ax -> z", keepdims=0),
                x=(3, 4),
                W=(3, 4),
                ax=_AX,
            ),
            case(
                "every axis, keepdims 1",
                node("Mul x W -> h"),
                node("ReduceMax h -> m"),
                node("Mul h m -> z"),
                x=(3, 4),
                W=(3, 4),
            ),
        ),
    ),
    "Tile": Op(
        (0,),
        tile_vjp,
        cases=(
            case(
                "repeats 1, 2, 3",
                node("Mul x W -> h"),
                node("Tile h r -> z"),
                x=(2, 3),
                W=(2, 3),
                r=np.array([1, 2, 3]),
            ),
        ),
    ),
    "ReduceMean": Op(
        (0,),
        reduce_mean_vjp,
        cases=(
            case(
                "axis 1, keepdims 0",
                node("Mul x W -> h"),
                node("ReduceMean h ax -> z", keepdims=0),
                x=(3, 4),
                W=(3, 4),
                ax=_AX,
            ),
        ),
    ),
    "BatchNormalization": Op(
        (0, 1, 2),
        batchnorm_vjp,
        batchnorm_forward,
        cases=(
            case(
                "after a convolution",
                node("Conv x W -> h"),
                node("BatchNormalization h g b rm rv -> z", epsilon=1e-3),
                x=(2, 4, 4),
                low=0.5,
                W=(3, 2, 2, 2),
                g=(3,),
                b=(3,),
                rm=np.zeros(3),
                rv=np.ones(3),
            ),
        ),
    ),
    "Dropout": Op(
        (0,),
        dropout_vjp,
        dropout_forward,
        random=True,
        cases=(
            case(
                "ratio 0.5",
                node("Mul x W -> h"),
                node("Dropout h r -> z", seed=3),
                x=(6,),
                low=0.5,
                W=(6,),
                r=np.array(0.5),
            ),
        ),
    ),
    "Softmax": Op(
        (0,),
        softmax_vjp,
        cases=(
            case(
                "inside a model",
                node("Mul x W -> h"),
                node("Softmax h -> s", axis=1),
                node("Mul s V -> z"),
                W=(4,),
                V=(4,),
            ),
        ),
    ),
    "LogSoftmax": Op(
        (0,),
        log_softmax_vjp,
        cases=(
            case(
                "inside a model",
                node("Mul x W -> h"),
                node("LogSoftmax h -> s", axis=1),
                node("Mul s V -> z"),
                W=(4,),
                V=(4,),
            ),
        ),
    ),
    "Sum": Op(
        (),
        sum_vjp,
        variadic=True,
        broadcast=(0,),  # every slot (variadic)
        cases=(
            case(
                "three, broadcast",
                node("Mul x W -> h"),
                node("Sum h V U -> z"),
                W=(4,),
                V=(1, 4),
                U=(4,),
            ),
        ),
    ),
    "Cast": Op((0,), cast_vjp, cases=_unary("Cast", to=11)),  # to double: the cases' own type
    "CastLike": Op(
        (0,),
        cast_vjp,
        cases=(case("like x", node("Mul x W -> h"), node("CastLike h x -> z"), W=(4,)),),
    ),
    "Neg": Op((0,), neg_vjp, cases=_unary("Neg")),
    "Exp": Op((0,), exp_vjp, cases=_unary("Exp")),
    "Log": Op(
        (0,),
        log_vjp,
        cases=(
            case(
                "of a positive",
                node("Mul W W -> p"),
                node("Add p one -> q"),
                node("Mul x q -> h"),
                node("Mul h h -> k"),
                node("Add k one -> j"),
                node("Log j -> z"),
                W=(4,),
                one=np.array(1.0),
            ),
        ),
    ),
    "Sqrt": Op(
        (0,),
        sqrt_vjp,
        cases=(
            case(
                "of a positive",
                node("Mul x W -> h"),
                node("Mul h h -> k"),
                node("Add k one -> j"),
                node("Sqrt j -> z"),
                W=(4,),
                one=np.array(1.0),
            ),
        ),
    ),
    "Reciprocal": Op(
        (0,),
        reciprocal_vjp,
        cases=(
            case(
                "of a positive",
                node("Mul x W -> h"),
                node("Mul h h -> k"),
                node("Add k one -> j"),
                node("Reciprocal j -> z"),
                W=(4,),
                one=np.array(1.0),
            ),
        ),
    ),
    "Abs": Op((0,), abs_vjp, cases=_unary("Abs")),
    # onnx's reference Erf rounds to float32 (and onnxruntime has no float64 Erf): a step of
    # 1e-3 keeps that rounding (1e-7) well under the tolerance, the truncation at 1e-6
    "Erf": Op(
        (0,),
        erf_vjp,
        cases=(case("erf", node("Mul x W -> h"), node("Erf h -> z"), W=(4,), eps=1e-3, rtol=1e-3),),
    ),
    "Sin": Op((0,), sin_vjp, cases=_unary("Sin")),
    "Cos": Op((0,), cos_vjp, cases=_unary("Cos")),
    # the exponent is a constant of the model (x^3 in tanh-GELU, x^2 in a variance), never a
    # trained weight: a gradient flows to the base only
    "Pow": Op(
        (0,),
        pow_vjp,
        cases=(
            case(
                "x^3, as tanh-GELU's",
                node("Mul x W -> h"),
                node("Pow h three -> z"),
                W=(4,),
                three=np.array(3.0),
            ),
            case(
                "x^0.5 of a positive",
                node("Mul x W -> h"),
                node("Mul h h -> k"),
                node("Add k one -> j"),
                node("Pow j half -> z"),
                W=(4,),
                one=np.array(1.0),
                half=np.array(0.5),
            ),
        ),
    ),
    "Max": Op(
        (0, 1),
        max_vjp,
        broadcast=(0, 1),
        cases=(
            case("two, broadcast", node("Mul x W -> h"), node("Max h V -> z"), W=(4,), V=(1, 4)),
        ),
    ),
    "Min": Op(
        (0, 1),
        min_vjp,
        broadcast=(0, 1),
        cases=(
            case("two, broadcast", node("Mul x W -> h"), node("Min h V -> z"), W=(4,), V=(1, 4)),
        ),
    ),
    "Where": Op(
        (1, 2),
        where_vjp,
        broadcast=(1, 2),
        cases=(
            case(
                "on the batch's sign",
                node("Greater x zero -> c"),
                node("Mul x W -> h"),
                node("Where c h V -> z"),
                W=(4,),
                V=(4,),
                zero=np.array(0.0),
            ),
        ),
    ),
    "Clip": Op(
        (0,),
        clip_vjp,
        cases=(
            case(
                "as ReLU6",
                node("Mul x W -> h"),
                node("Clip h lo hi -> z"),
                low=-8.0,
                high=8.0,
                W=(4,),
                lo=np.array(0.0),
                hi=np.array(6.0),
            ),
            case("no bounds", node("Mul x W -> h"), node("Clip h -> z"), W=(4,)),
        ),
    ),
    "Expand": Op(
        (0,),
        expand_vjp,
        broadcast=(0,),
        cases=(
            case(
                "a bias to the batch",
                node("Expand B shape -> b"),
                node("Mul x b -> z"),
                x=(2, 4),
                B=(1, 4),
                shape=np.array([2, 4], np.int64),
            ),
        ),
    ),
    "Slice": Op(
        (0,),
        slice_vjp,
        cases=(
            case(
                "one axis, from the end",
                node("Mul x W -> h"),
                node("Slice h st en ax -> z"),
                x=(6,),
                W=(6,),
                st=np.array([1]),
                en=np.array([-1]),
                ax=np.array([1]),
            ),
            case(
                "two axes, to the end",
                node("Mul x W -> h"),
                node("Slice h st en ax -> z"),
                x=(3, 5),
                W=(3, 5),
                st=np.array([1, 2]),
                en=np.array([9, 2**62]),
                ax=np.array([1, 2]),
            ),
            case(
                "a weight's rows (axis 0 of a static tensor: dynamo's RNN gates)",
                node("Slice W st en ax -> w"),
                node("MatMul x w -> z"),
                x=(3,),
                W=(6, 3),
                st=np.array([2]),
                en=np.array([5]),
                ax=np.array([0]),
            ),
        ),
    ),
    "Pad": Op(
        (0,),
        pad_vjp,
        cases=(
            case(
                "constant, both sides",
                node("Mul x W -> h"),
                node("Pad h p -> z"),
                x=(2, 3),
                W=(2, 3),
                p=np.array([0, 1, 0, 0, 2, 1]),
            ),
        ),
    ),
    "Split": Op(
        (0,),
        split_vjp,
        cases=(
            case(
                "two pieces, both used",
                node("Mul x W -> h"),
                node("Split h sizes -> a b", axis=1),
                node("Mul a b -> z"),
                x=(4,),
                W=(4,),
                sizes=np.array([2, 2]),
            ),
            case(
                "one piece unused",
                node("Mul x W -> h"),
                node("Split h sizes -> a b", axis=1),
                node("Mul a a -> z"),
                x=(4,),
                W=(4,),
                sizes=np.array([2, 2]),
            ),
        ),
    ),
    "Gather": Op(
        (0,),
        gather_vjp,
        cases=(
            case(
                "an embedding of repeated ids",
                node("Gather E ids -> e"),
                node("Mul x e -> z"),
                x=(5, 3),
                E=(4, 3),
                ids=np.array([0, 2, 2, 3, 0]),
            ),
            case(
                "a sequence's last step (axis 1, index -1)",
                node("Mul x W -> h"),
                node("Gather h i -> z", axis=1),
                x=(5, 3),
                W=(5, 3),
                i=np.array(-1),
            ),
            case(
                "steps of a sequence (axis 1, repeated and negative)",
                node("Mul x W -> h"),
                node("Gather h i -> z", axis=1),
                x=(5, 3),
                W=(5, 3),
                i=np.array([[0, -1], [2, 2]]),
            ),
        ),
    ),
    # no gradient flows through these (an integer or boolean output); listed so that a path
    # through them is known, not refused
    "Shape": Op(
        (),
        none_vjp,
        cases=(
            case(
                "a trained tensor's, for a Reshape",
                node("Mul x W -> h"),
                node("Shape h -> s"),
                node("Reshape h s -> z"),
                W=(4,),
            ),
        ),
    ),
    "Size": Op(
        (),
        none_vjp,
        cases=(
            case(
                "of a trained tensor",
                node("Mul x W -> h"),
                node("Size h -> n"),
                node("Cast n -> f", to=11),
                node("Mul h f -> z"),
                W=(4,),
            ),
        ),
    ),
    "Equal": Op(
        (),
        none_vjp,
        cases=(
            case(
                "a mask from a trained tensor",
                node("Mul x W -> h"),
                node("Equal h h -> c"),
                node("Where c h zero -> z"),
                W=(4,),
                zero=np.array(0.0),
            ),
        ),
    ),
    "Greater": Op(
        (),
        none_vjp,
        cases=(
            case(
                "ReLU by hand",
                node("Mul x W -> h"),
                node("Greater h zero -> c"),
                node("Where c h zero -> z"),
                W=(4,),
                zero=np.array(0.0),
            ),
        ),
    ),
    "Less": Op(
        (),
        none_vjp,
        cases=(
            case(
                "a mask",
                node("Mul x W -> h"),
                node("Less h zero -> c"),
                node("Where c h zero -> z"),
                W=(4,),
                zero=np.array(0.0),
            ),
        ),
    ),
    "GreaterOrEqual": Op(
        (),
        none_vjp,
        cases=(
            case(
                "a mask",
                node("Mul x W -> h"),
                node("GreaterOrEqual h zero -> c"),
                node("Where c h zero -> z"),
                W=(4,),
                zero=np.array(0.0),
            ),
        ),
    ),
    "LessOrEqual": Op(
        (),
        none_vjp,
        cases=(
            case(
                "a mask",
                node("Mul x W -> h"),
                node("LessOrEqual h zero -> c"),
                node("Where c h zero -> z"),
                W=(4,),
                zero=np.array(0.0),
            ),
        ),
    ),
    "Not": Op(
        (),
        none_vjp,
        cases=(
            case(
                "a mask",
                node("Mul x W -> h"),
                node("Less h zero -> c"),
                node("Not c -> d"),
                node("Where d h zero -> z"),
                W=(4,),
                zero=np.array(0.0),
            ),
        ),
    ),
    "And": Op(
        (),
        none_vjp,
        cases=(
            case(
                "two masks",
                node("Mul x W -> h"),
                node("Less h zero -> c"),
                node("Less x zero -> d"),
                node("And c d -> b"),
                node("Where b h zero -> z"),
                W=(4,),
                zero=np.array(0.0),
            ),
        ),
    ),
    "Or": Op(
        (),
        none_vjp,
        cases=(
            case(
                "two masks",
                node("Mul x W -> h"),
                node("Less h zero -> c"),
                node("Less x zero -> d"),
                node("Or c d -> b"),
                node("Where b h zero -> z"),
                W=(4,),
                zero=np.array(0.0),
            ),
        ),
    ),
    "ArgMax": Op(
        (),
        none_vjp,
        cases=(
            case(
                "picks a row",
                node("Mul x W -> h"),
                node("ArgMax h -> i", axis=1, keepdims=0),
                node("Cast i -> f", to=11),
                node("Unsqueeze f ax -> u"),
                node("Mul h u -> z"),
                W=(4,),
                ax=_AX,
            ),
        ),
    ),
}


def diff_slots(node: NodeProto) -> tuple[int, ...]:
    """The input slots of node a gradient flows to (all of a variadic op's)."""
    return OPS[node.op_type].slots(node)


# ONNX's function ops that train through their bodies (compiler/expand.py) and its recurrent
# ops unrolled over their steps (compiler/recurrent.py), each with the graphs that check it as
# the rows' cases check theirs (and against onnx's own op, forward): no rule of their own, the
# primitives'
EXPANDED: dict[str, tuple[Case, ...]] = {
    "LayerNormalization": (
        case(
            "last axis, as nn.LayerNorm",
            node("Mul x W -> h"),
            # its statistics in float32 (stash_type), as an exported model's: float32's
            # rounding of the loss (1e-7) over a step of 2e-3 allows 1e-4 of error
            node("LayerNormalization h g b -> z", axis=-1, epsilon=1e-5),
            x=(3, 4),
            W=(3, 4),
            g=(4,),
            b=(4,),
            opset=20,
            eps=1e-3,
            rtol=1e-2,
            atol=1e-4,
        ),
    ),
    "Gelu": (
        case(
            "erf", node("Mul x W -> h"), node("Gelu h -> z"), W=(4,), opset=20, eps=1e-3, rtol=1e-3
        ),
        case(
            "tanh", node("Mul x W -> h"), node("Gelu h -> z", approximate="tanh"), W=(4,), opset=20
        ),
    ),
    "HardSwish": (
        case(
            "as MobileNetV3",
            node("Mul x W -> h"),
            node("HardSwish h -> z"),
            low=-4.0,
            high=4.0,
            W=(4,),
            opset=20,
        ),
    ),
    "HardSigmoid": (
        case(
            "defaults",
            node("Mul x W -> h"),
            node("HardSigmoid h -> z"),
            low=-4.0,
            high=4.0,
            W=(4,),
            opset=20,
        ),
    ),
    "Elu": (case("alpha 1", node("Mul x W -> h"), node("Elu h -> z"), W=(4,), opset=20),),
    "Selu": (case("defaults", node("Mul x W -> h"), node("Selu h -> z"), W=(4,), opset=20),),
    "Softplus": (
        case("softplus", node("Mul x W -> h"), node("Softplus h -> z"), W=(4,), opset=20),
    ),
    "GRU": (
        case(
            "as torch exports it: linear_before_reset, steps first",
            node("Transpose x -> xt", perm=[1, 0, 2]),
            node("GRU xt W R B -> y", hidden_size=2, linear_before_reset=1),
            node("Transpose y -> z", perm=[2, 0, 1, 3]),
            x=(3, 2),
            W=(1, 6, 2),
            R=(1, 6, 2),
            B=(1, 12),
        ),
        case(
            "reset first, bidirectional, batch first, the last state",
            node("GRU x W R B -> y yh", hidden_size=2, layout=1, direction="bidirectional"),
            node("Identity yh -> z"),
            x=(3, 2),
            W=(2, 6, 2),
            R=(2, 6, 2),
            B=(2, 12),
        ),
        case(
            "reverse, no bias, an initial state",
            node("ReduceSum x ax -> s", keepdims=1),
            node("MatMul s V -> h0"),
            node('GRU x W R "" "" h0 -> z', hidden_size=2, layout=1, direction="reverse"),
            x=(3, 2),
            V=(2, 2),
            W=(1, 6, 2),
            R=(1, 6, 2),
            ax=_AX,
        ),
    ),
    "LSTM": (
        case(
            "as torch exports it, steps first",
            node("Transpose x -> xt", perm=[1, 0, 2]),
            node("LSTM xt W R B -> y", hidden_size=2),
            node("Transpose y -> z", perm=[2, 0, 1, 3]),
            x=(3, 2),
            W=(1, 8, 2),
            R=(1, 8, 2),
            B=(1, 16),
        ),
        case(
            "bidirectional, batch first, the last cell state",
            node("LSTM x W R B -> y yh yc", hidden_size=2, layout=1, direction="bidirectional"),
            node("Identity yc -> z"),
            x=(3, 2),
            W=(2, 8, 2),
            R=(2, 8, 2),
            B=(2, 16),
        ),
    ),
    "RNN": (
        case(
            "batch first, with bias",
            node("RNN x W R B -> z", hidden_size=2, layout=1),
            x=(3, 2),
            W=(1, 2, 2),
            R=(1, 2, 2),
            B=(1, 4),
        ),
    ),
    "PRelu": (
        case(
            "one slope a channel",
            node("Mul x W -> h"),
            node("PRelu h a -> z"),
            x=(2, 3),
            W=(2, 3),
            a=(2, 1),
            opset=20,
        ),
    ),
}
