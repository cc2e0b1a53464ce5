#!/usr/bin/env python3
"""onnx2plan: an ONNX model to a static memory-planning problem (tagalloc-plan-problem/1).

Usage:
    onnx2plan.py MODEL.onnx --input NAME=1,3,224,224 [--input ...] [--streams N]
                 [--align A] [--no-inplace] [--no-views] --out PROBLEM.json

The planned buffers are the model's activations: its graph inputs and the outputs of its
nodes, weights and constants excepted. The format is docs/plan-format.md; the rules the
converter follows are in README.md beside this file. Every error is one line on stderr and
exit status 2.
"""

import argparse
import json
import os
import sys
import time

FORMAT = "tagalloc-plan-problem/1"

# Ops whose output 0 is its input 0's bytes, unchanged (Dropout: inference, output 0 only).
VIEW_OPS = frozenset(["Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"])
# Ops whose output 0 has as many elements as their input 0, by definition.
SHAPE_KEEPING = frozenset(["Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"])

# Element-wise ops whose output 0 may overwrite one of their inputs.
INPLACE_UNARY = (
    "Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Sigmoid", "HardSigmoid", "Tanh", "Clip",
    "Softplus", "Softsign", "Exp", "Log", "Neg", "Abs", "Sqrt", "Reciprocal", "Floor", "Ceil",
    "Erf", "BatchNormalization",
)
INPLACE_NARY = ("Add", "Sub", "Mul", "Div", "Sum", "Max", "Min", "Pow")
INPLACE_OPS = frozenset(INPLACE_UNARY + INPLACE_NARY)

EXIT_ERROR = 2


class ConvertError(Exception):
    """A problem with the model or the arguments: reported as one line, exit status 2."""


# ---------------------------------------------------------------------------------------
# Arguments


def parse_input_spec(text):
    """`NAME=D0,D1,...` to (NAME, [D0, D1, ...]); `NAME=` is a scalar (rank 0)."""
    name, eq, dims_text = text.rpartition("=")
    if not eq or not name:
        raise ConvertError(
            f"bad --input {text!r}: expected NAME=D0,D1,... (for example data=1,3,224,224)")
    dims = []
    if dims_text.strip():
        for part in dims_text.split(","):
            part = part.strip()
            if not part.isdigit():
                raise ConvertError(
                    f"bad --input {text!r}: dimension {part!r} is not a non-negative integer")
            dims.append(int(part))
    return name, dims


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        sys.stderr.write(f"onnx2plan: error: {message} (see --help)\n")
        sys.exit(EXIT_ERROR)


def build_parser():
    p = _Parser(
        prog="onnx2plan.py",
        description="Convert an ONNX model to a tagalloc static memory-planning problem "
        "(docs/plan-format.md).")
    p.add_argument("model", metavar="MODEL.onnx", help="the ONNX model")
    p.add_argument("--input", action="append", default=[], metavar="NAME=D0,D1,...",
                   help="fix a graph input's shape (repeatable); needed for every input "
                   "with a dynamic dimension")
    p.add_argument("--streams", type=int, default=None, metavar="N",
                   help="N >= 2: graph mode, nodes spread over N streams; 1 or absent: "
                   "sequential intervals in file order")
    p.add_argument("--align", type=int, default=64, metavar="A",
                   help="alignment of every buffer, a power of two (default 64)")
    p.add_argument("--no-inplace", action="store_true",
                   help="no in-place aliases for element-wise ops")
    p.add_argument("--no-views", action="store_true",
                   help="no view aliases for Reshape, Flatten, Squeeze, ...")
    p.add_argument("--out", required=True, metavar="PROBLEM.json", help="where to write")
    return p


# ---------------------------------------------------------------------------------------
# Sizes and shapes


def _bits_per_element(elem_type):
    """Bits of one element of an ONNX tensor element type; None when it has no fixed size."""
    from onnx import TensorProto, helper

    if elem_type == TensorProto.UNDEFINED:
        return None
    if elem_type == TensorProto.STRING:
        return None
    packed = {"INT4": 4, "UINT4": 4, "FLOAT4E2M1": 4, "INT2": 2, "UINT2": 2,
              "FLOAT6E2M3": 6, "FLOAT6E3M2": 6}
    for name, bits in packed.items():
        if elem_type == getattr(TensorProto, name, -1):
            return bits
    if elem_type == TensorProto.BOOL:
        return 8
    try:
        return helper.tensor_dtype_to_np_dtype(elem_type).itemsize * 8
    except Exception:  # an element type this onnx does not know
        return None


