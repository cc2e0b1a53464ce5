"""Tests of onnx2plan: python3 -m unittest discover -s tools/onnx2plan -v

Tests that need the onnx package are skipped, with the reason printed, when it is missing;
with CI=true in the environment they fail instead.
"""

import json
import math
import os
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "onnx2plan.py")
REPO = os.path.dirname(os.path.dirname(HERE))
SCHEMA = os.path.join(REPO, "docs", "plan-problem.schema.json")
sys.path.insert(0, HERE)

import onnx2plan  # noqa: E402  (needs no onnx to import)

try:
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    HAVE_ONNX = True
except ImportError:
    HAVE_ONNX = False

IN_CI = os.environ.get("CI", "").lower() in ("true", "1", "yes")
ONNX_MISSING = "the onnx package is not installed (pip install -r tools/onnx2plan/requirements.txt)"


def needs_onnx(cls):
    """Skipped without onnx, except under CI=true, where a missing onnx fails the tests."""
    if HAVE_ONNX:
        return cls
    if IN_CI:
        def fail(self):
            self.fail(f"CI=true and {ONNX_MISSING}")
        for name in [n for n in vars(cls) if n.startswith("test")]:
            setattr(cls, name, fail)
        return cls
    sys.stderr.write(f"test_onnx2plan: skipping {cls.__name__}: {ONNX_MISSING}\n")
    return unittest.skipUnless(HAVE_ONNX, ONNX_MISSING)(cls)


LIGHT_MODELS = ["resnet50", "densenet121", "inception_v1", "inception_v2", "shufflenet",
                "squeezenet", "vgg19", "bvlc_alexnet", "zfnet512"]


def light_dir():
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


# ---------------------------------------------------------------------------------------
# A hand-written check of docs/plan-problem.schema.json and of the rules in
# docs/plan-format.md the converter must keep (ids, aliases, lifetimes, safe overwrites).

U64 = 2 ** 64 - 1


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def _u64(x):
    return _is_int(x) and 0 <= x <= U64


def check_schema(p):
    """Structural check, key by key, of the schema; returns a list of problems."""
    errs = []

    def keys(obj, where, allowed, required):
        if not isinstance(obj, dict):
            errs.append(f"{where}: not an object")
            return False
        for k in obj:
            if k not in allowed:
                errs.append(f"{where}: unknown key {k!r}")
        for k in required:
            if k not in obj:
                errs.append(f"{where}: missing {k!r}")
        return True

    if not keys(p, "top", {"format", "name", "spaces", "nodes", "edges", "buffers", "groups"},
                ["format", "buffers"]):
        return errs
    if p.get("format") != "tagalloc-plan-problem/1":
        errs.append("format")
    if "name" in p and not isinstance(p["name"], str):
        errs.append("name")
    if "spaces" in p and not (isinstance(p["spaces"], list) and p["spaces"]):
        errs.append("spaces: not a non-empty array")
    for i, s in enumerate(p.get("spaces") or []):
        if keys(s, f"spaces[{i}]", {"name", "capacity"}, ["name"]):
            if not isinstance(s["name"], str) or not s["name"]:
                errs.append(f"spaces[{i}].name")
            if "capacity" in s and not _u64(s["capacity"]):
                errs.append(f"spaces[{i}].capacity")
    for i, n in enumerate(p.get("nodes", [])):
        if keys(n, f"nodes[{i}]", {"id", "stream"}, ["id"]):
            if not isinstance(n["id"], str) or not n["id"]:
                errs.append(f"nodes[{i}].id")
            if "stream" in n and not (_is_int(n["stream"]) and 0 <= n["stream"] <= 2**32 - 1):
                errs.append(f"nodes[{i}].stream")
    for i, e in enumerate(p.get("edges", [])):
        if not (isinstance(e, list) and len(e) == 2 and all(isinstance(x, str) for x in e)):
            errs.append(f"edges[{i}]")
    if not isinstance(p["buffers"], list):
        errs.append("buffers: not an array")
        return errs
    allowed = {"id", "size", "align", "lower", "upper", "producer", "consumers", "output",
               "offset", "spaces", "alias"}
    for i, b in enumerate(p["buffers"]):
        w = f"buffers[{i}]"
        if not keys(b, w, allowed, ["id", "size"]):
            continue
        if not isinstance(b.get("id"), str) or not b.get("id"):
            errs.append(f"{w}.id")
        for k in ("size", "lower", "upper", "offset"):
            if k in b and not _u64(b[k]):
                errs.append(f"{w}.{k}")
        if "align" in b and not (_u64(b["align"]) and b["align"] >= 1):
            errs.append(f"{w}.align")
        if "producer" in b and not (b["producer"] is None or isinstance(b["producer"], str)):
            errs.append(f"{w}.producer")
        if "consumers" in b and not (isinstance(b["consumers"], list)
                                     and all(isinstance(c, str) for c in b["consumers"])):
            errs.append(f"{w}.consumers")
        if "output" in b and not isinstance(b["output"], bool):
            errs.append(f"{w}.output")
        if "spaces" in b and not (isinstance(b["spaces"], list) and b["spaces"]
                                  and all(isinstance(s, str) for s in b["spaces"])):
            errs.append(f"{w}.spaces")
        if "alias" in b and keys(b["alias"], f"{w}.alias", {"of", "offset", "view"}, ["of"]):
            a = b["alias"]
            if not isinstance(a["of"], str):
                errs.append(f"{w}.alias.of")
            if "offset" in a and not _u64(a["offset"]):
                errs.append(f"{w}.alias.offset")
            if "view" in a and not isinstance(a["view"], bool):
                errs.append(f"{w}.alias.view")
    for i, g in enumerate(p.get("groups", [])):
        if keys(g, f"groups[{i}]", {"members", "gap"}, ["members"]):
            m = g["members"]
            if not (isinstance(m, list) and m and all(isinstance(x, str) for x in m)):
                errs.append(f"groups[{i}].members")
            if "gap" in g and not _u64(g["gap"]):
                errs.append(f"groups[{i}].gap")
    return errs


