"""Integration tests of outboxd's command line (deploy/README.md, "Command line" and "Configuration reference"): --version,
--help, exit codes of usage and configuration errors (each naming the flag,
key or variable at fault), OUTBOXD_CONFIG, ${NAME} expansion and the
`slot create|status|drop` commands against the test cluster.

Also here (marked no_sanitizers): an explicit producer queue too small
for message.max.bytes is a configuration error."""

import os
import re
import subprocess

import pytest

import harness
from conftest import OUTBOXD_BIN, REPO_ROOT
from harness import wait_until

EXIT_OPERATOR = 1
EXIT_USAGE = 2


# ---------------------------------------------------------------------------
# helpers (test_ops.py uses them too)


def outboxd_env(extra=None, drop=("OUTBOXD_CONFIG",)):
    """The environment for a one-shot outboxd: ours, without the variables
    in drop (so the caller's OUTBOXD_CONFIG cannot leak in), plus extra."""
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(extra or {})
    return env


def run_outboxd(args, env=None, timeout=60.0):
    """Runs `outboxd ARGS` to completion; returns the CompletedProcess (text
    stdout and stderr). A process still running after timeout seconds is
    killed and reported as a test failure."""
    try:
        return subprocess.run([OUTBOXD_BIN] + list(args), capture_output=True,
                              text=True, timeout=timeout,
                              env=outboxd_env(env), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(
            "outboxd %s still running after %.0fs (it should have exited); "
            "output:\n%s\n%s" % (" ".join(args), timeout, e.stdout, e.stderr))


def describe(r):
    """rc, stdout and stderr of a CompletedProcess, for assertion messages."""
    return "rc=%s\n--- stdout:\n%s\n--- stderr:\n%s" % (
        r.returncode, r.stdout, r.stderr)


def closed_port_conninfo():
    """A conninfo that fails at once: nothing listens on the port."""
    return ("host=127.0.0.1 port=%d dbname=postgres user=postgres "
            "connect_timeout=3" % harness.free_port())


def write_config(path, text):
    with open(path, "w") as f:
        f.write(text)
    return str(path)


def offline_config(tmp_path, extra="", name="offline.ini"):
    """An INI file whose Postgres is unreachable and whose HTTP endpoint is
    off, plus the extra text: with a valid configuration `run` would keep
    retrying and `slot status` exits 1 (cannot connect)."""
    return write_config(tmp_path / name,
                        "[postgres]\nconninfo = %s\n\n[http]\nlisten =\n\n%s"
                        % (closed_port_conninfo(), extra))


def assert_config_error(args, names, env=None, command=("run",)):
    """`outboxd COMMAND ARGS` exits 2 at once, naming each of names on
    stderr."""
    r = run_outboxd(list(command) + list(args), env=env, timeout=30)
    assert r.returncode == EXIT_USAGE, describe(r)
    for n in names:
        assert n in r.stderr, "%r not named on stderr; %s" % (n, describe(r))
    return r


def assert_config_accepted(args, env=None):
    """The configuration loads: `slot status` gets as far as connecting to
    the unreachable Postgres and exits 1, not 2."""
    r = run_outboxd(["slot", "status"] + list(args), env=env, timeout=30)
    assert r.returncode == EXIT_OPERATOR, describe(r)
    assert "unknown configuration key" not in r.stderr, describe(r)
    return r


def project_version():
    """The version in meson.build's project()."""
    with open(REPO_ROOT / "meson.build") as f:
        m = re.search(r"version\s*:\s*'([^']+)'", f.read())
    assert m, "no version in meson.build"
    return m.group(1)


def wait_slot_active(pg, slot, timeout=30.0):
    """Waits until slot exists and a walsender holds it; returns its row."""
    def active():
        s = pg.slot(slot)
        return s if s is not None and s["active"] else None
    return wait_until(active, timeout, 0.1, "slot %s active" % slot)


def parse_slot_status(text):
    """`slot status` output -> {label: value}: one `label  value` per line
    (a colon or = after the label is allowed)."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^\s*([A-Za-z_ ]*?[A-Za-z_])\s*[:=]?\s+(\S.*?)\s*$",
                     line)
        if m:
            out[m.group(1).strip().lower().replace(" ", "_")] = m.group(2)
    return out


def status_field(status, *names):
    """The value of the first of names present in a parsed `slot status`."""
    for n in names:
        if n in status:
            return status[n]
    raise AssertionError("slot status shows none of %s: %r" % (names, status))


# ---------------------------------------------------------------------------
# --version, --help, usage errors


def test_version_prints_the_project_version():
    version = project_version()
    for flag in ("--version", "-V"):
        r = run_outboxd([flag])
        assert r.returncode == 0, describe(r)
        assert version in r.stdout, describe(r)
        assert "outboxd" in r.stdout, describe(r)


def test_help_shows_usage_of_every_command():
    for flag in ("--help", "-h"):
        r = run_outboxd([flag])
        assert r.returncode == 0, describe(r)
        text = r.stdout
        assert re.search(r"(?i)usage", text), describe(r)
        for word in ("run", "check", "slot", "create", "drop", "status",
                     "--config", "--set", "--version", "OUTBOXD_CONFIG",
                     "--if-not-exists", "--accept-gap", "dlq", "release",
                     "redrive", "--include-failed"):
            assert word in text, "%r missing from --help; %s" % (word,
                                                                describe(r))


def test_usage_errors_exit_2_naming_the_culprit(tmp_path):
    cfg = offline_config(tmp_path)
    cases = [
        (["frobnicate", "-c", cfg], r"frobnicate"),
        (["--frobnicate"], r"--frobnicate"),
        (["-x", "-c", cfg], r"-x\b|'x'"),
        (["slot", "-c", cfg], r"create"),
        (["slot", "rename", "-c", cfg], r"rename"),
        (["check", "extra-arg", "-c", cfg], r"extra-arg"),
        (["-c"], r"-c\b|'c'|--config"),
        (["dlq", "-c", cfg], r"list, release or redrive"),
        (["dlq", "purge", "-c", cfg], r"purge"),
        (["dlq", "release", "-c", cfg], r"at least one key"),
        (["dlq", "redrive", "-c", cfg], r"--id ID\.\.\. or --since"),
        (["dlq", "redrive", "--id", "x", "--since", "2026-11-29T00:00:00Z",
          "-c", cfg], r"--id ID\.\.\. or --since"),
        (["dlq", "list", "--topic", "t", "-c", cfg], r"--topic"),
        (["dlq", "release", "k", "--id", "x", "-c", cfg], r"--id"),
        (["slot", "status", "--include-failed", "-c", cfg], r"--include-failed"),
    ]
    for args, named in cases:
        r = run_outboxd(args, timeout=30)
        assert r.returncode == EXIT_USAGE, "%s: %s" % (args, describe(r))
        assert re.search(named, r.stderr), "%s: /%s/ not on stderr; %s" % (
            args, named, describe(r))


def test_a_usage_error_is_one_line(tmp_path):
    """A bad option, a missing value or an unknown command: one line on
    stderr naming it (getopt's own message is not printed beside it)."""
    cfg = offline_config(tmp_path)
    for args, named in [(["--frobnicate"], '"--frobnicate"'),
                        (["-x", "-c", cfg], '"-x"'),
                        (["-c"], '"-c"'),
                        (["--config"], '"--config"'),
                        (["frobnicate"], '"frobnicate"')]:
        r = run_outboxd(args, timeout=30)
        assert r.returncode == EXIT_USAGE, "%s: %s" % (args, describe(r))
        assert r.stdout == "", "%s: %s" % (args, describe(r))
        lines = r.stderr.splitlines()
        assert len(lines) == 1 and named in lines[0] and \
            "outboxd --help" in lines[0], "%s: %s" % (args, describe(r))


def test_help_examples_and_lines_fit_the_command():
    """`inbox --help` shows an -s example of an inbox key; `slot status
    --help` says when its standby_copy line appears."""
    r = run_outboxd(["inbox", "--help"])
    assert r.returncode == 0, describe(r)
    examples = re.findall(r"-s ([a-z_]+)\.[a-z_.]+=", r.stdout)
    assert examples == ["inbox"], describe(r)
    r = run_outboxd(["slot", "status", "--help"])
    assert r.returncode == 0, describe(r)
    # The line and its continuation lines, up to the next item or blank.
    line = re.search(r"standby_copy(.*?)\n(?=  \S|\n)", r.stdout, re.S)
    assert line and "17" in line.group(1) and \
        "slot_failover" in line.group(1), describe(r)


# ---------------------------------------------------------------------------
# configuration errors


def test_unknown_key_in_file_is_named(tmp_path):
    cfg = offline_config(tmp_path, "[outbox]\ntopik = x.{aggregate_type}\n")
    assert_config_error(["-c", cfg], ["outbox.topik", "unknown"])
    cfg = offline_config(tmp_path, "[nosuchsection]\nkey = 1\n", "sec.ini")
    assert_config_error(["-c", cfg], ["nosuchsection.key"])


def test_unknown_key_via_set_is_named(tmp_path):
    cfg = offline_config(tmp_path)
    assert_config_error(["-c", cfg, "-s", "postgres.slots=x"],
                        ["postgres.slots"])
    assert_config_error(["-c", cfg, "-s", "noseparator"], ["noseparator"])


def test_invalid_values_are_named(tmp_path):
    cfg = offline_config(tmp_path)
    for setting, named in [("log.level=verbose", "log.level"),
                           ("log.format=xml", "log.format"),
                           ("postgres.status_interval_ms=soon",
                            "postgres.status_interval_ms"),
                           ("postgres.create_slot=maybe",
                            "postgres.create_slot"),
                           ("outbox.on_bad_event=ignore",
                            "outbox.on_bad_event"),
                           ("postgres.slot=Bad-Name", "postgres.slot")]:
        assert_config_error(["-c", cfg, "-s", setting], [named])


def test_pinned_kafka_properties_cannot_be_changed(tmp_path):
    cfg = offline_config(tmp_path)
    assert_config_error(["-c", cfg, "-s", "kafka.enable.idempotence=false"],
                        ["enable.idempotence"])
    assert_config_error(["-c", cfg, "-s", "kafka.acks=1"], ["acks"])
    pinned = offline_config(tmp_path, "[kafka]\nenable.idempotence = false\n",
                            "pinned.ini")
    assert_config_error(["-c", pinned], ["enable.idempotence"])
    # Restating the pinned value, or setting any other property, is fine.
    assert_config_accepted(["-c", cfg, "-s", "kafka.enable.idempotence=true",
                            "-s", "kafka.acks=all", "-s", "kafka.linger.ms=20"])


def test_outboxd_config_env_names_the_file(tmp_path):
    bad = offline_config(tmp_path, "[log]\nverbosity = 3\n")
    assert_config_error([], ["log.verbosity"], env={"OUTBOXD_CONFIG": bad})
    good = offline_config(tmp_path, name="good.ini")
    assert_config_accepted([], env={"OUTBOXD_CONFIG": good})


def test_unset_environment_variable_is_a_config_error(tmp_path):
    var = "OB_TEST_SURELY_UNSET_%d" % os.getpid()
    cfg = offline_config(tmp_path, "[outbox]\ndlq_topic = ${%s}\n" % var)
    assert_config_error(["-c", cfg], [var])
    ok = offline_config(tmp_path, name="ok.ini")
    assert_config_error(["-c", ok, "-s", "postgres.slot=${%s}" % var], [var])
    # Set, the same reference is accepted.
    assert_config_accepted(["-c", cfg], env={var: "dlq_from_env"})


def test_unset_variable_names_its_key_and_is_not_read_when_overridden(
        tmp_path):
    """The error names the setting (section.key) and the file once; a key
    that -s overrides is not read from the file, so its ${NAME} need not
    be set."""
    var = "OB_TEST_SURELY_UNSET_%d" % os.getpid()
    cfg = offline_config(tmp_path, "[outbox]\ndlq_topic = ${%s}\n" % var)
    r = assert_config_error(["-c", cfg], [var, "outbox.dlq_topic",
                                          "offline.ini"])
    assert " in in " not in r.stderr, describe(r)
    r = assert_config_error(["-c", cfg, "-s", "outbox.topic=${%s}" % var],
                            [var, "outbox.topic (-s)"])
    assert_config_accepted(["-c", cfg, "-s", "outbox.dlq_topic=t.dlq"])
    # A [kafka] property too (its name has dots of its own).
    kafka = offline_config(tmp_path, "[kafka]\nsasl.password = ${%s}\n" % var,
                           "kafka.ini")
    assert_config_error(["-c", kafka], [var, "kafka.sasl.password"])
    assert_config_accepted(["-c", kafka, "-s", "kafka.sasl.password=pw"])


def test_a_port_in_use_stops_as_every_exit_does(tmp_path):
    """http.listen on a port another process holds: exit 1 naming the
    address, with the "stopped (exit code 1)" line every daemon exit
    ends with."""
    import socket
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1)
    try:
        address = "127.0.0.1:%d" % held.getsockname()[1]
        cfg = offline_config(tmp_path)
        for args in (["run"], ["inbox", "-s", "inbox.topics=t"]):
            r = run_outboxd(args + ["-c", cfg, "-s", "http.listen=" + address],
                            timeout=30)
            assert r.returncode == EXIT_OPERATOR, describe(r)
            assert address in r.stderr, describe(r)
            assert "stopped (exit code 1)" in r.stderr.splitlines()[-1], \
                describe(r)
    finally:
        held.close()


# ---------------------------------------------------------------------------
# slot create | status | drop


def test_slot_create_status_drop(pg, broker, outboxd_factory, slot_name,
                                 tmp_path):
    """The slot commands against the test cluster, with the config file
    named by OUTBOXD_CONFIG and the slot name taken from ${OB_CLI_SLOT}."""
    cfg = write_config(tmp_path / "slot.ini",
                       "[postgres]\nconninfo = %s\nslot = ${OB_CLI_SLOT}\n"
                       "[http]\nlisten =\n" % pg.conninfo())
    env = {"OUTBOXD_CONFIG": cfg, "OB_CLI_SLOT": slot_name}

    r = run_outboxd(["slot", "status"], env=env)
    assert r.returncode not in (0, EXIT_USAGE), describe(r)
    assert slot_name in r.stderr + r.stdout, describe(r)

    r = run_outboxd(["slot", "create"], env=env)
    assert r.returncode == 0, describe(r)
    row = pg.slot(slot_name)
    assert row is not None, "slot create made no slot; " + describe(r)
    assert row["plugin"] == "wal2json" and row["slot_type"] == "logical", row
    assert row["database"] == "postgres", row

    def status():
        before = pg.wal_lsn()
        r = run_outboxd(["slot", "status"], env=env)
        assert r.returncode == 0, describe(r)
        return parse_slot_status(r.stdout), before, pg.wal_lsn(), r

    st, _, _, r = status()
    row = pg.slot(slot_name)
    assert slot_name in r.stdout, describe(r)
    assert status_field(st, "plugin") == "wal2json", describe(r)
    assert status_field(st, "active_pid", "active", "pid") in ("-", "none",
                                                                "0"), \
        describe(r)
    assert status_field(st, "confirmed_flush_lsn") == \
        row["confirmed_flush_lsn"], describe(r)
    assert status_field(st, "restart_lsn") == row["restart_lsn"], describe(r)
    assert status_field(st, "wal_status") == row["wal_status"], describe(r)

    # While outboxd streams from it, status shows the walsender's pid. It
    # names the position it starts from.
    d = outboxd_factory({"postgres": {"create_slot": False}})
    m = d.wait_log(r"streaming from slot %s at its confirmed position "
                   r"([0-9A-F]+/[0-9A-F]+)" % slot_name)
    assert m.group(1) == status_field(st, "confirmed_flush_lsn"), \
        d.log_tail()
    row = wait_slot_active(pg, slot_name)
    st, before, after, r = status()
    assert status_field(st, "active_pid", "active", "pid") == \
        str(row["active_pid"]), describe(r)
    retained = int(re.match(r"\d+", status_field(
        st, "retained_wal_bytes", "retained_wal", "retained_bytes",
        "retained")).group(0))
    restart = pg.slot(slot_name)["restart_lsn_int"]
    assert before - max(restart, row["restart_lsn_int"]) <= retained <= \
        after - min(restart, row["restart_lsn_int"]), (retained, describe(r))
    assert d.stop() == 0, d.log_tail()

    r = run_outboxd(["slot", "drop"], env=env)
    assert r.returncode == 0, describe(r)
    assert pg.slot(slot_name) is None, describe(r)


@pytest.mark.no_sanitizers
def test_too_small_explicit_queue_is_a_config_error(outboxd_factory):
    """A defect found in review: a record larger than the producer queue
    waited forever for room and stalled the stream. outboxd sizes a queue
    it was not given to the largest record; one set explicitly too small
    for message.max.bytes is a configuration error (exit 2) naming
    queue.buffering.max.kbytes."""
    d = outboxd_factory({"kafka": {"message.max.bytes": "20000000",
                                   "queue.buffering.max.kbytes": "4096"}})
    assert d.wait(30) == 2, d.log_tail()
    assert "queue.buffering.max.kbytes" in d.log_text()
