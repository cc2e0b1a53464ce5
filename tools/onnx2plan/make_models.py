#!/usr/bin/env python3
"""make_models: generated ONNX models for onnx2plan (planning problems beyond the light CNNs).

Usage:
    make_models.py OUTDIR [--layers 12] [--depth 4] [--big]

Writes OUTDIR/transformer.onnx, unet.onnx and mobilenet.onnx; with --big also
transformer_big.onnx (as many layers as make about 5,000 planned tensors, counted by
converting) and unet_big.onnx (as deep as shape inference allows at 512x512). Each model is
checked with onnx.checker.check_model and onnx.shape_inference.infer_shapes(strict_mode=True)
before it is written. One line per model goes to stdout.

Only activation sizes matter for planning, so the weights are zeros (numpy.zeros, stored as
initializers) and are kept small: the transformer's layers share one set of weights, and the
convolutions that change the channel count are grouped (group = gcd of the channel counts),
which leaves every activation with the shape it has in the plain network.

    transformer  pre-norm encoder, input `tokens` float [batch, seq, 512] (dim_params `batch`
                 and `seq`), 8 heads, MLP 2048 with an Erf GELU; output `output`.
    unet         U-Net, input `image` float [1, 3, height, width] (dim_params `height`,
                 `width`): per level two 3x3 Conv+Relu then MaxPool 2x2; up by ConvTranspose
                 2x2 stride 2, Concat with the skip, two 3x3 Conv+Relu; channels 64, doubling
                 per level up to 1024; 1x1 Conv to 2 classes, output `mask`. H and W must be
                 multiples of 2^depth.
    mobilenet    MobileNetV2 (inverted residuals: 1x1 Conv, Clip 0..6, depthwise 3x3 Conv,
                 1x1 Conv, residual Add when stride 1 and channels match), input `image` float
                 [1, 3, height, width]; head 1x1 Conv to 1280, GlobalAveragePool, 1x1 Conv to
                 1000, Flatten, output `logits`.
"""

import argparse
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

OPSET = 17  # LayerNormalization
D_MODEL = 512
HEADS = 8
FFN = 4
BIG_TENSORS = 5000
BIG_UNET_SIDE = 512


class Builder:
    """Nodes, initializers and value names for one graph; a node's output is named as it."""

    def __init__(self):
        self.nodes = []
        self.inits = []
        self.init_names = set()

    def zeros(self, name, shape, dtype=None):
        import numpy as np
        from onnx import numpy_helper

        if name not in self.init_names:
            array = np.zeros(shape, dtype=dtype or np.float32)
            self.inits.append(numpy_helper.from_array(array, name))
            self.init_names.add(name)
        return name

    def const(self, name, values, dtype):
        import numpy as np
        from onnx import numpy_helper

        if name not in self.init_names:
            self.inits.append(numpy_helper.from_array(np.array(values, dtype=dtype), name))
            self.init_names.add(name)
        return name

    def op(self, op_type, inputs, name, **attrs):
        from onnx import helper

        self.nodes.append(helper.make_node(op_type, list(inputs), [name], name=name, **attrs))
        return name

    def model(self, graph_name, inputs, outputs):
        from onnx import helper

        graph = helper.make_graph(self.nodes, graph_name, inputs, outputs,
                                  initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="tagalloc make_models.py")
        return model


def _vi(name, dims):
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


# ---------------------------------------------------------------------------------------
# The transformer