def check_rules(p):
    """The format's rules the converter must honour; returns a list of problems."""
    errs = []
    bufs = {}
    for b in p["buffers"]:
        if b["id"] in bufs:
            errs.append(f"buffer id {b['id']!r} twice")
        bufs[b["id"]] = b
    graph = "nodes" in p
    node_ids = [n["id"] for n in p.get("nodes", [])]
    if len(set(node_ids)) != len(node_ids):
        errs.append("a node id twice")
    index = {n: i for i, n in enumerate(node_ids)}
    for b in bufs.values():
        a = b.get("align", 1)
        if a & (a - 1):
            errs.append(f"{b['id']}: align {a}")
        if graph:
            if "lower" in b or "upper" in b:
                errs.append(f"{b['id']}: an interval in graph mode")
            if b.get("producer") is not None and b["producer"] not in index:
                errs.append(f"{b['id']}: unknown producer")
            cs = b.get("consumers", [])
            if len(set(cs)) != len(cs) or any(c not in index for c in cs):
                errs.append(f"{b['id']}: consumers {cs}")
        else:
            if {"producer", "consumers", "output"} & set(b):
                errs.append(f"{b['id']}: graph keys in interval mode")
            if not b.get("lower", 0) < b.get("upper", 0):
                errs.append(f"{b['id']}: empty interval")
        al = b.get("alias")
        if al is not None:
            t = bufs.get(al["of"])
            if t is None or al["of"] == b["id"]:
                errs.append(f"{b['id']}: alias of {al['of']!r}")
            elif al.get("offset", 0) + b["size"] > t["size"]:
                errs.append(f"{b['id']}: alias ends past {t['id']}")
            if "offset" in b or "spaces" in b:
                errs.append(f"{b['id']}: an alias with its own offset or spaces")
    if errs:
        return errs
    for b in bufs.values():  # no alias cycle
        seen = set()
        x = b
        while "alias" in x:
            if x["id"] in seen:
                errs.append(f"alias cycle through {x['id']!r}")
                break
            seen.add(x["id"])
            x = bufs[x["alias"]["of"]]

    ancestors = []  # graph mode: bit c when node c reaches node k; the order must be acyclic
    if graph:
        preds = [set() for _ in node_ids]
        last_on = {}
        for i, n in enumerate(p["nodes"]):
            s = n.get("stream", 0)
            if s in last_on:
                preds[i].add(last_on[s])
            last_on[s] = i
        for b in bufs.values():
            if b.get("producer") is not None:
                for c in b.get("consumers", []):
                    preds[index[c]].add(index[b["producer"]])
        for x, y in p.get("edges", []):
            preds[index[y]].add(index[x])
        if any(q >= i for i, ps in enumerate(preds) for q in ps):
            # Not in list order: check for a cycle the slow way.
            state = {}

            def visit(i):
                state[i] = 1
                for q in preds[i]:
                    if state.get(q) == 1 or (q not in state and visit(q)):
                        return True
                state[i] = 2
                return False
            if any(i not in state and visit(i) for i in range(len(node_ids))):
                errs.append("a cycle among the nodes")
                return errs
            errs.append("a dependency against list order (the converter never emits one)")
            return errs
        for i, ps in enumerate(preds):
            acc = 0
            for q in ps:
                acc |= ancestors[q] | (1 << q)
            ancestors.append(acc)

    def writer(b):  # the nearest writing buffer at or above b
        while "alias" in b and b["alias"].get("view", False):
            b = bufs[b["alias"]["of"]]
        return b["id"]

    for y in bufs.values():
        al = y.get("alias")
        if al is None or al.get("view", False):
            continue
        w = writer(bufs[al["of"]])
        for b in bufs.values():
            if b is y or writer(b) != w:
                continue
            if graph:
                if b.get("producer", None) is None and b is bufs[w]:
                    errs.append(f"{y['id']} overwrites graph input {b['id']}")
                if b.get("output", False):
                    errs.append(f"{y['id']} overwrites output {b['id']}")
                py = index[y["producer"]]
                for c in b.get("consumers", []):
                    if index[c] != py and not (ancestors[py] >> index[c]) & 1:
                        errs.append(f"{y['id']} overwrites {b['id']}, read by {c} after")
            elif b["upper"] > y["lower"] + 1:
                errs.append(f"{y['id']} overwrites {b['id']}, live to {b['upper']}")
    return errs


def check(testcase, problem):
    testcase.assertEqual(check_schema(problem), [])
    testcase.assertEqual(check_rules(problem), [])


# ---------------------------------------------------------------------------------------
# Tiny models


def vi(name, dims, elem=None):
    return h.make_tensor_value_info(name, elem if elem is not None else T.FLOAT, dims)


def make_model(nodes, inputs, outputs, inits=(), opset=17, extra_opsets=()):
    g = h.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    opsets = [h.make_opsetid("", opset)] + [h.make_opsetid(d, v) for d, v in extra_opsets]
    return h.make_model(g, opset_imports=opsets)


def weight(name="W", dims=(2, 2, 1, 1)):
    n = 1
    for d in dims:
        n *= d
    return h.make_tensor(name, T.FLOAT, list(dims), [0.5] * n)


def ints(name, values):
    return h.make_tensor(name, T.INT64, [len(values)], list(values))


def convert(model, **kw):
    problem, _ = onnx2plan.convert(model, **kw)
    return problem


def buffers(problem):
    return {b["id"]: b for b in problem["buffers"]}


def alias(of, view=False):
    return {"of": of, "offset": 0, "view": view}


X = [1, 2, 4, 4]  # 32 floats, 128 bytes