def _static_dims(shape):
    """The dims of a TensorShapeProto, or None when one is not a known value."""
    dims = []
    for d in shape.dim:
        if d.WhichOneof("value") != "dim_value" or d.dim_value < 0:
            return None
        dims.append(d.dim_value)
    return dims


def _describe_dim(d, index):
    if d.WhichOneof("value") == "dim_param":
        return f"dimension {index} ({d.dim_param!r})"
    return f"dimension {index}"


def _subgraph_outer_refs(graph):
    """Names a subgraph (If/Loop/Scan body) reads from outside it, in first-use order."""
    defined = {i.name for i in graph.input}
    defined.update(i.name for i in graph.initializer)
    defined.update(i.values.name for i in graph.sparse_initializer)
    refs = []
    seen = set()

    def note(name):
        if name and name not in defined and name not in seen:
            seen.add(name)
            refs.append(name)

    for node in graph.node:
        for name in node.input:
            note(name)
        for name in _node_subgraph_refs(node):
            note(name)
        defined.update(o for o in node.output if o)
    for o in graph.output:
        note(o.name)
    return refs


def _node_subgraph_refs(node):
    from onnx import AttributeProto

    refs = []
    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH:
            refs.extend(_subgraph_outer_refs(attr.g))
        elif attr.type == AttributeProto.GRAPHS:
            for g in attr.graphs:
                refs.extend(_subgraph_outer_refs(g))
    return refs


# ---------------------------------------------------------------------------------------
# The conversion


def _infer(model, given):
    """Fixes the given input shapes, runs shape inference; returns the inferred model.

    The model's own value_info and output shapes are stale once an input dimension changes,
    and non-strict inference keeps a stale declared shape over the one it infers, so they are
    taken off before inference then. Otherwise they stay: they help inference past an op it
    cannot shape (a custom op).
    """
    import onnx

    graph = model.graph
    weights = {i.name for i in graph.initializer}
    weights.update(i.values.name for i in graph.sparse_initializer)
    inputs = [i for i in graph.input if i.name not in weights]
    names = [i.name for i in inputs]
    changed = False
    listed = ", ".join(map(repr, names)) or "none"
    for name in given:
        if name not in names:
            if name in weights:
                raise ConvertError(f"--input {name!r}: that is an initializer (a weight), "
                                   f"not an input; the model's inputs: {listed}")
            raise ConvertError(f"unknown input {name!r} (--input); the model's inputs: "
                               f"{listed}")
    for vi in inputs:
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if tt is None:
            raise ConvertError(f"graph input {vi.name!r} is not a tensor")
        if vi.name in given:
            dims = given[vi.name]
            if tt.HasField("shape"):
                declared = tt.shape.dim
                if len(declared) != len(dims):
                    raise ConvertError(
                        f"--input {vi.name}: {len(dims)} dimensions given, the model "
                        f"declares {len(declared)}")
                for d, v in zip(declared, dims):
                    if d.WhichOneof("value") != "dim_value" or d.dim_value != v:
                        changed = True
            else:
                changed = True
            tt.shape.Clear()
            for v in dims:
                tt.shape.dim.add().dim_value = v
        else:
            if not tt.HasField("shape"):
                raise ConvertError(f"graph input {vi.name!r} has no shape: give it with "
                                   f"--input {vi.name}=D0,D1,...")
            for i, d in enumerate(tt.shape.dim):
                if d.WhichOneof("value") != "dim_value":
                    raise ConvertError(
                        f"graph input {vi.name!r} has a dynamic {_describe_dim(d, i)}: give "
                        f"its shape with --input {vi.name}=D0,D1,...")

    if changed:
        del graph.value_info[:]
        for o in graph.output:
            if o.type.HasField("tensor_type"):
                o.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception as e:  # inference refusing the model
        raise ConvertError(f"shape inference failed: {_one_line(e)}") from None
    return inferred


def _one_line(e):
    text = " ".join(str(e).split())
    return text if len(text) <= 300 else text[:297] + "..."


def _opset(model):
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return 0


def _dropout_mask_type(data_type, opset):
    """Dropout's mask: the data's shape; bool from opset 10, the data's type before.

    ONNX's inference leaves the mask untyped in old opsets."""
    from onnx import TensorProto, TypeProto

    if data_type is None or not data_type.HasField("tensor_type"):
        return None
    t = TypeProto()
    t.CopyFrom(data_type)
    if opset >= 10:
        t.tensor_type.elem_type = TensorProto.BOOL
    return t


