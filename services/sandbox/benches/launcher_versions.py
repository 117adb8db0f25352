#!/usr/bin/env python3
"""Two chorus-sandbox launchers side by side, as a service starts them: the whole
process (`chorus-sandbox --policy <json> -- PROGRAM`), 300 runs each after 20
warm-up runs, interleaved, beside PROGRAM unconfined. Run as root, with a workspace
/tmp/lws owned by uid 65534 and cgroup v1 pids, memory and cpu controllers:

    mkdir -p /tmp/lws && chown 65534:65534 /tmp/lws
    python3 services/sandbox/benches/launcher_versions.py TODAY BASELINE [TIER [PROGRAM]]

TIER is namespaces (the default) or landlock. PROGRAM is `true` (the default:
/bin/true, what every process pays) or `connects` (python3 making 500 loopback
connections to a listener of its own: what each checked connect costs, the
landlock tier's launcher answering every one). RUNS changes the count.

The policy names a run (its cgroup), a fence and a ledger, which a launcher that
predates them ignores. See docs/benchmarks.md, "Run sandbox".
"""
import json, subprocess, time, statistics, os, sys, tempfile
fence_dir = tempfile.mkdtemp(prefix='chorus-lbench-fence-')
fence = os.path.join(fence_dir, 'f')
ledger = tempfile.mkdtemp(prefix='chorus-lbench-ledger-')
os.chown(ledger, 65534, 65534)
new, old = sys.argv[1], sys.argv[2]
tier = sys.argv[3] if len(sys.argv) > 3 else 'namespaces'
program = sys.argv[4] if len(sys.argv) > 4 else 'true'
runs = int(os.environ.get('RUNS', '300'))
CONNECTS = ("import socket\n"
            "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(512)\n"
            "for _ in range(500):\n"
            "    c = socket.create_connection(s.getsockname()); a, _ = s.accept(); a.close(); c.close()\n")
argv = {'true': ['/bin/true'], 'connects': ['/usr/bin/python3', '-c', CONNECTS]}[program]

def policy(run):
    return json.dumps({
        "parent": None, "cwd": "/tmp/lws", "read_write": ["/tmp/lws"], "read_only": [],
        "network": "none", "identity": {"user": {"uid": 65534, "gid": 65534}},
        "limits": {"processes": 512, "memory_bytes": 8 << 30, "address_space": True,
                   "cpu_secs": 3600, "file_bytes": 8 << 30, "open_files": 4096,
                   "tmp_bytes": 1 << 30, "cpu_weight": 100, "written_bytes": 8 << 30},
        "cgroups": {"v1": {"pids": "/sys/fs/cgroup/pids", "memory": "/sys/fs/cgroup/memory",
                           "cpu": "/sys/fs/cgroup/cpu"}},
        "run": run, "fence": fence, "ledger": ledger, "tier": tier})

cmds = {'today': [new, '--policy', policy('bench-run'), '--'] + argv,
        'baseline': [old, '--policy', policy('bench-run'), '--'] + argv,
        f'{program} unconfined': argv}
times = {k: [] for k in cmds}
env = {'PATH': '/usr/bin:/bin'}
for i in range(20 + runs):
    with open(fence, 'w') as f:
        f.write(str(int(time.time() * 1000) + 60000))
    for k, c in cmds.items():
        t = time.perf_counter()
        r = subprocess.run(c, env=env, capture_output=True)
        d = time.perf_counter() - t
        if r.returncode != 0:
            raise SystemExit(f"{k}: {r.returncode} {r.stderr}")
        if i >= 20:
            times[k].append(d * 1000)
print(f"{tier} tier, {program}, {runs} runs each\n")
print("| launcher | p50 ms | p90 ms | p99 ms | mean ms |\n|---|---|---|---|---|")
for k, v in times.items():
    v = sorted(v)
    q = lambda p: v[min(len(v) - 1, int(len(v) * p / 100))]
    print(f"| {k} | {q(50):.2f} | {q(90):.2f} | {q(99):.2f} | {statistics.mean(v):.2f} |")