def transformer(layers=12, d_model=D_MODEL, heads=HEADS, ffn=FFN):
    """A pre-norm transformer encoder of `layers` layers; input `tokens` [batch, seq, D]."""
    import numpy as np

    if layers < 1:
        raise ValueError("--layers must be at least 1")
    if d_model % heads:
        raise ValueError("d_model must be a multiple of heads")
    D, H, F = d_model, heads, ffn * d_model
    Dh = D // H
    g = Builder()
    # One set of weights, shared by every layer (Q, K, V and the output projection share one).
    ln_scale, ln_bias = g.zeros("ln_scale", [D]), g.zeros("ln_bias", [D])
    w_attn, b_attn = g.zeros("w_attn", [D, D]), g.zeros("b_attn", [D])
    w_fc1, b_fc1 = g.zeros("w_fc1", [D, F]), g.zeros("b_fc1", [F])
    w_fc2, b_fc2 = g.zeros("w_fc2", [F, D]), g.zeros("b_fc2", [D])
    split = g.const("heads_shape", [0, 0, H, Dh], np.int64)
    merge = g.const("merge_shape", [0, 0, D], np.int64)
    scale = g.const("scale", math.sqrt(Dh), np.float32)
    sqrt2 = g.const("sqrt2", math.sqrt(2.0), np.float32)
    one = g.const("one", 1.0, np.float32)
    half = g.const("half", 0.5, np.float32)

    def layer_norm(x, name):
        return g.op("LayerNormalization", [x, ln_scale, ln_bias], name, axis=-1, epsilon=1e-5)

    def linear(x, w, b, name):
        return g.op("Add", [g.op("MatMul", [x, w], name + "_matmul"), b], name)

    x = "tokens"
    for i in range(layers):
        p = f"layer{i}/"
        ln1 = layer_norm(x, p + "ln1")
        heads_of = {}
        for t, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
            y = linear(ln1, w_attn, b_attn, p + t)
            y = g.op("Reshape", [y, split], p + t + "_heads")
            heads_of[t] = g.op("Transpose", [y], p + t + "_t", perm=perm)
        s = g.op("MatMul", [heads_of["q"], heads_of["k"]], p + "scores")
        s = g.op("Div", [s, scale], p + "scores_scaled")
        a = g.op("Softmax", [s], p + "probs", axis=-1)
        c = g.op("MatMul", [a, heads_of["v"]], p + "context")
        c = g.op("Transpose", [c], p + "context_t", perm=[0, 2, 1, 3])
        c = g.op("Reshape", [c, merge], p + "context_merged")
        o = linear(c, w_attn, b_attn, p + "attn_out")
        x1 = g.op("Add", [x, o], p + "residual1")
        ln2 = layer_norm(x1, p + "ln2")
        h1 = linear(ln2, w_fc1, b_fc1, p + "fc1")
        e = g.op("Erf", [g.op("Div", [h1, sqrt2], p + "gelu_div")], p + "gelu_erf")
        e = g.op("Add", [e, one], p + "gelu_add")
        m = g.op("Mul", [h1, e], p + "gelu_mul")
        m = g.op("Mul", [m, half], p + "gelu")
        h2 = linear(m, w_fc2, b_fc2, p + "fc2")
        x = g.op("Add", [x1, h2], p + "residual2")
    layer_norm(x, "output")
    return g.model("transformer", [_vi("tokens", ["batch", "seq", D])],
                   [_vi("output", ["batch", "seq", D])])


# ---------------------------------------------------------------------------------------
# Convolutions with small weights


