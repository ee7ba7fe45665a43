"""The README's first command runs deploy/demo.py: it must work end to end
(throwaway Postgres, local broker, outboxd, sample events shown as they
arrive) and stop cleanly."""

import os
import re
import subprocess
import sys

import harness
from conftest import BUILD_DIR, REPO_ROOT


def test_demo_shows_events_and_stops_cleanly():
    demo = os.path.join(REPO_ROOT, "deploy", "demo.py")
    proc = subprocess.run(
        [sys.executable, demo, "--events", "6", "--rate", "10", "--build", str(BUILD_DIR),
         "--http", "127.0.0.1:%d" % harness.free_port()],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=180)
    out = proc.stdout.decode("utf-8", "replace")
    assert proc.returncode == 0, out
    records = re.findall(r"^(outbox\.event\.\w+)\s+partition=(\d) offset=\d+\s+key=(\S+)\s+"
                         r"headers=\{id=[0-9a-f-]{36}, type=", out, re.M)
    assert len(records) >= 6, out
    assert all(r[0] in ("outbox.event.order", "outbox.event.customer") for r in records)
    assert "outboxd exited with code 0" in out, out
    assert "6 records shown" in out, out
    # The other end: outboxd inbox stored the same events as inbox rows.
    rows = re.search(r"^(\d+) rows in the inbox table$", out, re.M)
    assert rows and int(rows.group(1)) >= 6, out
    assert "outboxd inbox exited with code 0" in out, out
