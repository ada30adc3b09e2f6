#!/usr/bin/env python3
"""Names the machine paths in committed records' logs/ (a one-time migration).

A record is read on other machines, so it names no absolute path of the
machine that made it (docs/records.md, "Paths in a record"). raw.jsonl has
followed that rule since 2026-12-03; the logs/ folder (each process's stdout
and stderr, as the runtime wrote them) did not until `tuner sweep` named
their lines as it writes them (tuner/src/sweep/arm/mod.rs, `NamedLog`). This
script brings the logs written before that under the rule:

- every absolute path under a machine folder (/root, /home, /tmp, /work,
  /Users, /mnt, /srv, /var, /opt), standing whole (not inside a longer name
  or path), becomes its file name: the models (their sha256 is in the
  record's identity), the CUDA kernel cache's image;
- in stderr logs every line, in stdout logs every line but a `completion`
  event's (its text is the model's output, evidence kept as written).

Nothing else changes. raw.jsonl is not touched (its sha256 is in the
ledger). The tuner test `committed_logs_name_no_path_of_the_machine_that_made_them`
checks the result.

    python3 scripts/name-log-paths.py records        # rewrite in place
    python3 scripts/name-log-paths.py --check records
"""
import os
import re
import sys

ROOTS = ("root", "home", "tmp", "work", "Users", "mnt", "srv", "var", "opt")
# A path starts after a byte that cannot continue a name or a path.
PATH = re.compile(r"(?<![A-Za-z0-9._+~/-])/(?:%s)/[A-Za-z0-9._+~/-]*" % "|".join(ROOTS))


def name(m):
    p = m.group(0).rstrip("/")
    return os.path.basename(p) or p


def name_line(line):
    if line.startswith('{"event":"completion"'):
        return line
    return PATH.sub(name, line)


def main(argv):
    check = "--check" in argv
    roots = [a for a in argv if a != "--check"] or ["records"]
    changed = files = 0
    for root in roots:
        for rec in sorted(os.listdir(root)):
            logs = os.path.join(root, rec, "logs")
            if not os.path.isdir(logs):
                continue
            for f in sorted(os.listdir(logs)):
                path = os.path.join(logs, f)
                with open(path, "rb") as fh:
                    data = fh.read()
                text = data.decode("utf-8", errors="surrogateescape")
                new = "".join(name_line(l) for l in text.splitlines(keepends=True))
                files += 1
                if new != text:
                    changed += 1
                    if not check:
                        tmp = path + ".tmp"
                        with open(tmp, "wb") as fh:
                            fh.write(new.encode("utf-8", errors="surrogateescape"))
                        os.replace(tmp, path)
    verb = "would name" if check else "named"
    print(f"{verb} machine paths in {changed} of {files} log files")
    return 1 if check and changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
