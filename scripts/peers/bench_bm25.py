#!/usr/bin/env python3
"""Tandem's BM25 beside its peers, on the same inputs, in one run.

    make bench-peers            # sets up .native/peers, then runs this
    .native/peers/bin/python scripts/peers/bench_bm25.py [--rounds 3] [--collections scifact,cranfield]

    # realistic text at scale, the very same documents and queries for both
    # (Tandem searches the collection bench ingest kept):
    bin/tandem bench ingest --dir COLL --docs 5000000 --text-from ../shared/data/scifact --keep
    bin/tandem bench text --text-from ../shared/data/scifact --docs 5000000 --out DIR/realtext
    .native/peers/bin/python scripts/peers/bench_bm25.py --data DIR --collections realtext --engines tantivy --k 10 --tandem-dir COLL

For each BEIR collection in ../shared/data (read in place): title and text as
one field, English stemming and stop words, top 100 hits, ids only, one
thread. Engines:

- Tandem: `tandem index --models none`, then `tandem eval --mode bm25`
  (its latencies are measured inside the process, around each search);
- Tantivy (PyPI `tantivy`): the `en_stem` tokenizer; the query's
  punctuation is replaced by spaces so that the query parser takes it as
  words, as a new user would do; `--engines tantivystop` adds Tantivy's
  English stop words before the stemmer, as Tandem's analyser removes
  stop words (so that both score the same terms);
- bm25s (PyPI `bm25s`, with PyStemmer): English stop words and stemmer;
- Lucene through Pyserini (PyPI `pyserini`, needs a JDK): BM25 with
  Anserini's k1 0.9 and b 0.4.

Every engine's ranking is scored by the same code (pytrec_eval: nDCG@10,
R@100; a query without results counts 0). Latency rounds alternate between
the engines (Tandem, then each peer, then Tandem again...), and each figure
is the median over rounds of a round's p50 or p95, so that the machine's
load falls on all of them alike. A peer that cannot be imported is listed
as missing, with the reason.

The Markdown table goes to standard output and to .native/peers/bm25.md.
"""
import argparse
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

from common import ROOT, load, pct, progress, read_run, score, workdir, write_table

K = 100


class Peer:
    """An in-process engine: build(docs) once, then search(text) -> [(id, score)]."""

    def round(self, queries):
        lat, run = [], {}
        for qid, text in queries.items():
            t = time.perf_counter()
            hits = self.search(text)
            lat.append((time.perf_counter() - t) * 1000)
            run[qid] = {d: s for d, s in hits}
        return run, pct(lat, 0.5), pct(lat, 0.95)


class Tantivy(Peer):
    name = "Tantivy"
    tokenizer = "en_stem"  # Tantivy's own: lower case, English stemmer

    def __init__(self):
        import tantivy

        self.t = tantivy
        self.version = getattr(tantivy, "__version__", "tantivy ?").split(",")[0]

    def analyzer(self):
        """The analyser to register under self.tokenizer, or None for one of Tantivy's own."""
        return None

    def build(self, docs):
        sb = self.t.SchemaBuilder()
        sb.add_text_field("id", stored=True, tokenizer_name="raw")
        sb.add_text_field("body", stored=False, tokenizer_name=self.tokenizer)
        self.index = self.t.Index(sb.build())
        if (a := self.analyzer()) is not None:
            self.index.register_tokenizer(self.tokenizer, a)
        w = self.index.writer(heap_size=200_000_000, num_threads=1)
        for i, text in docs:
            w.add_document(self.t.Document(id=i, body=text))
        w.commit()
        w.wait_merging_threads()
        self.index.reload()
        self.searcher = self.index.searcher()

    def search(self, text):
        q = self.index.parse_query(re.sub(r"[^\w\s]", " ", text), ["body"])
        out = []
        for s, addr in self.searcher.search(q, K).hits:
            out.append((self.searcher.doc(addr)["id"][0], s))
        return out


class TantivyStop(Tantivy):
    """Tantivy with English stop words removed before stemming, as
    Tandem's analyser does: the same terms reach both scorers."""
    name = "Tantivy, stop words removed"
    tokenizer = "en_stop_stem"

    def analyzer(self):
        t = self.t
        return (t.TextAnalyzerBuilder(t.Tokenizer.simple()).filter(t.Filter.remove_long(40))
                .filter(t.Filter.lowercase()).filter(t.Filter.stopword("english"))
                .filter(t.Filter.stemmer("english")).build())


