"""The failures a Schemathesis run dropped as false positives, by reason.

Usage: python dropped.py DROPPED.ndjson

hooks.py's filter_failure writes one line for each failure it drops (the
check, the operation and the reason, as NOT_IN_SPEC and the upsert rules
state it) to the file run.sh names in APIFUZZ_DROPPED. This prints their
count by check and reason, most frequent first, with the operations each
was seen on, so that what a run did not report stays visible beside
Schemathesis's own total ("Filtered: N"). Prints nothing when nothing was
dropped. Used by run.sh, which keeps the output in dropped.md.
"""

import collections
import json
import sys


def main(path):
    counts = collections.Counter()
    ops = collections.defaultdict(set)
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    d = json.loads(line)
                except ValueError:
                    continue
                key = (d.get("check", "?"), d.get("reason", "?"))
                counts[key] += 1
                ops[key].add(d.get("operation", "?"))
    except FileNotFoundError:
        return
    if not counts:
        return
    print(f"False positives dropped: {sum(counts.values())} (by filter_failure; docs/apifuzz.md, Checks, gives each reason)")
    print()
    for (check, reason), n in counts.most_common():
        print(f"{n:7d}  {check}: {reason}")
        print(f"         on {', '.join(sorted(ops[(check, reason)]))}")


if __name__ == "__main__":
    main(sys.argv[1])