def chain(add_inputs=("r", "x")):
    """conv -> relu1 -> add (with x) -> relu2."""
    return make_model(
            [h.make_node("Conv", ["x", "W"], ["c"], name="conv"),
             h.make_node("Relu", ["c"], ["r"], name="relu1"),
             h.make_node("Add", list(add_inputs), ["a"], name="add"),
             h.make_node("Relu", ["a"], ["y"], name="relu2")],
        [vi("x", X)], [vi("y", None)], [weight()])


@needs_onnx
class Sequential(unittest.TestCase):
    def test_conv_relu_add_chain(self):
        p = convert(chain())
        check(self, p)
        self.assertEqual(p, {
            "format": "tagalloc-plan-problem/1", "name": "model",
            "buffers": [
                {"id": "x", "size": 128, "align": 64, "lower": 0, "upper": 3},
                {"id": "c", "size": 128, "align": 64, "lower": 0, "upper": 2},
                {"id": "r", "size": 128, "align": 64, "lower": 1, "upper": 3,
                 "alias": alias("c")},
                {"id": "a", "size": 128, "align": 64, "lower": 2, "upper": 4,
                 "alias": alias("r")},
                {"id": "y", "size": 128, "align": 64, "lower": 3, "upper": 4,
                 "alias": alias("a")},
            ]})
        self.assertEqual(list(p), ["format", "name", "buffers"])

    def test_graph_input_is_never_overwritten(self):
        b = buffers(convert(chain(("x", "r"))))
        self.assertEqual(b["a"]["alias"], alias("r"))  # x tried first, refused
        m = make_model(
            [h.make_node("Relu", ["x"], ["a"]), h.make_node("Sigmoid", ["x"], ["s"]),
             h.make_node("Add", ["a", "s"], ["y"])],
            [vi("x", X)], [vi("y", None)])
        p = convert(m)
        check(self, p)
        b = buffers(p)
        self.assertEqual(b["x"], {"id": "x", "size": 128, "align": 64, "lower": 0, "upper": 2})
        self.assertNotIn("alias", b["a"])
        self.assertNotIn("alias", b["s"])
        self.assertEqual(b["y"]["alias"], alias("a"))

    def test_no_inplace_when_the_input_is_read_later(self):
        m = make_model(
            [h.make_node("Conv", ["x", "W"], ["c"]), h.make_node("Relu", ["c"], ["r"]),
             h.make_node("Add", ["r", "c"], ["y"])],
            [vi("x", X)], [vi("y", None)], [weight()])
        p = convert(m)
        check(self, p)
        b = buffers(p)
        self.assertNotIn("alias", b["r"])
        self.assertEqual((b["c"]["lower"], b["c"]["upper"]), (0, 3))
        self.assertEqual(b["y"]["alias"], alias("r"))

    def test_no_inplace_over_a_graph_output_or_a_size_change(self):
        m = make_model(
            [h.make_node("Relu", ["x"], ["r"]), h.make_node("Relu", ["r"], ["y1"]),
             h.make_node("Relu", ["y1"], ["y2"]), h.make_node("ReduceSum", ["y2"], ["z"]),
             h.make_node("Add", ["z", "y2"], ["y3"])],
            [vi("x", X)], [vi("y1", None), vi("y3", None)])
        b = buffers(convert(m))
        self.assertEqual(b["y1"]["alias"], alias("r"))
        self.assertNotIn("alias", b["y2"])  # y1 is a graph output
        self.assertEqual(b["y3"]["alias"], alias("y2"))  # z is a scalar: broadcast
        self.assertEqual(b["y1"]["upper"], 5)

    def test_reshape_is_a_view_and_extends_nothing(self):
        m = make_model(
            [h.make_node("Relu", ["x"], ["r"]), h.make_node("Reshape", ["r", "shape"], ["v"]),
             h.make_node("Relu", ["v"], ["y"])],
            [vi("x", X)], [vi("y", None)], [ints("shape", [2, 4, 4])])
        p = convert(m)
        check(self, p)
        self.assertEqual(p["buffers"], [
            {"id": "x", "size": 128, "align": 64, "lower": 0, "upper": 1},
            {"id": "r", "size": 128, "align": 64, "lower": 0, "upper": 2},
            {"id": "v", "size": 128, "align": 64, "lower": 1, "upper": 3,
             "alias": alias("r", view=True)},
            {"id": "y", "size": 128, "align": 64, "lower": 2, "upper": 3,
             "alias": alias("v")},
        ])

    def test_a_view_family_read_later_blocks_inplace(self):
        m = make_model(
            [h.make_node("Relu", ["x"], ["r"]), h.make_node("Reshape", ["r", "shape"], ["v"]),
             h.make_node("Relu", ["v"], ["y"]), h.make_node("Add", ["y", "r"], ["z"])],
            [vi("x", X)], [vi("z", None)], [ints("shape", [2, 4, 4])])
        p = convert(m)
        check(self, p)
        b = buffers(p)
        self.assertEqual(b["v"]["alias"], alias("r", view=True))
        self.assertNotIn("alias", b["y"])  # r, v's data, is read by Add after
        self.assertEqual(b["z"]["alias"], alias("y"))

    def test_a_view_of_a_graph_input_is_not_overwritten(self):
        m = make_model(
            [h.make_node("Flatten", ["x"], ["v"]), h.make_node("Relu", ["v"], ["y"])],
            [vi("x", X)], [vi("y", None)])
        b = buffers(convert(m))
        self.assertEqual(b["v"]["alias"], alias("x", view=True))
        self.assertNotIn("alias", b["y"])

    def test_flags_turn_aliases_off(self):
        m = make_model(
            [h.make_node("Relu", ["x"], ["r"]), h.make_node("Reshape", ["r", "shape"], ["v"]),
             h.make_node("Relu", ["v"], ["y"])],
            [vi("x", X)], [vi("y", None)], [ints("shape", [2, 4, 4])])
        b = buffers(convert(m, views=False))
        self.assertNotIn("alias", b["v"])
        self.assertEqual(b["y"]["alias"], alias("v"))
        b = buffers(convert(m, inplace=False))
        self.assertEqual(b["v"]["alias"], alias("r", view=True))
        self.assertNotIn("alias", b["y"])
        p = convert(m, inplace=False, views=False, align=16)
        self.assertFalse(any("alias" in x for x in p["buffers"]))
        self.assertEqual({x["align"] for x in p["buffers"]}, {16})

    def test_constants_are_not_planned(self):
        const = h.make_node("Constant", [], ["shape_c"], value=ints("v", [2, 2]))
        m = make_model(
            [const,
             h.make_node("ConstantOfShape", ["wshape"], ["w"],
                         value=h.make_tensor("v", T.FLOAT, [1], [1.0])),
             h.make_node("Reshape", ["w", "shape_c"], ["w2"]),
             h.make_node("Add", ["x", "w"], ["a"], name="add"),
             h.make_node("Reshape", ["a", "shape_c"], ["v"], name="reshape"),
             h.make_node("Clip", ["v", "", "mx"], ["y"], name="clip")],
            [vi("x", [1, 4])], [vi("y", None), vi("w2", None)],
            [ints("wshape", [1, 4]), h.make_tensor("mx", T.FLOAT, [], [6.0])])
        p, stats = onnx2plan.convert(m, streams=2)
        check(self, p)
        self.assertEqual(p["nodes"], [{"id": "add", "stream": 0}, {"id": "reshape", "stream": 0},
                                      {"id": "clip", "stream": 0}])
        self.assertEqual(p["buffers"], [
            {"id": "x", "size": 16, "align": 64, "producer": None, "consumers": ["add"]},
            {"id": "a", "size": 16, "align": 64, "producer": "add", "consumers": ["reshape"]},
            {"id": "v", "size": 16, "align": 64, "producer": "reshape", "consumers": ["clip"],
             "alias": alias("a", view=True)},
            {"id": "y", "size": 16, "align": 64, "producer": "clip", "consumers": [],
             "output": True, "alias": alias("v")},
        ])
        self.assertEqual(stats["dropped_nodes"], 3)

    def test_node_ids(self):
        m = make_model(
            [h.make_node("Relu", ["x"], ["a"]), h.make_node("Relu", ["a"], ["b"], name="dup"),
             h.make_node("Relu", ["b"], ["c"], name="dup"),
             h.make_node("Relu", ["c"], ["d"], name="Relu#0"),
             h.make_node("Relu", ["d"], ["y"], name="last")],
            [vi("x", X)], [vi("y", None)])
        p = convert(m, streams=2)
        self.assertEqual([n["id"] for n in p["nodes"]],
                         ["Relu#0.2", "Relu#1", "Relu#2", "Relu#0", "last"])

    def test_dtypes_and_unused_values(self):
        m = make_model(
            [h.make_node("Cast", ["x"], ["h"], to=T.FLOAT16),
             h.make_node("Cast", ["h"], ["b"], to=T.BOOL),
             h.make_node("Not", ["b"], ["y"])],
            [vi("x", [3, 5]), vi("unused", [7], T.INT64)], [vi("y", None, T.BOOL)])
        p = convert(m)
        check(self, p)
        sizes = {b["id"]: (b["size"], b["lower"], b["upper"]) for b in p["buffers"]}
        self.assertEqual(sizes, {"x": (60, 0, 1), "unused": (56, 0, 1), "h": (30, 0, 2),
                                 "b": (15, 1, 3), "y": (15, 2, 3)})

    def test_dropout_is_a_view_and_its_unread_mask_is_not_planned(self):
        m = make_model(
            [h.make_node("Relu", ["x"], ["r"]),
             h.make_node("Dropout", ["r"], ["d", "mask"], ratio=0.5),
             h.make_node("Relu", ["d"], ["y"])],
            [vi("x", X)], [vi("y", None)], opset=9)
        p, stats = onnx2plan.convert(m)
        check(self, p)
        b = buffers(p)
        self.assertEqual(list(b), ["x", "r", "d", "y"])
        self.assertEqual(b["d"]["alias"], alias("r", view=True))
        self.assertEqual(stats["unread_masks"], 1)

    def test_streams_1_is_sequential(self):
        m = make_model([h.make_node("Relu", ["x"], ["y"])], [vi("x", X)], [vi("y", None)])
        self.assertEqual(convert(m, streams=1), convert(m))


