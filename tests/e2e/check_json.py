#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""check_json.py SCHEMA FILE [TYPES]: every line of FILE is a JSON object
valid against SCHEMA (docs/pcopy-summary.schema.json), with the Draft 2020-12
validator of python3-jsonschema, and the "type" members of the lines, in
order, match the regular expression TYPES (default: one "summary" line),
e.g. "(progress )+summary". Prints what is wrong and exits 1, else exits 0.
Run it with /usr/bin/python3: that is where python3-jsonschema is."""
import json
import re
import sys

import jsonschema


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    with open(sys.argv[1], encoding="utf-8") as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    want = sys.argv[3] if len(sys.argv) == 4 else "summary"
    with open(sys.argv[2], encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    else:
        print(f"{sys.argv[2]}: does not end with a newline", file=sys.stderr)
        return 1
    bad = 0
    types = []
    for n, line in enumerate(lines, 1):
        try:
            obj = json.loads(line)
        except ValueError as e:
            print(f"{sys.argv[2]}:{n}: not JSON ({e}): {line[:200]}", file=sys.stderr)
            bad += 1
            continue
        for err in validator.iter_errors(obj):
            path = "/".join(str(p) for p in err.absolute_path)
            print(f"{sys.argv[2]}:{n}: /{path}: {err.message}", file=sys.stderr)
            bad += 1
        types.append(obj.get("type") if isinstance(obj, dict) else None)
    seq = " ".join(str(t) for t in types)
    if not re.fullmatch(want, seq):
        print(f"{sys.argv[2]}: the lines' types are '{seq}', wanted /{want}/", file=sys.stderr)
        bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
