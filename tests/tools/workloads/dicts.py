# Workload for tests/data/python-dicts.trace.gz: dicts, lists and strings of mixed sizes, built,
# grown, sorted, sliced and dropped. Deterministic (a fixed LCG, no hash-seed dependence in what
# gets allocated beyond CPython's own). Run as: PYTHONMALLOC=malloc python3 -S dicts.py
state = 12345


def rand(n):
    global state
    state = (state * 1103515245 + 12345) & 0x7FFFFFFF
    return (state >> 16) % n


SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "xe", "zu", "qua", "bre"]


def word():
    return "".join(SYLLABLES[rand(len(SYLLABLES))] for _ in range(1 + rand(4)))


words = [word() for _ in range(1200)]

counts = {}
for w in words:
    counts[w] = counts.get(w, 0) + 1

index = {}
for i, w in enumerate(words):
    index.setdefault(w[:3], []).append(i)

records = [{"word": w, "n": counts[w], "pos": index[w[:3]][:4]} for w in words[:300]]
ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
text = " ".join(w for w, _ in ranked)
lines = [text[i : i + 1 + rand(200)] for i in range(0, len(text), 97)]
upper = [line.upper().replace("A", "aa") for line in lines]

for key in list(index)[::2]:
    del index[key]
records = records[::3]
blob = "\n".join(repr(r) for r in records)
tokens = blob.split()
print(len(words), len(counts), len(index), len(upper), len(tokens))
