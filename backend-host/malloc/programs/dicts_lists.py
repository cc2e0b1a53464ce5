"""Dict- and list-heavy work: word counts over generated text, an index of word positions
(a dict of lists), sorting, set algebra, slicing, deleting half the keys and rebuilding.
Deterministic output. Usage: python3 dicts_lists.py [N]"""
import random
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 200000
rng = random.Random(42)
syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "qu", "ph", "st"]
vocab = ["".join(rng.choice(syllables) for _ in range(rng.randrange(1, 5))) for _ in range(5000)]
text = [rng.choice(vocab) for _ in range(n)]

counts = {}
positions = {}
for i, w in enumerate(text):
    counts[w] = counts.get(w, 0) + 1
    positions.setdefault(w, []).append(i)

top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
print("distinct", len(counts), "top", top)

pairs = {}
for a, b in zip(text, text[1:]):
    pairs[(a, b)] = pairs.get((a, b), 0) + 1
print("pairs", len(pairs), max(pairs.values()))

gaps = {w: [q - p for p, q in zip(ps, ps[1:])] for w, ps in positions.items() if len(ps) > 1}
print("mean gap of top word", sum(gaps[top[0][0]]) / len(gaps[top[0][0]]))

even = {w for i, w in enumerate(text) if i % 2 == 0}
odd = {w for i, w in enumerate(text) if i % 2 == 1}
print("sets", len(even & odd), len(even - odd), len(odd ^ even))

for w in sorted(counts)[::2]:
    del counts[w]
rebuilt = {w: c * 2 for w, c in counts.items() if c > 1}
chunks = [text[i:i + 100] for i in range(0, len(text), 100)]
joined = [" ".join(sorted(c)) for c in chunks]
print("kept", len(counts), len(rebuilt), sum(map(len, joined)))
nested = [[i * j % 97 for j in range(50)] for i in range(n // 50)]
flat = sorted(x for row in nested for x in row if x % 3)
print("nested", len(flat), flat[len(flat) // 2], sum(flat))
