"""`edgellm ARGS...` with one more known model, registered from $EDGELLM_TEST_SPEC (JSON: name,
filename, size, sha256, parts as [package, member] pairs, optional convert), for tests/test_fetch_output.py: the
command runs in its own process, as a user's would, so pip's output reaching the real file
descriptors shows."""
import json
import os
import sys

from edgellm import models
from edgellm.cli import main

spec = json.loads(os.environ["EDGELLM_TEST_SPEC"])
models.KNOWN_MODELS[spec["name"]] = models.ModelSpec(
    name=spec["name"], filename=spec["filename"], size=spec["size"], sha256=spec["sha256"],
    parts=tuple(models.WheelMember(p, m) for p, m in spec["parts"]),
    arch=spec.get("arch", "llama"), tokenizer="-", description="a test model", license="-", in_all=False,
    convert=spec.get("convert"))
sys.argv[0] = "edgellm"
main()
