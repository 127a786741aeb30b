"""torch_suite.py - PyTorch's own distributed test body on one backend.

    python scripts/torch_suite.py --backend gloo|ringcc --world-size N
                                  [--own-name] [--tests NAME,...] [--json FILE]

Runs DistributedTest._DistTestBase from the installed wheel
(torch/testing/_internal/distributed/distributed_test.py, never copied) the
way PyTorch's test/distributed/test_distributed_spawn.py does: BACKEND=gloo,
WORLD_SIZE, TEMP_DIR, INIT_METHOD=env://, one spawned process per rank and
test. With --backend ringcc, ringcc stands in for gloo: the creator
registered for "gloo" is ringcc's (Backend._plugins["GLOO"]), with profiler
events named "gloo:..." as the suite expects; this is set at import, so the
spawned ranks (which import this file again) get it too. With --own-name
(ringcc only) the suite runs with BACKEND=ringcc, the name ringcc registers
itself under: most tests gate on backend names and skip, but those that
check the backend's own name run as a user of that name would see them. Prints one line per
test (PASS, FAIL, SKIP) and a summary; --json writes {test: outcome}.
"""

import argparse
import functools
import json
import os
import sys
import tempfile
import unittest

ARGS = None
if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=["gloo", "ringcc"], required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--tests", default="",
                   help="comma-separated test names (test_...); default all")
    p.add_argument("--json", default=None)
    p.add_argument("--own-name", action="store_true",
                   help="ringcc under its own name (BACKEND=ringcc), not "
                        "standing in for gloo")
    ARGS = p.parse_args()
    if ARGS.own_name and ARGS.backend != "ringcc":
        p.error("--own-name is for --backend ringcc")
    os.environ["RINGCC_SUITE_BACKEND"] = ARGS.backend + (
        "-own" if ARGS.own_name else "")
    os.environ["BACKEND"] = "ringcc" if ARGS.own_name else "gloo"
    os.environ["WORLD_SIZE"] = str(ARGS.world_size)
    os.environ.setdefault("INIT_METHOD", "env://")
    os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="rcc-torch-suite-")

import torch.distributed as dist  # noqa: E402

if os.environ.get("RINGCC_SUITE_BACKEND", "").startswith("ringcc"):
    import ringcc.torch  # noqa: E402,F401  (registers "ringcc")
if os.environ.get("RINGCC_SUITE_BACKEND") == "ringcc":
    dist.Backend._plugins["GLOO"] = dist.Backend._BackendPlugin(
        functools.partial(ringcc.torch.create, name="gloo"), False)

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)


class TestSuite(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


class Result(unittest.TextTestResult):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.outcomes = {}

    def _set(self, test, what):
        name = test.id().rsplit(".", 1)[-1]
        self.outcomes[name] = what
        print(f"{what} {name}", flush=True)

    def addSuccess(self, test):
        super().addSuccess(test)
        self._set(test, "PASS")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._set(test, "FAIL")

    def addError(self, test, err):
        super().addError(test, err)
        self._set(test, "FAIL")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._set(test, "SKIP")

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._set(test, "SKIP")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._set(test, "FAIL")


def main():
    TestSuite.setUpClass()
    loader = unittest.TestLoader()
    names = [n for n in loader.getTestCaseNames(TestSuite)]
    if ARGS.tests:
        wanted = [t.strip() for t in ARGS.tests.split(",") if t.strip()]
        missing = [t for t in wanted if t not in names]
        if missing:
            print(f"torch_suite: no such tests: {', '.join(missing)}",
                  file=sys.stderr)
            return 2
        names = wanted
    suite = unittest.TestSuite(TestSuite(n) for n in names)
    runner = unittest.TextTestRunner(resultclass=Result, verbosity=0,
                                     stream=open(os.devnull, "w"))
    result = runner.run(suite)
    counts = {k: sum(1 for v in result.outcomes.values() if v == k)
              for k in ("PASS", "FAIL", "SKIP")}
    print(f"torch_suite {ARGS.backend} ws={ARGS.world_size}: "
          f"{counts['PASS']} passed, {counts['FAIL']} failed, "
          f"{counts['SKIP']} skipped", flush=True)
    for test, tb in result.failures + result.errors:
        name = test.id().rsplit(".", 1)[-1]
        print(f"---- {name}\n{tb[-3000:]}", file=sys.stderr)
    if ARGS.json:
        with open(ARGS.json, "w") as f:
            json.dump(result.outcomes, f, indent=1, sort_keys=True)
    return 0 if counts["FAIL"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
