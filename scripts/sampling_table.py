#!/usr/bin/env python3
"""Rewrites docs/SERVER.md's sampling-parameter table from edgellm.sampling_fields (the one table
of sampling fields); tests/test_sampling_fields.py fails while the doc is stale.

    PYTHONPATH=python python scripts/sampling_table.py [docs/SERVER.md]
"""
import os
import sys

from edgellm import sampling_fields

BEGIN, END = "<!-- sampling-fields:begin -->\n", "<!-- sampling-fields:end -->"


def main() -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "docs", "SERVER.md")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    a, b = text.index(BEGIN) + len(BEGIN), text.index(END)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text[:a] + sampling_fields.markdown_table() + text[b:])


if __name__ == "__main__":
    main()