@needs_onnx
class Streams(unittest.TestCase):
    def test_chain_on_one_stream(self):
        m = chain()
        p = convert(m, streams=2)
        check(self, p)
        self.assertEqual(list(p), ["format", "name", "nodes", "buffers"])
        self.assertEqual(p["nodes"], [{"id": n, "stream": 0}
                                      for n in ["conv", "relu1", "add", "relu2"]])
        self.assertEqual(p["buffers"], [
            {"id": "x", "size": 128, "align": 64, "producer": None, "consumers": ["conv", "add"]},
            {"id": "c", "size": 128, "align": 64, "producer": "conv", "consumers": ["relu1"]},
            {"id": "r", "size": 128, "align": 64, "producer": "relu1", "consumers": ["add"],
             "alias": alias("c")},
            {"id": "a", "size": 128, "align": 64, "producer": "add", "consumers": ["relu2"],
             "alias": alias("r")},
            {"id": "y", "size": 128, "align": 64, "producer": "relu2", "consumers": [],
             "output": True, "alias": alias("a")},
        ])

    def test_fork_joined_by_concat(self):
        m = make_model(
            [h.make_node("Relu", ["x"], ["r"], name="relu0"),
             h.make_node("Conv", ["r", "W"], ["c1"], name="conv1"),
             h.make_node("Conv", ["r", "W"], ["c2"], name="conv2"),
             h.make_node("Sigmoid", ["c2"], ["s2"], name="sig"),
             h.make_node("Concat", ["c1", "s2"], ["y"], name="cat", axis=1)],
            [vi("x", X)], [vi("y", None)], [weight()])
        p = convert(m, streams=2)
        check(self, p)
        self.assertEqual(p["nodes"], [
            {"id": "relu0", "stream": 0}, {"id": "conv1", "stream": 0},
            {"id": "conv2", "stream": 1}, {"id": "sig", "stream": 1},
            {"id": "cat", "stream": 0}])
        self.assertEqual(p["buffers"], [
            {"id": "x", "size": 128, "align": 64, "producer": None, "consumers": ["relu0"]},
            {"id": "r", "size": 128, "align": 64, "producer": "relu0",
             "consumers": ["conv1", "conv2"]},
            {"id": "c1", "size": 128, "align": 64, "producer": "conv1", "consumers": ["cat"]},
            {"id": "c2", "size": 128, "align": 64, "producer": "conv2", "consumers": ["sig"]},
            {"id": "s2", "size": 128, "align": 64, "producer": "sig", "consumers": ["cat"],
             "alias": alias("c2")},
            {"id": "y", "size": 256, "align": 64, "producer": "cat", "consumers": [],
             "output": True},
        ])
        q = convert(m, streams=3)
        check(self, q)
        self.assertEqual([n["stream"] for n in q["nodes"]], [0, 0, 1, 1, 0])

    def test_three_branches_spread_round_robin(self):
        m = make_model(
            [h.make_node("Relu", ["x"], ["r"]),
             h.make_node("Sigmoid", ["r"], ["b1"]), h.make_node("Tanh", ["r"], ["b2"]),
             h.make_node("Neg", ["r"], ["b3"]), h.make_node("Abs", ["r"], ["b4"]),
             h.make_node("Sum", ["b1", "b2", "b3", "b4"], ["y"])],
            [vi("x", X)], [vi("y", None)])
        p = convert(m, streams=3)
        check(self, p)
        # b2: streams 1 and 2 tie, 1 first; b3: 2 (less loaded); b4: 1 and 2 tie, cursor at 0.
        self.assertEqual([n["stream"] for n in p["nodes"]], [0, 0, 1, 2, 1, 0])
        self.assertFalse(any("alias" in b for b in p["buffers"][2:5]))
        self.assertEqual(buffers(p)["y"]["alias"], alias("b1"))

    def test_inplace_needs_the_other_readers_ordered_before(self):
        m = make_model(
            [h.make_node("Relu", ["x"], ["r"], name="relu0"),
             h.make_node("Conv", ["r", "W"], ["c1"], name="conv1"),
             h.make_node("Sigmoid", ["r"], ["s"], name="sig"),
             h.make_node("Add", ["c1", "s"], ["y"], name="add")],
            [vi("x", X)], [vi("y", None)], [weight()])
        seq = convert(m)
        check(self, seq)
        self.assertEqual(buffers(seq)["s"]["alias"], alias("r"))  # conv1 ran before
        par = convert(m, streams=2)
        check(self, par)
        self.assertEqual([n["stream"] for n in par["nodes"]], [0, 0, 1, 0])
        self.assertNotIn("alias", buffers(par)["s"])  # conv1 may still be reading r
        self.assertEqual(buffers(par)["y"]["alias"], alias("c1"))

    def test_graph_input_consumed_twice(self):
        m = make_model(
            [h.make_node("Relu", ["x"], ["a"]), h.make_node("Sigmoid", ["x"], ["s"]),
             h.make_node("Add", ["a", "s"], ["y"])],
            [vi("x", X)], [vi("y", None)])
        p = convert(m, streams=2)
        check(self, p)
        self.assertEqual([n["stream"] for n in p["nodes"]], [0, 0, 0])
        b = buffers(p)
        self.assertEqual(b["x"]["consumers"], ["Relu#0", "Sigmoid#1"])
        self.assertNotIn("alias", b["a"])
        self.assertNotIn("alias", b["s"])


