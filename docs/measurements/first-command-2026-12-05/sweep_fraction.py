import json,glob,sys,datetime
run=sys.argv[1]
rec=json.load(open(f'{run}/run.json'))
def t(s): return datetime.datetime.strptime(s,'%Y-%m-%dT%H:%M:%SZ').timestamp()
starts=[];ends=[];meas=0.0;n=0
for e in rec['jobs']:
    if e.get('started_at') and e.get('finished_at') and e['status']!='unsupported':
        starts.append(t(e['started_at'])); ends.append(t(e['finished_at']))
    try: r=json.load(open(f"{run}/{e['file']}"))
    except Exception: continue
    if r.get('status')!='ok': continue
    tm=r['timing']; n+=1
    meas+=sum(tm['per_iteration_s'])+sum((r.get('compilation') or {}).get('warmup_s') or [])
span=max(ends)-min(starts)
print(f"{run}: {n} ok cells; sweep {span:.0f} s (first job start to last job end, 1 s stamps); warm-up and timed {meas:.1f} s; measured fraction {meas/span:.2f}")