def _node_ids(nodes):
    """Node ids: the name when non-empty and unique in the graph, else `op#index`."""
    counts = {}
    for n in nodes:
        if n.name:
            counts[n.name] = counts.get(n.name, 0) + 1
    used = set()
    ids = []
    for index, n in enumerate(nodes):
        if n.name and counts[n.name] == 1 and n.name not in used:
            ident = n.name
        else:
            ident = f"{n.op_type}#{index}"
            k = 2
            while ident in used or counts.get(ident, 0):
                ident = f"{n.op_type}#{index}.{k}"
                k += 1
        used.add(ident)
        ids.append(ident)
    return ids


def convert(model, inputs=None, streams=1, align=64, inplace=True, views=True, name="model"):
    """The problem (a dict in file order) and its stats (a dict) for an onnx ModelProto.

    `inputs` maps graph input names to their dims. The model is modified (shapes fixed).
    Raises ConvertError.
    """
    inputs = dict(inputs or {})
    if streams is None:
        streams = 1
    if streams < 1:
        raise ConvertError(f"--streams {streams}: must be at least 1")
    if align < 1 or align & (align - 1):
        raise ConvertError(f"--align {align}: must be a power of two")

    inferred = _infer(model, inputs)
    graph = inferred.graph

    weights = {i.name for i in graph.initializer}
    weights.update(i.values.name for i in graph.sparse_initializer)
    graph_inputs = [i.name for i in graph.input if i.name not in weights]
    types = {}
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        types[vi.name] = vi.type
    output_names = [o.name for o in graph.output]

    # Which nodes run, which values are planned (rule 2), in file order.
    all_nodes = list(graph.node)
    ids_all = _node_ids(all_nodes)
    produced_by = {}
    for index, n in enumerate(all_nodes):
        for o in n.output:
            if o:
                produced_by.setdefault(o, index)
    planned = {}  # value -> producer's position in `nodes`, None for a graph input
    for name_ in graph_inputs:
        planned[name_] = None
    constant = set(weights)
    nodes = []  # (onnx node, id, planned inputs in order, each once)
    read_anywhere = set(output_names)
    for n in all_nodes:
        read_anywhere.update(n.input)
        read_anywhere.update(_node_subgraph_refs(n))
    unread_masks = 0
    dropout_masks = {}  # a read Dropout mask -> its data input, for its type if not inferred
    for index, n in enumerate(all_nodes):
        reads = [i for i in n.input if i] + _node_subgraph_refs(n)
        for r in reads:
            if r in planned or r in constant:
                continue
            if r in produced_by and produced_by[r] >= index:
                raise ConvertError(
                    f"node {ids_all[index]!r} reads {r!r} before node "
                    f"{ids_all[produced_by[r]]!r} produces it: the nodes are not in "
                    f"topological order")
            raise ConvertError(f"node {ids_all[index]!r} reads {r!r}, which no node, input "
                               f"or initializer provides")
        outs = [o for o in n.output if o]
        mask = n.output[1] if n.op_type == "Dropout" and len(n.output) > 1 else ""
        if mask and mask not in read_anywhere:
            # Inference: Dropout is the identity and writes no mask that nothing reads.
            outs.remove(mask)
            constant.add(mask)
            unread_masks += 1
        if n.op_type == "Constant" or not any(r in planned for r in reads):
            constant.update(outs)
            continue
        position = len(nodes)
        seen = set()
        ins = []
        for r in reads:
            if r in planned and r not in seen:
                seen.add(r)
                ins.append(r)
        if mask in outs:
            dropout_masks[mask] = n.input[0]
        for o in outs:
            if o in planned:
                raise ConvertError(f"value {o!r} is produced twice")
            planned[o] = position
        nodes.append((n, ids_all[index], ins))

    # Sizes.
    sizes = {}
    counts = {}
    for v in planned:
        t = types.get(v)
        if (t is None or not t.HasField("tensor_type")) and v in dropout_masks:
            t = _dropout_mask_type(types.get(dropout_masks[v]), _opset(inferred))
        what = "graph input" if planned[v] is None else \
            f"output of node {nodes[planned[v]][1]!r}"
        if t is None or not t.HasField("tensor_type"):
            raise ConvertError(f"value {v!r} ({what}) has an unknown type after shape "
                               f"inference (not a tensor, or not inferred)")
        tt = t.tensor_type
        bits = _bits_per_element(tt.elem_type)
        if bits is None:
            raise ConvertError(f"value {v!r} ({what}) has an unknown or unsized element "
                               f"type ({tt.elem_type}) after shape inference")
        dims = _static_dims(tt.shape) if tt.HasField("shape") else None
        if dims is None:
            raise ConvertError(f"value {v!r} ({what}) has an unknown shape after shape "
                               f"inference")
        count = 1
        for d in dims:
            count *= d
        counts[v] = count
        sizes[v] = -(-count * bits // 8)

    # Shape inference does not check that a reshape keeps its element count: a shape fixed in
    # the model (a Reshape to [1, N]) then gives a problem for a model that cannot run.
    for n, node_id, _ in nodes:
        if n.op_type in SHAPE_KEEPING and n.input and n.output:
            x, out = n.input[0], n.output[0]
            if x in counts and out in counts and counts[x] != counts[out]:
                raise ConvertError(
                    f"node {node_id!r} ({n.op_type}) turns {counts[x]} elements of {x!r} into "
                    f"{counts[out]} of {out!r}: the model cannot run at these input shapes "
                    f"(a shape fixed in the model?)")

    # Consumers (node positions, each once, file order), outputs.
    consumers = {v: [] for v in planned}
    for k, (_, _, ins) in enumerate(nodes):
        for v in ins:
            consumers[v].append(k)
    outputs = {o for o in output_names if o in planned}

    # Streams (rule 7).
    stream_of = [0] * len(nodes)
    graph_mode = streams >= 2
    if graph_mode:
        first_consumer = {}
        for k, (n, _, ins) in enumerate(nodes):
            for v in ins:
                p = planned[v]
                if p is not None and p not in first_consumer:
                    first_consumer[p] = k
        load = [0] * streams
        cursor = 0
        for k, (n, _, ins) in enumerate(nodes):
            prod = next((planned[v] for v in ins if planned[v] is not None), None)
            if prod is None:
                s = 0
            elif first_consumer[prod] == k:
                s = stream_of[prod]
            else:
                other = [t for t in range(streams) if t != stream_of[prod]]
                least = min(load[t] for t in other)
                tied = [t for t in other if load[t] == least]
                s = min(tied, key=lambda t: (t - cursor) % streams)
                cursor = (s + 1) % streams
            stream_of[k] = s
            load[s] += 1

    # Ancestors (graph mode): bit c of ancestors[k] when node c reaches node k.
    ancestors = []
    if graph_mode:
        last_on = {}
        for k, (n, _, ins) in enumerate(nodes):
            acc = 0
            preds = {planned[v] for v in ins if planned[v] is not None}
            if stream_of[k] in last_on:
                preds.add(last_on[stream_of[k]])
            for p in preds:
                acc |= ancestors[p] | (1 << p)
            ancestors.append(acc)
            last_on[stream_of[k]] = k

    # Aliases (rules 5, 6).
    alias = {}  # value -> (target, view)
    owner = {v: v for v in planned}  # the buffer whose written data a value holds
    family = {v: [v] for v in planned}  # owner -> values sharing its data
    overwritten = set()  # owners whose data an in-place op has overwritten
    n_views = n_inplace = 0

    def qualifies(x, out, k):
        if x == out or sizes[x] != sizes[out]:
            return False
        o = owner[x]
        if planned[o] is None or o in overwritten:  # the caller's memory; written already
            return False
        for m in family[o]:
            if m in outputs:
                return False
            for c in consumers[m]:
                if c == k:
                    continue
                if graph_mode:
                    if not (ancestors[k] >> c) & 1:
                        return False
                elif c > k:
                    return False
        return True

    for k, (n, _, ins) in enumerate(nodes):
        outs = [o for o in n.output]
        out = outs[0] if outs else ""
        if not out:
            continue
        if views and n.op_type in VIEW_OPS:
            x = n.input[0] if n.input else ""
            if x and x in planned and sizes[x] == sizes[out]:
                alias[out] = (x, True)
                owner[out] = owner[x]
                family[owner[x]].append(out)
                del family[out]
                n_views += 1
            continue
        if inplace and n.op_type in INPLACE_OPS:
            if n.op_type == "BatchNormalization" and sum(1 for o in outs if o) != 1:
                continue
            for x in [i for i in n.input if i]:
                if x in planned and qualifies(x, out, k):
                    alias[out] = (x, False)
                    overwritten.add(owner[x])
                    n_inplace += 1
                    break

    # The problem, in file order: graph inputs, then each node's outputs.
    end = len(nodes)
    buffers = []
    for v in planned:
        b = {"id": v, "size": sizes[v], "align": align}
        p = planned[v]
        if graph_mode:
            b["producer"] = None if p is None else nodes[p][1]
            b["consumers"] = [nodes[c][1] for c in consumers[v]]
            if v in outputs:
                b["output"] = True
        else:
            lower = 0 if p is None else p
            last = max(consumers[v], default=lower)
            upper = end if v in outputs else last + 1
            b["lower"] = lower
            b["upper"] = max(upper, last + 1, lower + 1)
        if v in alias:
            target, view = alias[v]
            b["alias"] = {"of": target, "offset": 0, "view": view}
        buffers.append(b)

    problem = {"format": FORMAT, "name": name}
    if graph_mode:
        problem["nodes"] = [{"id": ident, "stream": stream_of[k]}
                            for k, (_, ident, _) in enumerate(nodes)]
    problem["buffers"] = buffers
    stats = {
        "nodes": len(nodes),
        "buffers": len(buffers),
        "views": n_views,
        "inplace": n_inplace,
        "streams": streams if graph_mode else 1,
        "bytes": sum(sizes.values()),
        "root_bytes": sum(sizes[v] for v in planned if v not in alias),
        "dropped_nodes": len(all_nodes) - len(nodes),
        "unread_masks": unread_masks,
    }
    return problem, stats


def dumps(problem):
    """The problem as JSON text: one node or buffer a line, keys in the order given."""
    def item(x):
        return json.dumps(x, ensure_ascii=False)

    lines = ["{"]
    keys = list(problem)
    for i, key in enumerate(keys):
        comma = "," if i + 1 < len(keys) else ""
        value = problem[key]
        if isinstance(value, list):
            if not value:
                lines.append(f"  {item(key)}: []{comma}")
                continue
            lines.append(f"  {item(key)}: [")
            for j, x in enumerate(value):
                lines.append(f"    {item(x)}{',' if j + 1 < len(value) else ''}")
            lines.append(f"  ]{comma}")
        else:
            lines.append(f"  {item(key)}: {item(value)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        given = {}
        for spec in args.input:
            name, dims = parse_input_spec(spec)
            if name in given:
                raise ConvertError(f"--input {name!r} given twice")
            given[name] = dims
        if args.streams is not None and args.streams < 1:
            raise ConvertError(f"--streams {args.streams}: must be at least 1")
        if args.align < 1 or args.align & (args.align - 1):
            raise ConvertError(f"--align {args.align}: must be a power of two")
        try:
            import onnx
        except ImportError:
            raise ConvertError("the onnx package is missing: pip install 'onnx>=1.14'") \
                from None
        start = time.perf_counter()  # the conversion: load, inference, planning, writing
        try:
            model = onnx.load(args.model, load_external_data=False)
        except Exception as e:
            raise ConvertError(f"cannot load {args.model}: {_one_line(e)}") from None
        stem = os.path.splitext(os.path.basename(args.model))[0]
        problem, stats = convert(model, given, streams=args.streams or 1, align=args.align,
                                 inplace=not args.no_inplace, views=not args.no_views,
                                 name=stem)
        text = dumps(problem)
        try:
            with open(args.out, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            raise ConvertError(f"cannot write {args.out}: {e.strerror or e}") from None
    except ConvertError as e:
        sys.stderr.write(f"onnx2plan: error: {e}\n")
        return EXIT_ERROR
    except Exception as e:  # a bug here: still one line, no traceback
        sys.stderr.write(f"onnx2plan: internal error: {type(e).__name__}: {_one_line(e)}\n")
        return EXIT_ERROR
    elapsed = time.perf_counter() - start
    sys.stderr.write(
        f"onnx2plan: {problem['name']}: {stats['nodes']} nodes, {stats['buffers']} planned "
        f"buffers ({stats['bytes']} bytes), {stats['views']} views, {stats['inplace']} "
        f"in-place aliases, {stats['streams']} stream{'s' if stats['streams'] > 1 else ''}, "
        f"{elapsed:.3f} s\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
