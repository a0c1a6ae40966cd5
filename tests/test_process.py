"""Child processes: the ready line, failures as the owner's error class, stop on stdin EOF."""

from __future__ import annotations

import sys

import pytest

from ragbench.errors import GeneratorError, TransportError
from ragbench.process import ChildProcess, child_env

SERVER = (
    "import json, sys\n"
    "from ragbench.process import watch_stdin\n"
    "config = json.loads(sys.stdin.readline())\n"
    "print('READY', config['port'], flush=True)\n"
    "watch_stdin(lambda: None, exit_after=0.0)\n"
    "import time\n"
    "time.sleep(60)\n"
)


@pytest.mark.integration
def test_child_reports_ready_and_stops_when_stdin_closes() -> None:
    child = ChildProcess([sys.executable, "-c", SERVER], "test", {"port": 7}, error=TransportError)
    try:
        assert child.wait_ready(30) == "READY 7"
        assert child.alive and child.death_note(0.0) == "the server process is still running"
    finally:
        child.stop(grace=10.0)  # closes stdin; watch_stdin makes it exit
    assert not child.alive
    assert child.proc.returncode == 0
    child.stop()  # idempotent


@pytest.mark.integration
@pytest.mark.parametrize("error", [TransportError, GeneratorError])
def test_child_failures_raise_the_owners_error(error: type[Exception]) -> None:
    script = "import sys; sys.stderr.write('cannot bind'); sys.exit(3)"
    child = ChildProcess([sys.executable, "-c", script], "test server", error=error)
    with pytest.raises(error, match="(?s)test server: .*exited with code 3.*cannot bind"):
        child.wait_ready(30)
    child.stop()
    slow = ChildProcess([sys.executable, "-c", "import time; time.sleep(60)"], "slow", error=error)
    with pytest.raises(error, match="did not report ready within 0.01 s"):
        slow.wait_ready(0.01)
    assert not slow.alive


def test_child_env_puts_this_checkout_first() -> None:
    import os

    import ragbench

    first = child_env()["PYTHONPATH"].split(os.pathsep)[0]
    assert ragbench.__file__.startswith(first)