# ---------------------------------------------------------------------------------------
# The command line


def run_cli(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          timeout=120)


class ErrorAssertions:
    def assert_error(self, r, *needles):
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        for n in needles:
            self.assertIn(n, r.stderr)


class CommandLineWithoutOnnx(ErrorAssertions, unittest.TestCase):
    def test_bad_arguments(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "p.json")
            self.assert_error(run_cli("m.onnx", "--input", "x:1,2", "--out", out), "x:1,2")
            self.assert_error(run_cli("m.onnx", "--input", "x=1,a", "--out", out), "'a'")
            self.assert_error(run_cli("m.onnx", "--streams", "0", "--out", out), "--streams 0")
            self.assert_error(run_cli("m.onnx", "--align", "48", "--out", out), "--align 48")
            self.assert_error(run_cli("m.onnx", "--streams", "two", "--out", out), "two")
            self.assert_error(run_cli("m.onnx"), "--out")
            self.assertFalse(os.path.exists(out))

    def test_input_spec(self):
        self.assertEqual(onnx2plan.parse_input_spec("gpu_0/data_0=1,3,224,224"),
                         ("gpu_0/data_0", [1, 3, 224, 224]))
        self.assertEqual(onnx2plan.parse_input_spec("a=b=2"), ("a=b", [2]))
        self.assertEqual(onnx2plan.parse_input_spec("s="), ("s", []))
        with self.assertRaises(onnx2plan.ConvertError):
            onnx2plan.parse_input_spec("=1")


