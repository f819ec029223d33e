"""Per round, the geometric mean over networks of the ratio fork/cell of mean
iteration times, from benchmarks/isolation.py's --out folder:
    python3 per_round.py OUT FRAMEWORK"""
import json,glob,sys,statistics,math
base=sys.argv[1]; fw=sys.argv[2]
def means(mode, rnd):
    out={}
    for f in glob.glob(f'{base}/{fw}/{mode}/round{rnd}/*/*.json'):
        if f.endswith('.spec.json') or f.endswith('run.json'): continue
        d=json.load(open(f))
        if d.get('status')!='ok': continue
        out.setdefault(d['cell']['network'],[]).append(statistics.mean(d['timing']['per_iteration_s']))
    return {k:statistics.mean(v) for k,v in out.items()}
for r in (1,2,3,4):
    c=means('cell',r); k=means('fork',r)
    if not c: continue
    rs=[k[n]/c[n] for n in c if n in k]
    g=math.exp(sum(map(math.log,rs))/len(rs))
    print(f"round {r}: geometric mean fork/cell over {len(rs)} networks {g:.3f}; below 1: {sum(x<1 for x in rs)}")
