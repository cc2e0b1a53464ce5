"""Threads: four workers take jobs from a queue, build dicts and lists for each (allocation
from several threads, interleaved by the interpreter's switching), and hand back results
through another queue; the main thread combines them in job order. Deterministic output.
Usage: python3 threads.py [JOBS]"""
import queue
import sys
import threading

jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 400
todo = queue.Queue()
done = queue.Queue()


def work():
    while True:
        job = todo.get()
        if job is None:
            return
        table = {}
        for i in range(2000):
            key = "k%d" % ((i * 7919 + job) % 1500)
            table.setdefault(key, []).append(i * job)
        sizes = sorted(len(v) for v in table.values())
        text = ",".join("%s=%d" % (k, sum(v)) for k, v in sorted(table.items()))
        done.put((job, len(table), sizes[-1], len(text), sum(map(ord, text[:500]))))


workers = [threading.Thread(target=work) for _ in range(4)]
for w in workers:
    w.start()
for j in range(jobs):
    todo.put(j)
for _ in workers:
    todo.put(None)
for w in workers:
    w.join()
results = sorted(done.get() for _ in range(jobs))
print(len(results), results[0], results[-1])
print(sum(r[3] for r in results), sum(r[4] for r in results) % 1000003)
