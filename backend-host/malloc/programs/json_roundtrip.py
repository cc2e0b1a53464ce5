"""A JSON round trip: N nested records (dicts, lists, strings, floats) dumped, parsed back,
compared, dumped again sorted and indented, parsed again. Prints sizes and a digest, which
are the same on every run (seeded generator). Usage: python3 json_roundtrip.py [N]"""
import hashlib
import json
import random
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
rng = random.Random(1234)
words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota",
         "kappa", "lambda", "mu", "nu", "xi", "omicron", "pi", "rho", "sigma", "tau"]


def record(i):
    return {
        "id": i,
        "name": "user%d-%s" % (i, rng.choice(words)),
        "score": rng.random() * 100,
        "tags": [rng.choice(words) * rng.randrange(1, 4) for _ in range(rng.randrange(1, 9))],
        "nested": {
            "a": [rng.randrange(100000) for _ in range(rng.randrange(1, 12))],
            "b": {"x": rng.random(), "ok": i % 3 == 0, "none": None, "s": "é" * (i % 5)},
        },
    }


data = [record(i) for i in range(n)]
text = json.dumps(data)
back = json.loads(text)
assert back == data
text2 = json.dumps(back, sort_keys=True, indent=1, ensure_ascii=False)
again = json.loads(text2)
assert again == data
print(len(text), len(text2))
print(hashlib.sha256(text.encode()).hexdigest())
print(hashlib.sha256(text2.encode()).hexdigest())
print(sum(len(r["tags"]) for r in again), round(sum(r["score"] for r in again), 6))
