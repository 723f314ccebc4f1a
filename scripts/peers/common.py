"""Helpers shared by the peer benchmarks (scripts/peers/bench_*.py)."""
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytrec_eval

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def progress(msg):
    print(msg, file=sys.stderr, flush=True)


def load(data, name):
    """Returns docs [(id, text)], queries {qid: text} of the test qrels, qrels.

    A collection without qrels/test.tsv (one `tandem bench text` wrote, to
    time engines on realistic text at scale) has every query and qrels None."""
    d = os.path.join(data, name)
    docs = []
    with open(os.path.join(d, "corpus.jsonl")) as f:
        for line in f:
            o = json.loads(line)
            text = " ".join(s for s in (o.get("title", ""), o.get("text", "")) if s)
            docs.append((str(o["_id"]), text))
    qpath = os.path.join(d, "qrels", "test.tsv")
    if not os.path.exists(qpath):
        queries = {}
        with open(os.path.join(d, "queries.jsonl")) as f:
            for line in f:
                o = json.loads(line)
                queries[str(o["_id"])] = o["text"]
        return docs, queries, None
    qrels = {}
    with open(qpath) as f:
        for i, line in enumerate(f):
            parts = line.rstrip("\n").split("\t")
            if i == 0 and not parts[-1].lstrip("-").isdigit():
                continue
            qrels.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    queries = {}
    with open(os.path.join(d, "queries.jsonl")) as f:
        for line in f:
            o = json.loads(line)
            if str(o["_id"]) in qrels:
                queries[str(o["_id"])] = o["text"]
    return docs, queries, qrels


def score(run, qrels):
    """Mean nDCG@10 and R@100 over every judged query (None without qrels)."""
    if qrels is None:
        return None, None
    ev = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10", "recall_100"})
    res = ev.evaluate({q: {d: float(s) for d, s in r.items()} for q, r in run.items()})
    n = len(qrels)
    ndcg = sum(res.get(q, {}).get("ndcg_cut_10", 0.0) for q in qrels) / n
    rec = sum(res.get(q, {}).get("recall_100", 0.0) for q in qrels) / n
    return ndcg, rec


def workdir(prefix):
    """A temporary directory, removed when the benchmark exits (the
    exported token matrices alone take gigabytes)."""
    d = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, d, True)
    return d


def read_run(path):
    """Reads a TREC run file into {query: {doc: score}}."""
    run = {}
    with open(path) as f:
        for line in f:
            q, _, doc, _, s, _ = line.split()
            run.setdefault(q, {})[doc] = float(s)
    return run


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def write_table(lines, out):
    """Prints a Markdown table and writes it to out."""
    table = "\n".join(lines) + "\n"
    print(table)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        f.write(table)
    progress(f"wrote {out}")


def vmhwm_kib(pid="self"):
    """A process's peak resident set (VmHWM) in KiB, 0 if unknown."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_peak(cmd):
    """Runs cmd (check=True) and returns its standard output and its peak
    resident set in KiB, read from /proc while it runs: getrusage's
    ru_maxrss of a child also counts this process's own size at the fork."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0
    while p.poll() is None:
        peak = max(peak, vmhwm_kib(p.pid))
        time.sleep(0.05)
    out, err = p.communicate()
    if p.returncode != 0:
        raise subprocess.CalledProcessError(p.returncode, cmd, out, err)
    return out, peak
