#!/usr/bin/env python3
"""Two chorus-sandbox launchers side by side, as a service starts them: the whole
process (`chorus-sandbox --policy <json> -- /bin/true`), 300 runs each after 20
warm-up runs, interleaved, beside /bin/true itself. Run as root, with a workspace
/tmp/lws owned by uid 65534 and cgroup v1 pids, memory and cpu controllers:

    mkdir -p /tmp/lws && chown 65534:65534 /tmp/lws
    python3 services/sandbox/benches/launcher_versions.py TODAY_LAUNCHER BASELINE_LAUNCHER

The policy names a run (its cgroup) and a fence, which a launcher that predates
them ignores (and a written-bytes limit, which one before 2026-11-26 ignores). See
docs/benchmarks.md, "Run sandbox".
"""
import json, subprocess, time, statistics, os, sys, tempfile
fence_dir=tempfile.mkdtemp(prefix='chorus-lbench-fence-'); os.makedirs(fence_dir, exist_ok=True)
fence=os.path.join(fence_dir,'f')
def policy(run):
    return json.dumps({"parent":None,"cwd":"/tmp/lws","read_write":["/tmp/lws"],"read_only":[],
      "network":"none","identity":{"user":{"uid":65534,"gid":65534}},
      "limits":{"processes":512,"memory_bytes":8<<30,"address_space":True,"cpu_secs":3600,"file_bytes":8<<30,"open_files":4096,"tmp_bytes":1<<30,"cpu_weight":100,"written_bytes":8<<30},
      "cgroups":{"v1":{"pids":"/sys/fs/cgroup/pids","memory":"/sys/fs/cgroup/memory","cpu":"/sys/fs/cgroup/cpu"}},
      "run":run,"fence":fence if run else None})
new, old = sys.argv[1], sys.argv[2]
cmds={'today (seccomp, run cgroup, fence)':[new,'--policy',policy('bench-run'),'--','/bin/true'],
      'baseline':[old,'--policy',policy(None),'--','/bin/true'],
      '/bin/true unconfined':['/bin/true']}
times={k:[] for k in cmds}
env={'PATH':'/usr/bin:/bin'}
for i in range(20+300):
    with open(fence,'w') as f: f.write(str(int(time.time()*1000)+60000))
    for k,c in cmds.items():
        t=time.perf_counter(); r=subprocess.run(c,env=env,capture_output=True); d=time.perf_counter()-t
        if r.returncode!=0: raise SystemExit(f"{k}: {r.returncode} {r.stderr}")
        if i>=20: times[k].append(d*1000)
print("| launcher | p50 ms | p90 ms | p99 ms | mean ms |\n|---|---|---|---|---|")
for k,v in times.items():
    v=sorted(v); q=lambda p: v[min(len(v)-1,int(len(v)*p/100))]
    print(f"| {k} | {q(50):.2f} | {q(90):.2f} | {q(99):.2f} | {statistics.mean(v):.2f} |")