class BM25S(Peer):
    name = "bm25s"

    def __init__(self):
        import bm25s
        import Stemmer

        self.b, self.stemmer = bm25s, Stemmer.Stemmer("english")
        self.version = "bm25s " + bm25s.__version__

    def build(self, docs):
        self.ids = [i for i, _ in docs]
        tok = self.b.tokenize([t for _, t in docs], stopwords="en", stemmer=self.stemmer, show_progress=False)
        self.r = self.b.BM25()
        self.r.index(tok, show_progress=False)

    def search(self, text):
        qt = self.b.tokenize([text], stopwords="en", stemmer=self.stemmer, show_progress=False)
        if not qt.vocab:
            return []
        k = min(K, len(self.ids))
        res, sc = self.r.retrieve(qt, k=k, show_progress=False, n_threads=1)
        return [(self.ids[j], float(s)) for j, s in zip(res[0], sc[0]) if s > 0]


class Lucene(Peer):
    name = "Lucene (Pyserini)"

    def __init__(self):
        if "JAVA_HOME" not in os.environ:
            # Pyserini's Anserini needs Java 21 or newer; take one if any
            # is installed.
            jvms = sorted(glob.glob("/usr/lib/jvm/*"))
            for j in jvms:
                m = re.search(r"(\d+)", os.path.basename(j).replace("1.", "", 1))
                if m and int(m.group(1)) >= 21 and os.path.exists(os.path.join(j, "bin", "java")):
                    os.environ["JAVA_HOME"] = j
                    break
        # Pyserini 1.x builds an OpenAI client when imported, which fails
        # without a key; BM25 never calls it.
        os.environ.setdefault("OPENAI_API_KEY", "unused")
        from pyserini.search.lucene import LuceneSearcher  # noqa: F401 (also starts the JVM)
        from importlib.metadata import version

        self.version = "pyserini " + version("pyserini")

    def build(self, docs):
        from pyserini.search.lucene import LuceneSearcher

        self.dir = workdir("peers-lucene-")
        src = os.path.join(self.dir, "docs")
        os.makedirs(src)
        with open(os.path.join(src, "docs.jsonl"), "w") as f:
            for i, t in docs:
                f.write(json.dumps({"id": i, "contents": t}) + "\n")
        subprocess.run([sys.executable, "-m", "pyserini.index.lucene", "--collection", "JsonCollection",
                        "--input", src, "--index", os.path.join(self.dir, "index"),
                        "--generator", "DefaultLuceneDocumentGenerator", "--threads", "1"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.s = LuceneSearcher(os.path.join(self.dir, "index"))
        self.s.set_bm25(0.9, 0.4)

    def search(self, text):
        return [(h.docid, h.score) for h in self.s.search(text, k=K)]


class Tandem:
    name = "Tandem"

    def __init__(self, binary, coll=None):
        self.bin, self.given = binary, coll
        self.version = subprocess.run([binary, "version"], capture_output=True, text=True).stdout.strip().splitlines()[0]

    def build(self, name, data):
        self.dir = workdir("peers-tandem-")
        coll = self.given
        if coll is None:
            coll = os.path.join(self.dir, "c")
            subprocess.run([self.bin, "index", "--dir", coll, "--corpus", os.path.join(data, name, "corpus.jsonl"),
                            "--models", "none", "--quiet", "--skip-bad"], check=True, stdout=subprocess.DEVNULL)
        self.coll, self.data, self.cname = coll, data, name

    def round(self, queries):
        runs = os.path.join(self.dir, "runs")
        d = os.path.join(self.data, self.cname)
        qrels = os.path.join(d, "qrels", "test.tsv")
        if not os.path.exists(qrels):
            # A collection without judgments: every query, judged against
            # no document, so that tandem eval runs them all.
            qrels = os.path.join(self.dir, "qrels.tsv")
            with open(qrels, "w") as f:
                for q in queries:
                    f.write(f"{q}\t-\t1\n")
        out = subprocess.run([self.bin, "eval", "--dir", self.coll, "--queries", os.path.join(d, "queries.jsonl"),
                              "--qrels", qrels, "--mode", "bm25,bm25", "--json", "--k", str(K),
                              "--runs", runs], check=True, capture_output=True, text=True).stdout
        # Two rows of the same mode: the first warms the process up, the
        # second is timed.
        row = [json.loads(l) for l in out.splitlines() if l.strip()][-1]
        return read_run(os.path.join(runs, "bm25.trec")), row["p50_ms"], row["p95_ms"]


def overlap(a, b):
    """The mean share of a's top K per query that b also returns."""
    shares = []
    for q, hits in a.items():
        top = sorted(hits, key=hits.get, reverse=True)[:K]
        if top:
            shares.append(len(set(top) & set(b.get(q, {}))) / len(top))
    return statistics.mean(shares) if shares else 0.0


def main():
    global K
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tandem", default=os.path.join(ROOT, "bin", "tandem"))
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data"))
    ap.add_argument("--collections", default="scifact,cranfield")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, ".native", "peers", "bm25.md"))
    ap.add_argument("--engines", default="tantivy,bm25s,lucene",
                    help="the peers to run beside Tandem: tantivy, tantivystop (stop words removed, as Tandem does), bm25s, lucene")
    ap.add_argument("--k", type=int, default=K, help="hits per query")
    ap.add_argument("--tandem-dir", help="a Tandem collection of the (one) collection's documents to search, "
                    "instead of indexing its corpus: e.g. the one `tandem bench ingest --text-from --keep` built, "
                    "whose documents `tandem bench text` wrote")
    args = ap.parse_args()
    K = args.k

    if args.tandem_dir and "," in args.collections:
        sys.exit("--tandem-dir holds one collection: give one in --collections")
    tandem = Tandem(args.tandem, args.tandem_dir)
    peers, missing = [], []
    wanted = set(args.engines.split(","))
    for cls in (Tantivy, TantivyStop, BM25S, Lucene):
        if cls.__name__.lower() not in wanted:
            continue
        try:
            peers.append(cls())
        except Exception as e:  # ImportError, or a JVM that will not start
            missing.append((cls.name, f"{type(e).__name__}: {e}".splitlines()[0][:160]))
            progress(f"{cls.name}: missing ({missing[-1][1]})")

    lines = ["| collection | engine | nDCG@10 | R@100 | p50 ms | p95 ms | index s | Tandem p50 / peer p50 |",
             "|---|---|---|---|---|---|---|---|"]
    for name in args.collections.split(","):
        docs, queries, qrels = load(args.data, name)
        progress(f"{name}: {len(docs)} documents, {len(queries)} queries")
        engines = [tandem] + peers
        built = {}
        for e in engines:
            t = time.perf_counter()
            if e is tandem:
                e.build(name, args.data)
            else:
                e.build(docs)
            built[e.name] = time.perf_counter() - t
            progress(f"{name}: {e.name} indexed in {built[e.name]:.1f} s")
        p50s = {e.name: [] for e in engines}
        p95s = {e.name: [] for e in engines}
        runs = {}
        for r in range(args.rounds):
            for e in engines:
                run, p50, p95 = e.round(queries)
                runs[e.name] = run
                p50s[e.name].append(p50)
                p95s[e.name].append(p95)
            progress(f"{name}: round {r + 1} of {args.rounds}: " +
                     ", ".join(f"{e.name} p50 {p50s[e.name][-1]:.2f} ms" for e in engines))
        tp50 = statistics.median(p50s[tandem.name])
        for e in engines:
            ndcg, rec = score(runs[e.name], qrels)
            quality = "– | –" if ndcg is None else f"{ndcg:.4f} | {rec:.4f}"
            if ndcg is None and e is not tandem:
                # No judgments: how far the peer's top K agrees with
                # Tandem's shows that both searched the same documents.
                quality = f"– (top {K} shared with Tandem: {overlap(runs[tandem.name], runs[e.name]):.2f}) | –"
            p50, p95 = statistics.median(p50s[e.name]), statistics.median(p95s[e.name])
            ratio = "" if e is tandem else f"{tp50 / p50:.2f}"
            build = "given" if e is tandem and tandem.given else f"{built[e.name]:.1f}"
            lines.append(f"| {name} | {e.name} ({e.version}) | {quality} | {p50:.2f} | {p95:.2f} | {build} | {ratio} |")
        for m, why in missing:
            lines.append(f"| {name} | {m} | missing: {why} | | | | | |")
        if os.path.isdir(tandem.dir):
            shutil.rmtree(tandem.dir)
    write_table(lines, args.out)


if __name__ == "__main__":
    main()
