#!/usr/bin/env python3
"""Benchmarks of several `cairn serve` nodes on one PostgreSQL database
(docs/SCALING.md; results go in docs/BENCHMARKS.md, "Several nodes on PostgreSQL").

    scripts/cluster-bench.py [--bin target/release/cairn] [--admin-url URL]
                             [--duration 20] [--sessions 200] [--kills 10]

1. Throughput: `cairn loadgen` closed loop over 1 node, then over 3 nodes,
   each on a fresh database of the same server (same run, same machine).
2. Hand-over: 3 nodes under a light open-loop load; `--kills` times, SIGKILL a
   node that owns workspaces, time until a survivor sees all of its leases
   taken over, restart it under the same id, wait until it owns its share
   again. Reports p50 / max, then the load's loss accounting.

Without --admin-url it starts a throwaway cluster with scripts/pg-cluster.sh
(and stops it at the end). Standard library only.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEASE_MS = 1500


def psql(admin_url, sql):
    subprocess.run(["psql", "-q", admin_url, "-c", sql], check=True, stdout=subprocess.DEVNULL)


def database(admin_url, name):
    psql(admin_url, f"DROP DATABASE IF EXISTS {name}")
    psql(admin_url, f"CREATE DATABASE {name}")
    head, _, _ = admin_url.rpartition("/")
    return f"{head}/{name}"


class Node:
    def __init__(self, binary, url, name, workdir):
        self.binary, self.url, self.name = binary, url, name
        self.data = os.path.join(workdir, name)
        os.makedirs(self.data, exist_ok=True)
        self.proc, self.base = None, None

    def start(self):
        env = dict(os.environ)
        env.update({
            "CAIRN_STORAGE__BACKEND": "postgres",
            "CAIRN_STORAGE__POSTGRES__URL": self.url,
            "CAIRN_STORAGE__CLUSTER__NODE": self.name,
            "CAIRN_STORAGE__CLUSTER__LEASE_MS": str(LEASE_MS),
            "RUST_LOG": "warn",
        })
        listen = "127.0.0.1:0" if self.base is None else self.base.removeprefix("http://")
        self.proc = subprocess.Popen(
            [self.binary, "serve", "--listen", listen, "--data-dir", self.data],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("cairn listening on "):
            raise RuntimeError(f"{self.name}: unexpected first line {line!r}")
        self.base = line.strip().removeprefix("cairn listening on ")

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()

    def cluster(self):
        with urllib.request.urlopen(f"{self.base}/v1/cluster", timeout=5) as r:
            return json.load(r)


def wait_for(check, limit=30.0, step=0.02):
    started = time.monotonic()
    while time.monotonic() - started < limit:
        try:
            if check():
                return time.monotonic() - started
        except OSError:
            pass
        time.sleep(step)
    raise TimeoutError("waited too long")


def start_nodes(binary, url, workdir, n):
    nodes = [Node(binary, url, f"n{i + 1}", workdir) for i in range(n)]
    for node in nodes:
        node.start()
    wait_for(lambda: all(sum(x["live"] for x in node.cluster()["nodes"]) == n for node in nodes))
    return nodes


def loadgen(binary, nodes, args):
    cmd = [binary, "loadgen", "--json"]
    for node in nodes:
        cmd += ["--http", node.base.removeprefix("http://")]
    return subprocess.Popen(cmd + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def report_of(proc):
    out, err = proc.communicate()
    try:
        return json.loads(out)
    except json.JSONDecodeError:
        raise RuntimeError(f"loadgen: {err}")


def summary(r):
    keys = ["mode", "turns_acked", "throughput_tps", "ack_p50_ms", "ack_p99_ms",
            "assemble_p99_ms", "turns_lost", "turns_duplicated", "seq_gaps",
            "turns_failed", "retries", "failovers"]
    return {k: r.get(k) for k in keys}


def throughput(args, admin_url, workdir):
    rows = []
    for n in (1, 3):
        url = database(admin_url, f"cairn_bench_{n}n")
        nodes = start_nodes(args.bin, url, os.path.join(workdir, f"tp{n}"), n)
        try:
            proc = loadgen(args.bin, nodes, [
                "--sessions", str(args.sessions), "--workspaces", "12", "--work-contexts", "48",
                "--concurrency", "64", "--duration", str(args.duration)])
            rows.append((n, summary(report_of(proc))))
        finally:
            for node in nodes:
                node.stop()
    return rows


def handover(args, admin_url, workdir):
    url = database(admin_url, "cairn_bench_handover")
    nodes = start_nodes(args.bin, url, os.path.join(workdir, "ho"), 3)
    load = loadgen(args.bin, nodes, [
        "--sessions", "60", "--workspaces", "12", "--work-contexts", "24", "--rate", "100",
        "--duration", str(args.kills * 12 + 10), "--retry-secs", "30"])
    times = []
    try:
        time.sleep(5)
        for k in range(args.kills):
            observer = nodes[(k + 1) % 3]
            victim = nodes[k % 3]
            wait_for(lambda: any(l["owner"] == victim.name for l in observer.cluster()["leases"]))
            victim.kill()
            took = wait_for(
                lambda: not any(l["owner"] == victim.name for l in observer.cluster()["leases"]))
            times.append(took * 1000)
            print(f"kill {k + 1}: {victim.name}'s workspaces taken over in {took * 1000:.0f} ms",
                  file=sys.stderr)
            victim.start()
            wait_for(lambda: len(victim.cluster()["held"]) > 0)
        report = report_of(load)
    finally:
        for node in nodes:
            node.stop()
    return times, summary(report)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "cairn"))
    p.add_argument("--admin-url")
    p.add_argument("--duration", type=float, default=20)
    p.add_argument("--sessions", type=int, default=200)
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--part", choices=["all", "throughput", "handover"], default="all")
    args = p.parse_args()
    pgdir = None
    admin_url = args.admin_url
    if not admin_url:
        pgdir = tempfile.mkdtemp(prefix="cairn-pg-")
        admin_url = subprocess.run([os.path.join(ROOT, "scripts/pg-cluster.sh"), "start", pgdir],
                                   check=True, capture_output=True, text=True).stdout.strip()
    workdir = tempfile.mkdtemp(prefix="cairn-cluster-bench-")
    try:
        if args.part in ("all", "throughput"):
            for n, row in throughput(args, admin_url, workdir):
                print(json.dumps({"nodes": n, **row}), flush=True)
        if args.part == "throughput":
            return
        times, report = handover(args, admin_url, workdir)
        print(json.dumps({
            "handover_ms": [round(t) for t in times],
            "handover_p50_ms": round(statistics.median(times)),
            "handover_max_ms": round(max(times)),
            "lease_ms": LEASE_MS,
            "load": report,
        }))
    finally:
        if pgdir:
            subprocess.run([os.path.join(ROOT, "scripts/pg-cluster.sh"), "stop", pgdir])


if __name__ == "__main__":
    main()
