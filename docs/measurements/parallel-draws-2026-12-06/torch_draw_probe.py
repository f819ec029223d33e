"""Fresh child per trial (fork from a parent that imported torch): time
uniform_ over fcn5-sized fresh tensors, serial vs 2 threads vs populate."""
import ctypes, mmap, os, sys, time, threading
ctypes.CDLL(None).mallopt(-4, 0); ctypes.CDLL(None).mallopt(-1, -1)
import torch
torch.set_num_threads(2)
SHAPES = [(26752, 2048), (2048, 2048), (2048, 2048), (2048, 26752)]  # fcn5
libc = ctypes.CDLL(None, use_errno=True)
MADV_POPULATE_WRITE = 23

def draw_serial(ws):
    for w in ws:
        w.uniform_(-0.01, 0.01)

def draw_threads(ws, k=2):
    CH = 1 << 22
    jobs = []
    for w in ws:
        flat = w.view(-1)
        for s in range(0, flat.numel(), CH):
            g = torch.Generator().manual_seed(s + 1)
            jobs.append((flat[s:s + CH], g))
    def work(i):
        for t, g in jobs[i::k]:
            t.uniform_(-0.01, 0.01, generator=g)
    th = [threading.Thread(target=work, args=(i,)) for i in range(k)]
    [t.start() for t in th]; [t.join() for t in th]

def populate(ws):
    for w in ws:
        p = w.data_ptr(); n = w.numel() * 4
        start = (p + 4095) & ~4095; end = (p + n) & ~4095
        r = libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), MADV_POPULATE_WRITE)
        if r: print("madvise errno", ctypes.get_errno())

def trial(mode):
    pid = os.fork()
    if pid == 0:
        t0 = time.perf_counter()
        ws = [torch.empty(s) for s in SHAPES]
        t1 = time.perf_counter()
        if mode == "populate": populate(ws)
        t2 = time.perf_counter()
        if mode == "threads": draw_threads(ws)
        else: draw_serial(ws)
        t3 = time.perf_counter()
        ru = __import__("resource").getrusage(0)
        print(f"{mode:9s} empty {t1-t0:.3f} populate {t2-t1:.3f} draw {t3-t2:.3f} total {t3-t0:.3f} minflt {ru.ru_minflt}", flush=True)
        os._exit(0)
    os.waitpid(pid, 0)

for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
    for mode in ("serial", "threads", "populate"):
        trial(mode)