@needs_onnx
class CommandLine(ErrorAssertions, unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def save(self, model, name="m.onnx"):
        onnx.save(model, self.path(name))
        return self.path(name)

    def dynamic(self):
        return make_model([h.make_node("Relu", ["x"], ["y"])], [vi("x", ["N", 3])],
                          [vi("y", ["N", 3])])

    def test_dynamic_dim_not_given(self):
        m = self.save(self.dynamic())
        self.assert_error(run_cli(m, "--out", self.path("p.json")),
                          "'x'", "dimension 0", "'N'", "--input")

    def test_dynamic_dim_given(self):
        m = self.save(self.dynamic(), "dyn.onnx")
        r = run_cli(m, "--input", "x=2,3", "--out", self.path("p.json"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stderr.strip(), r"^onnx2plan: dyn: 1 nodes, 2 planned buffers "
                         r"\(48 bytes\), 0 views, 0 in-place aliases, 1 stream, [0-9.]+ s$")
        with open(self.path("p.json")) as f:
            p = json.load(f)
        self.assertEqual(p["name"], "dyn")
        self.assertEqual([(b["id"], b["size"]) for b in p["buffers"]], [("x", 24), ("y", 24)])
        r = run_cli(m, "--input", "x=2,3,4", "--out", self.path("p.json"))
        self.assert_error(r, "3 dimensions given", "declares 2")

    def test_a_changed_batch_is_not_hidden_by_stale_shapes(self):
        m = make_model([h.make_node("Relu", ["x"], ["r"]), h.make_node("Relu", ["r"], ["y"])],
                       [vi("x", [1, 3])], [vi("y", [1, 3])])
        m.graph.value_info.append(vi("r", [1, 3]))
        r = run_cli(self.save(m), "--input", "x=4,3", "--out", self.path("p.json"))
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.path("p.json")) as f:
            self.assertEqual([b["size"] for b in json.load(f)["buffers"]], [48, 48, 48])

    def test_a_reshape_fixed_in_the_model_refuses_another_batch(self):
        # Reshape to [1, 12]: right at batch 1, wrong at batch 2, and shape inference does
        # not notice (the converter does).
        m = make_model([h.make_node("Relu", ["x"], ["r"]),
                        h.make_node("Reshape", ["r", "shape"], ["y"])],
                       [vi("x", ["N", 3, 4])], [vi("y", None)], [ints("shape", [1, 12])])
        ok = run_cli(self.save(m, "fixed.onnx"), "--input", "x=1,3,4", "--out",
                     self.path("p.json"))
        self.assertEqual(ok.returncode, 0, ok.stderr)
        self.assert_error(run_cli(self.path("fixed.onnx"), "--input", "x=2,3,4", "--out",
                                  self.path("p.json")),
                          "Reshape", "24 elements of 'r'", "12 of 'y'", "cannot run")

    def test_unknown_input(self):
        m = self.save(self.dynamic())
        self.assert_error(run_cli(m, "--input", "nope=1,3", "--out", self.path("p.json")),
                          "unknown input 'nope'", "'x'")
        mw = make_model([h.make_node("Conv", ["x", "W"], ["y"])], [vi("x", X), vi("W", None)],
                        [vi("y", None)], [weight()])
        self.assert_error(run_cli(self.save(mw, "w.onnx"), "--input", "W=1", "--out",
                                  self.path("p.json")), "'W'", "initializer")

    def test_unknown_shape(self):
        m = make_model([h.make_node("Relu", ["x"], ["r"]),
                        h.make_node("Foo", ["r"], ["z"], domain="my.ops"),
                        h.make_node("Relu", ["z"], ["y"])],
                       [vi("x", X)], [vi("y", None)], extra_opsets=[("my.ops", 1)])
        self.assert_error(run_cli(self.save(m), "--out", self.path("p.json")),
                          "'z'", "Foo#1", "unknown")

    def test_declared_shapes_help_when_no_input_changes(self):
        m = make_model([h.make_node("Relu", ["x"], ["r"]),
                        h.make_node("Foo", ["r"], ["z"], domain="my.ops"),
                        h.make_node("Relu", ["z"], ["y"])],
                       [vi("x", X)], [vi("y", None)], extra_opsets=[("my.ops", 1)])
        m.graph.value_info.append(vi("z", [5]))
        path = self.save(m)
        r = run_cli(path, "--input", "x=1,2,4,4", "--out", self.path("p.json"))
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.path("p.json")) as f:
            self.assertEqual([b["size"] for b in json.load(f)["buffers"]], [128, 128, 20, 20])
        self.assert_error(run_cli(path, "--input", "x=2,2,4,4", "--out", self.path("p.json")),
                          "'z'", "Foo#1", "unknown")

    def test_missing_model(self):
        self.assert_error(run_cli(self.path("none.onnx"), "--out", self.path("p.json")),
                          "cannot load")

    def test_output_is_deterministic(self):
        m = self.save(make_model(
            [h.make_node("Relu", ["x"], ["r"]), h.make_node("Sigmoid", ["r"], ["s"]),
             h.make_node("Tanh", ["r"], ["t"]), h.make_node("Add", ["s", "t"], ["y"])],
            [vi("x", X)], [vi("y", None)]))
        texts = []
        for out in ("a.json", "b.json"):
            r = run_cli(m, "--streams", "2", "--out", self.path(out))
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(self.path(out), "rb") as f:
                texts.append(f.read())
        self.assertEqual(texts[0], texts[1])
        check(self, json.loads(texts[0]))


# ---------------------------------------------------------------------------------------
# The nine light CNNs shipped with onnx


class ConsumerAssertions:
    def check_consumers(self, model, p):
        """Each buffer lists every node that reads it."""
        bufs = buffers(p)
        nodes = {n["id"] for n in p["nodes"]}
        listed = 0
        for n in model.graph.node:
            if n.name in nodes:
                for i in dict.fromkeys(x for x in n.input if x in bufs):
                    self.assertIn(n.name, bufs[i]["consumers"], (n.name, i))
                    listed += 1
        self.assertEqual(listed, sum(len(b["consumers"]) for b in p["buffers"]))


