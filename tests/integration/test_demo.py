"""The README's first command runs deploy/demo.py: it must work end to end
(throwaway Postgres, local broker, outboxd, sample events shown as they
arrive) and stop cleanly, after installing only what it needs."""

import os
import re
import signal
import socket
import subprocess
import sys
import threading

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
    # Its throwaway files are gone (broker log included).
    work = re.search(r"\(log: (/\S+)/outboxd-1\.log", out)
    assert work and not os.path.exists(work.group(1)), out


def test_demo_stops_on_ctrl_c_to_its_process_group():
    """Ctrl-C in a terminal sends SIGINT to the whole process group: the
    broker, both daemons and Postgres get it as the demo does. The demo
    still stops within a minute, says how outboxd exited and removes its
    files; a newcomer's run (before) kept polling a dead broker for
    minutes and left its directory behind."""
    demo = os.path.join(REPO_ROOT, "deploy", "demo.py")
    proc = subprocess.Popen(
        [sys.executable, demo, "--rate", "10", "--build", str(BUILD_DIR),
         "--http", "127.0.0.1:%d" % harness.free_port()],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(
        iter(proc.stdout.readline, b"")), daemon=True)
    reader.start()
    try:
        harness.wait_until(lambda: sum(b"value=" in line for line in lines) >= 3, 120,
                           0.2, "the demo shows records")
        os.killpg(proc.pid, signal.SIGINT)
        rc = proc.wait(60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    reader.join(10)
    out = b"".join(lines).decode("utf-8", "replace")
    assert "Traceback" not in out, out
    assert re.search(r"^outboxd exited with code \S+$", out, re.M), out
    work = re.search(r"\(log: (/\S+)/outboxd-1\.log", out)
    assert work, out
    assert not os.path.exists(work.group(1)) or rc != 0, out
    assert rc == 0, out


def _deps_list(*args):
    deps = os.path.join(REPO_ROOT, "deploy", "deps.sh")
    out = subprocess.run(["bash", deps] + list(args) + ["--list"], check=True,
                         stdout=subprocess.PIPE, text=True, timeout=30).stdout
    return out.split()


def test_demo_installs_the_demo_set_not_the_test_tools():
    """deploy/demo.sh runs `deploy/deps.sh --demo`: the build, PostgreSQL 15
    with wal2json and the demo's Python modules, without the test tools
    (clang-14, Patroni, etcd, kcat, pytest) and without the PostgreSQL 16-18
    servers fetched from npm; `deps.sh` alone, which tests/run.sh runs,
    still installs all of it."""
    demo = _deps_list("--demo")
    full = _deps_list()
    for needed in _deps_list("--build") + ["postgresql-15", "postgresql-15-wal2json",
                                           "python3-psycopg2", "python3-confluent-kafka"]:
        assert needed in demo, (needed, demo)
    for test_only in ["clang-14", "libclang-rt-14-dev", "patroni", "etcd-server", "nodejs",
                      "npm", "kcat", "python3-pytest", "locales"]:
        assert test_only not in demo, (test_only, demo)
    assert set(demo) < set(full), sorted(set(demo) - set(full))
    assert {"clang-14", "patroni", "etcd-server"} <= set(full), full

    with open(os.path.join(REPO_ROOT, "deploy", "demo.sh")) as f:
        calls = [line.split() for line in f if "deps.sh" in line and not line.startswith("#")]
    assert calls == [["bash", "deploy/deps.sh", "--demo"]], calls
    # With its packages present (tests/run.sh installed everything), the
    # demo's install says so in one line: no pgversions.sh, no locale.
    out = subprocess.run(["bash", os.path.join(REPO_ROOT, "deploy", "deps.sh"), "--demo"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=60)
    assert (out.returncode, out.stdout) == (0, "deps: all %d demo packages present\n"
                                            % len(demo)), out.stdout


def test_demo_names_its_http_option_when_the_port_is_taken():
    """A port already taken (say by postgres_exporter, or a second demo):
    one line naming the address and --http, exit 2, no traceback, before
    anything is started."""
    demo = os.path.join(REPO_ROOT, "deploy", "demo.py")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = "127.0.0.1:%d" % taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, demo, "--events", "1", "--build", str(BUILD_DIR), "--http", address],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode == 2, proc
    assert proc.stdout == "", proc.stdout
    assert proc.stderr == ("demo: outboxd cannot serve its metrics on %s (Address already in "
                           "use): choose a free address with --http HOST:PORT, or --http '' "
                           "for none\n" % address), proc.stderr
