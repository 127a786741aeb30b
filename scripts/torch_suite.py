"""torch_suite.py - PyTorch's own distributed test body on one backend.

    python scripts/torch_suite.py --backend gloo|ringcc --world-size N
                                  [--tests NAME,...] [--json FILE]

Runs DistributedTest._DistTestBase from the installed wheel
(torch/testing/_internal/distributed/distributed_test.py, never copied) the
way PyTorch's test/distributed/test_distributed_spawn.py does: BACKEND=gloo,
WORLD_SIZE, TEMP_DIR, INIT_METHOD=env://, one spawned process per rank and
test. With --backend ringcc, ringcc stands in for gloo: the creator
registered for "gloo" is ringcc's (Backend._plugins["GLOO"]), with profiler
events named "gloo:..." as the suite expects; this is set at import, so the
spawned ranks (which import this file again) get it too. Prints one line per
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
    ARGS = p.parse_args()
    os.environ["RINGCC_SUITE_BACKEND"] = ARGS.backend
    os.environ["BACKEND"] = "gloo"
    os.environ["WORLD_SIZE"] = str(ARGS.world_size)
    os.environ.setdefault("INIT_METHOD", "env://")
    os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="rcc-torch-suite-")

import torch.distributed as dist  # noqa: E402

if os.environ.get("RINGCC_SUITE_BACKEND") == "ringcc":
    import ringcc.torch  # noqa: E402
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