@needs_onnx
class LightModels(ConsumerAssertions, unittest.TestCase):
    def input_of(self, model):
        weights = {i.name for i in model.graph.initializer}
        inputs = [i for i in model.graph.input if i.name not in weights]
        self.assertEqual(len(inputs), 1)
        dims = [d.dim_value if d.HasField("dim_value") else None
                for d in inputs[0].type.tensor_type.shape.dim]
        if None in dims:  # dynamic: the usual ImageNet size
            dims = [1, 3, 224, 224]
        return inputs[0].name, dims

    def test_all_nine(self):
        d = light_dir()
        for name in LIGHT_MODELS:
            path = os.path.join(d, f"light_{name}.onnx")
            with self.subTest(model=name):
                model = onnx.load(path, load_external_data=False)
                inp, dims = self.input_of(model)
                for streams in (1, 2):
                    t = time.perf_counter()
                    p, stats = onnx2plan.convert(onnx.load(path, load_external_data=False),
                                                 {inp: dims}, streams=streams,
                                                 name=f"light_{name}")
                    self.assertLess(time.perf_counter() - t, 20)
                    check(self, p)
                    self.assertGreater(stats["nodes"], 10)
                    self.assertGreater(stats["inplace"], 0)
                    if streams == 2:
                        self.assertIn("nodes", p)
                        self.check_consumers(model, p)
                        self.assertEqual(sum(b.get("output", False) for b in p["buffers"]), 1)
                    else:
                        self.assertNotIn("nodes", p)
                        ends = {b["upper"] for b in p["buffers"]}
                        self.assertEqual(max(ends), stats["nodes"])
                    if name == "resnet50":
                        self.assertGreater(stats["views"], 0)
                        self.assertGreater(stats["inplace"], 50)
                        b = buffers(p)
                        self.assertEqual(b["gpu_0/data_0"]["size"], 3 * 224 * 224 * 4)

    def test_cli_on_resnet50(self):
        path = os.path.join(light_dir(), "light_resnet50.onnx")
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "p.json")
            r = run_cli(path, "--input", "gpu_0/data_0=1,3,224,224", "--streams", "2",
                        "--out", out)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stderr, r"light_resnet50: 176 nodes, 177 planned buffers "
                             r"\(\d+ bytes\), [1-9]\d* views, [1-9]\d* in-place aliases, "
                             r"2 streams, [0-9.]+ s")
            with open(out) as f:
                check(self, json.load(f))


# ---------------------------------------------------------------------------------------
# The generated models (make_models.py)

MAKE_MODELS = os.path.join(HERE, "make_models.py")

# model -> its input, two shapes to convert it at, its output
GENERATED = {
    "transformer": ("tokens", [[1, 128, 512], [4, 384, 512]], "output"),
    "unet": ("image", [[1, 3, 256, 256], [1, 3, 320, 480]], "mask"),
    "mobilenet": ("image", [[1, 3, 224, 224], [1, 3, 192, 320]], "logits"),
}