def _conv(g, x, cin, cout, name, kernel=3, stride=1, group=None, transpose=False):
    """A Conv (or ConvTranspose) with zero weights; grouped by gcd(cin, cout) by default."""
    group = group or math.gcd(cin, cout)
    if transpose:
        w = g.zeros(name + "/W", [cin, cout // group, kernel, kernel])
        return g.op("ConvTranspose", [x, w, g.zeros(name + "/B", [cout])], name,
                    kernel_shape=[kernel, kernel], strides=[stride, stride], group=group)
    w = g.zeros(name + "/W", [cout, cin // group, kernel, kernel])
    pad = kernel // 2
    return g.op("Conv", [x, w, g.zeros(name + "/B", [cout])], name,
                kernel_shape=[kernel, kernel], strides=[stride, stride],
                pads=[pad, pad, pad, pad], group=group)


def unet(depth=4, channels=3, base=64, max_channels=1024, classes=2):
    """A U-Net of `depth` levels down and up; input `image` [1, channels, height, width]."""
    if depth < 1:
        raise ValueError("--depth must be at least 1")
    g = Builder()

    def conv_relu(x, cin, cout, name):
        return g.op("Relu", [_conv(g, x, cin, cout, name)], name + "_relu")

    h, cin, c = "image", channels, base
    skips = []
    for i in range(depth):
        p = f"down{i}/"
        h = conv_relu(h, cin, c, p + "conv1")
        h = conv_relu(h, c, c, p + "conv2")
        skips.append((h, c))
        h = g.op("MaxPool", [h], p + "pool", kernel_shape=[2, 2], strides=[2, 2])
        cin, c = c, min(2 * c, max_channels)
    h = conv_relu(h, cin, c, "bottom/conv1")
    h = conv_relu(h, c, c, "bottom/conv2")
    cin = c
    for i in reversed(range(depth)):
        p = f"up{i}/"
        skip, sc = skips[i]
        u = _conv(g, h, cin, sc, p + "upconv", kernel=2, stride=2, transpose=True)
        h = g.op("Concat", [skip, u], p + "concat", axis=1)
        h = conv_relu(h, 2 * sc, sc, p + "conv1")
        h = conv_relu(h, sc, sc, p + "conv2")
        cin = sc
    _conv(g, h, cin, classes, "mask", kernel=1)
    return g.model("unet", [_vi("image", [1, channels, "height", "width"])],
                   [_vi("mask", [1, classes, "height", "width"])])


MOBILENET_V2 = [  # expansion t, channels c, repeats n, first stride s
    (1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
    (6, 160, 3, 2), (6, 320, 1, 1),
]


def mobilenet(classes=1000):
    """MobileNetV2; input `image` [1, 3, height, width]."""
    import numpy as np

    g = Builder()
    lo = g.const("relu6_min", 0.0, np.float32)
    hi = g.const("relu6_max", 6.0, np.float32)

    def relu6(x, name):
        return g.op("Clip", [x, lo, hi], name)

    h = relu6(_conv(g, "image", 3, 32, "stem", stride=2), "stem_relu6")
    cin = 32
    block = 0
    for t, c, n, s in MOBILENET_V2:
        for i in range(n):
            p = f"block{block}/"
            stride = s if i == 0 else 1
            x = h
            hidden = cin * t
            if t != 1:
                h = relu6(_conv(g, h, cin, hidden, p + "expand", kernel=1), p + "expand_relu6")
            h = relu6(_conv(g, h, hidden, hidden, p + "depthwise", stride=stride, group=hidden),
                      p + "depthwise_relu6")
            h = _conv(g, h, hidden, c, p + "project", kernel=1)
            if stride == 1 and cin == c:
                h = g.op("Add", [x, h], p + "residual")
            cin = c
            block += 1
    h = relu6(_conv(g, h, cin, 1280, "head", kernel=1), "head_relu6")
    h = g.op("GlobalAveragePool", [h], "pool")
    h = _conv(g, h, 1280, classes, "classifier", kernel=1)
    g.op("Flatten", [h], "logits", axis=1)
    return g.model("mobilenet", [_vi("image", [1, 3, "height", "width"])],
                   [_vi("logits", [1, classes])])


# ---------------------------------------------------------------------------------------
# Checks and sizing


def check(model):
    """check_model and strict shape inference; raises on a fault. Returns the inferred model."""
    import onnx

    onnx.checker.check_model(model)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def fixed(model, name, dims):
    """A copy of the model with input `name` fixed to `dims` (outputs keep their dim_params)."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in m.graph.input:
        if vi.name == name:
            shape = vi.type.tensor_type.shape
            shape.Clear()
            for d in dims:
                shape.dim.add().dim_value = d
    return m


def all_dims_known(model):
    """Every value of an inferred model has a static shape of positive dims."""
    g = model.graph
    for vi in list(g.value_info) + list(g.output):
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            return False
        for d in tt.shape.dim:
            if d.WhichOneof("value") != "dim_value" or d.dim_value < 1:
                return False
    return True


def planned_tensors(model, inputs):
    """The number of planned buffers onnx2plan makes of the model (sequential)."""
    import onnx

    sys.path.insert(0, HERE)
    import onnx2plan

    m = onnx.ModelProto()
    m.CopyFrom(model)
    _, stats = onnx2plan.convert(m, inputs)
    return stats["buffers"]


def big_transformer_layers(target=BIG_TENSORS):
    """Layers whose converted problem has about `target` planned tensors."""
    inputs = {"tokens": [1, 128, D_MODEL]}
    one = planned_tensors(transformer(1), inputs)
    per_layer = planned_tensors(transformer(2), inputs) - one
    return max(1, round((target - (one - per_layer)) / per_layer))


def deepest_unet(side=BIG_UNET_SIDE, limit=64):
    """The deepest U-Net that strict shape inference shapes fully at side x side."""
    import onnx

    best = None
    for depth in range(1, limit + 1):
        try:
            inferred = check(fixed(unet(depth), "image", [1, 3, side, side]))
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError):
            break
        if not all_dims_known(inferred):
            break
        best = depth
    if best is None:
        raise RuntimeError(f"no U-Net depth infers at {side}x{side}")
    return best


def write(model, outdir, name, note=""):
    import onnx

    check(model)
    path = os.path.join(outdir, name + ".onnx")
    onnx.save(model, path)
    size = os.path.getsize(path)
    print(f"{path}: {len(model.graph.node)} nodes, {size / 1e6:.2f} MB{note}")
    return path


def main(argv=None):
    p = argparse.ArgumentParser(prog="make_models.py", description=__doc__.split("\n")[0])
    p.add_argument("outdir", metavar="OUTDIR", help="where the .onnx files go (created)")
    p.add_argument("--layers", type=int, default=12, help="transformer layers (default 12)")
    p.add_argument("--depth", type=int, default=4, help="U-Net depth (default 4)")
    p.add_argument("--big", action="store_true",
                   help="also transformer_big.onnx (~5,000 planned tensors) and unet_big.onnx "
                   "(as deep as shape inference allows at 512x512)")
    args = p.parse_args(argv)
    if args.layers < 1 or args.depth < 1:
        p.error("--layers and --depth must be at least 1")
    try:
        import onnx  # noqa: F401
    except ImportError:
        sys.stderr.write("make_models: error: the onnx package is missing: pip install "
                         "'onnx>=1.14'\n")
        return 2
    start = time.perf_counter()
    os.makedirs(args.outdir, exist_ok=True)
    write(transformer(args.layers), args.outdir, "transformer", f", {args.layers} layers")
    write(unet(args.depth), args.outdir, "unet", f", depth {args.depth}")
    write(mobilenet(), args.outdir, "mobilenet")
    if args.big:
        layers = big_transformer_layers()
        model = transformer(layers)
        count = planned_tensors(model, {"tokens": [1, 128, D_MODEL]})
        write(model, args.outdir, "transformer_big",
              f", {layers} layers, {count} planned tensors")
        depth = deepest_unet()
        write(unet(depth), args.outdir, "unet_big",
              f", depth {depth} (the deepest shape inference allows at "
              f"{BIG_UNET_SIDE}x{BIG_UNET_SIDE})")
    sys.stderr.write(f"make_models: {time.perf_counter() - start:.1f} s\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
