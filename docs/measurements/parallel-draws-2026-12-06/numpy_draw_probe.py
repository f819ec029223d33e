"""numpy draws of fcn5's values in fresh forked children: serial (draws.py
today) vs spans drawn by 2 threads."""
import ctypes, os, sys, time, threading
ctypes.CDLL(None).mallopt(-4, 0); ctypes.CDLL(None).mallopt(-1, -1)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
import numpy as np
from harness.frameworks import draws
SHAPES = [(26752, 2048), (2048, 2048), (2048, 2048), (2048, 26752)]
SPAN = 1 << 20

def fill(gen, flat, bound):
    for s in range(0, flat.size, draws.CHUNK):
        c = flat[s:s + draws.CHUNK]
        gen.random(c.shape, dtype=np.float32, out=c)
        c *= np.float32(2); c -= np.float32(1); c *= bound

def par(key, shape, limit, k=2):
    v = draws.aligned_empty(shape); flat = v.reshape(-1)
    bound = np.float32(limit)
    jobs = [(flat[s:s + SPAN], np.random.SeedSequence(key.entropy, spawn_key=key.spawn_key + (i,)))
            for i, s in enumerate(range(0, flat.size, SPAN))]
    def work(i):
        for c, kk in jobs[i::k]:
            fill(np.random.default_rng(kk), c, bound)
    th = [threading.Thread(target=work, args=(i,)) for i in range(1, k)]
    [t.start() for t in th]; work(0); [t.join() for t in th]
    return v

def trial(mode):
    pid = os.fork()
    if pid == 0:
        root = draws.keys(0)
        t0 = time.perf_counter()
        for shape in SHAPES:
            key = root.spawn(1)[0]
            if mode == "serial": draws.uniform(key, shape, 0.01)
            else: par(key, shape, 0.01)
        t1 = time.perf_counter()
        ru = __import__("resource").getrusage(0)
        print(f"{mode:8s} {t1-t0:.3f} s minflt {ru.ru_minflt}", flush=True)
        os._exit(0)
    os.waitpid(pid, 0)

for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
    for mode in ("serial", "threads"):
        trial(mode)