@needs_onnx
class GeneratedModels(ConsumerAssertions, ErrorAssertions, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.made = None
        if HAVE_ONNX:
            cls.made = subprocess.run(
                [sys.executable, MAKE_MODELS, cls.dir.name, "--layers", "12", "--depth", "4"],
                capture_output=True, text=True, timeout=120)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def model_path(self, name):
        self.assertEqual(self.made.returncode, 0, self.made.stderr)
        return os.path.join(self.dir.name, f"{name}.onnx")

    def test_make_models_writes_checked_small_models(self):
        self.assertEqual(self.made.returncode, 0, self.made.stderr)
        lines = self.made.stdout.strip().splitlines()
        self.assertEqual(len(lines), 3, self.made.stdout)
        for line, name in zip(lines, GENERATED):
            self.assertIn(f"{name}.onnx: ", line)
            path = self.model_path(name)
            self.assertLess(os.path.getsize(path), 20_000_000)
            model = onnx.load(path)
            onnx.checker.check_model(model)
            onnx.shape_inference.infer_shapes(model, strict_mode=True)
            inp, _, out = GENERATED[name]
            self.assertEqual([i.name for i in model.graph.input], [inp])
            self.assertEqual([o.name for o in model.graph.output], [out])
            dims = model.graph.input[0].type.tensor_type.shape.dim
            params = [d.dim_param for d in dims if d.HasField("dim_param")]
            self.assertEqual(params, ["batch", "seq"] if name == "transformer"
                             else ["height", "width"])

    def convert_both(self, name):
        """The model at its two shapes, sequential and on two streams, checked as the light
        CNNs are; returns [(dims, streams, problem, stats)]."""
        path = self.model_path(name)
        model = onnx.load(path)
        inp, shapes, out = GENERATED[name]
        done = []
        for dims in shapes:
            for streams in (1, 2):
                with self.subTest(dims=dims, streams=streams):
                    p, stats = onnx2plan.convert(onnx.load(path), {inp: dims}, streams=streams,
                                                 name=name)
                    check(self, p)
                    self.assertEqual(stats["nodes"], len(model.graph.node))
                    self.assertEqual(stats["buffers"], stats["nodes"] + 1)
                    self.assertGreater(stats["inplace"], 0)
                    b = buffers(p)
                    self.assertEqual(b[inp]["size"], 4 * math.prod(dims))
                    if streams == 2:
                        self.check_consumers(model, p)
                        self.assertEqual([x["id"] for x in p["buffers"] if x.get("output")],
                                         [out])
                    else:
                        self.assertNotIn("nodes", p)
                        self.assertEqual(max(x["upper"] for x in p["buffers"]), stats["nodes"])
                        self.assertEqual(b[out]["upper"], stats["nodes"])
                    done.append((dims, streams, p, stats))
        self.assertEqual(len(done), 4)
        return done

    def test_transformer(self):
        for (batch, seq, d), _, p, stats in self.convert_both("transformer"):
            b = buffers(p)
            self.assertEqual(stats["views"], 4 * 12)  # four Reshapes a layer
            self.assertEqual(b["layer0/scores"]["size"], 4 * batch * 8 * seq * seq)
            self.assertEqual(b["layer11/fc1"]["size"], 4 * batch * seq * 4 * d)
            self.assertEqual(b["layer3/q_heads"]["alias"], alias("layer3/q", view=True))
            self.assertEqual(b["output"]["size"], 4 * batch * seq * d)
            # tokens, a graph input, is never overwritten: the Add writes over its other input
            self.assertEqual(b["layer0/residual1"]["alias"], alias("layer0/attn_out"))
            self.assertEqual(b["layer1/residual1"]["alias"], alias("layer0/residual2"))

    def test_unet(self):
        for (_, _, hh, ww), _, p, _ in self.convert_both("unet"):
            b = buffers(p)
            self.assertEqual(b["down0/conv1"]["size"], 4 * 64 * hh * ww)
            self.assertEqual(b["bottom/conv2_relu"]["size"], 4 * 1024 * hh * ww // 256)
            self.assertEqual(b["up0/concat"]["size"], 4 * 128 * hh * ww)
            self.assertEqual(b["mask"]["size"], 4 * 2 * hh * ww)
            self.assertEqual(b["down2/conv1_relu"]["alias"], alias("down2/conv1"))

    def test_mobilenet(self):
        for (_, _, hh, ww), streams, p, stats in self.convert_both("mobilenet"):
            b = buffers(p)
            self.assertEqual(b["stem"]["size"], 4 * 32 * (hh // 2) * (ww // 2))
            self.assertEqual(b["block16/project"]["size"], 4 * 320 * (hh // 32) * (ww // 32))
            self.assertEqual(b["logits"]["size"], 4 * 1000)
            self.assertEqual(b["logits"]["alias"], alias("classifier", view=True))
            adds = [x for x in p["buffers"] if x["id"].endswith("/residual")]
            self.assertEqual(len(adds), 10)  # stride 1, channels unchanged
            if streams == 1:
                self.assertTrue(all("alias" in x for x in adds))

    def test_cli_converts_each(self):
        for name, (inp, shapes, _) in GENERATED.items():
            with self.subTest(model=name):
                out = os.path.join(self.dir.name, f"{name}.json")
                dims = ",".join(map(str, shapes[1]))
                r = run_cli(self.model_path(name), "--input", f"{inp}={dims}", "--streams",
                            "2", "--out", out)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertRegex(r.stderr, rf"^onnx2plan: {name}: \d+ nodes, \d+ planned "
                                 r"buffers \(\d+ bytes\), \d+ views, [1-9]\d* in-place "
                                 r"aliases, 2 streams, [0-9.]+ s$")
                with open(out) as f:
                    check(self, json.load(f))

    def test_a_dynamic_dim_not_given_is_refused(self):
        for name, needles in (
                ("transformer", ["'tokens'", "dimension 0 ('batch')", "--input tokens="]),
                ("unet", ["'image'", "dimension 2 ('height')", "--input image="]),
                ("mobilenet", ["'image'", "dimension 2 ('height')", "--input image="])):
            with self.subTest(model=name):
                out = os.path.join(self.dir.name, "refused.json")
                self.assert_error(run_cli(self.model_path(name), "--out", out), *needles)
                self.assertFalse(os.path.exists(out))

    def test_shapes_the_model_does_not_take_are_refused(self):
        path = self.model_path("unet")
        with self.assertRaisesRegex(onnx2plan.ConvertError, "'up3/concat'"):
            onnx2plan.convert(onnx.load(path), {"image": [1, 3, 200, 200]})  # 200 / 16
        with self.assertRaisesRegex(onnx2plan.ConvertError, "'layer0/q_matmul'"):
            onnx2plan.convert(onnx.load(self.model_path("transformer")),
                              {"tokens": [1, 128, 256]})

    def test_big_sizes(self):
        import make_models
        layers = make_models.big_transformer_layers()
        _, stats = onnx2plan.convert(make_models.transformer(layers),
                                     {"tokens": [1, 128, 512]})
        self.assertLessEqual(abs(stats["buffers"] - 5000), 20, (layers, stats))
        self.assertEqual(make_models.deepest_unet(), 9)  # 512 = 2^9: the bottom is 1x1
        p, _ = onnx2plan.convert(make_models.unet(9), {"image": [1, 3, 512, 512]})
        check(self, p)
        self.assertEqual(buffers(p)["bottom/conv2_relu"]["size"], 4 * 1024)
        with self.assertRaises(onnx2plan.ConvertError):
            onnx2plan.convert(make_models.unet(10), {"image": [1, 3, 512, 512]})


class Schema(unittest.TestCase):
    def test_the_checker_knows_the_schemas_keys(self):
        with open(SCHEMA) as f:
            schema = json.load(f)
        props = schema["properties"]
        self.assertEqual(set(props), {"format", "name", "spaces", "nodes", "edges", "buffers",
                                      "groups"})
        self.assertEqual(set(props["buffers"]["items"]["properties"]),
                         {"id", "size", "align", "lower", "upper", "producer", "consumers",
                          "output", "offset", "spaces", "alias"})
        self.assertEqual(set(props["nodes"]["items"]["properties"]), {"id", "stream"})
        self.assertEqual(set(props["buffers"]["items"]["properties"]["alias"]["properties"]),
                         {"of", "offset", "view"})

    def test_the_checker_catches_breaches(self):
        good = {"format": "tagalloc-plan-problem/1", "buffers": [
            {"id": "a", "size": 4, "lower": 0, "upper": 2},
            {"id": "b", "size": 4, "lower": 1, "upper": 2, "alias": alias("a")}]}
        self.assertEqual(check_schema(good) + check_rules(good), [])
        bad = json.loads(json.dumps(good))
        bad["buffers"][0]["upper"] = 3  # a read after b overwrote it
        self.assertTrue(check_rules(bad))
        bad = json.loads(json.dumps(good))
        bad["buffers"][1]["alignmnet"] = 4
        self.assertTrue(check_schema(bad))
        bad = json.loads(json.dumps(good))
        bad["buffers"][0]["alias"] = alias("b", view=True)
        self.assertTrue(check_rules(bad))


if __name__ == "__main__":
    unittest.main()
