"""An operator's first hour: `check` and `run` judge the settings alike,
a receiving service's file is not run as a publisher, one-shot commands do
not promise to retry, the start-up lines say what is true, and a publisher
and an inbox on one host do not fight over the HTTP port."""

import re
import socket
import urllib.request

import harness
from conftest import OUTBOXD_BIN, UNSET
from test_faults import on_cluster, wait_streaming
from test_inbox import InboxEnv


def test_check_and_run_agree_on_http_listen(outboxd_factory):
    """`-s http.listen=9187` (no host) is refused by `check` as by `run`:
    exit 2 naming the key."""
    d = outboxd_factory(start=False)
    for command in (["check"], ["run"]):
        rc, out, err = d.run_cmd(command + ["-s", "http.listen=9187"], timeout=30)
        assert rc == 2, (command, rc, out, err)
        assert 'invalid value "9187" for http.listen' in err, (command, err)


def test_publisher_command_of_an_inbox_only_config_is_refused(pg, broker, tmp_path):
    """A receiving service's file ([inbox], no publisher keys) given to
    `outboxd run` or `outboxd slot status` (the `inbox` forgotten): exit 2
    naming `outboxd inbox`, instead of streaming from libpq's defaults."""
    config = {
        "inbox": {"conninfo": pg.conninfo(), "topics": "outbox.event.x"},
        "kafka": {"bootstrap.servers": broker.bootstraps},
        "http": {"listen": ""},
    }
    d = harness.Outboxd(OUTBOXD_BIN, config, str(tmp_path / "inbox"), start=False)
    for command in (["run"], ["slot", "status"]):
        rc, out, err = d.run_cmd(command, timeout=30)
        assert rc == 2, (command, rc, out, err)
        assert 'run "outboxd inbox"' in err, (command, err)


def test_check_does_not_promise_to_retry(pg, outboxd_factory, test_id):
    """A refused connection in `check` names the refusal and its fix on
    its line of the table (each problem once, there, not also on stderr),
    and says nothing of retrying: check connects once and exits."""
    role = "ob_op_%s" % test_id
    pg.sql("CREATE ROLE %s LOGIN" % role)
    d = outboxd_factory({"postgres": {"conninfo": pg.conninfo(user=role)}},
                        start=False)
    rc, out, err = d.run_cmd(["check"], timeout=30)
    assert rc == 2, (rc, out, err)
    assert re.search(r"^postgres\s+FAIL refused \(privilege\)", out, re.M), out
    assert "refused" not in err, err
    assert "retrying" not in err + out, err


def test_version_names_the_libraries():
    """--version says which librdkafka and libpq the binary runs with."""
    d = harness.subprocess.run([OUTBOXD_BIN, "--version"], capture_output=True,
                               text=True, timeout=10)
    assert d.returncode == 0
    assert re.match(r"outboxd \S+\nlibrdkafka \d+\.\d+\.\d+\nlibpq \d+\.\d+\n$",
                    d.stdout), d.stdout


def test_first_start_names_no_zero_position(pg, outboxd_factory, slot_name):
    """On a first start (slot just created) the log says the stream starts
    at the slot's confirmed position, not at 0/0."""
    d = outboxd_factory()
    wait_streaming(pg, slot_name)
    d.wait_log(r"streaming from slot", 20)
    assert "at its confirmed position" in d.log_text(), d.log_tail()
    assert " at 0/0" not in d.log_text(), d.log_tail()


def test_check_blames_wal_level_not_the_plugin(own_cluster, outboxd_factory):
    """With wal_level = replica, `check` fails the wal_level line, and the
    plugin line names wal_level too instead of asking to install wal2json."""
    cluster = own_cluster(wal_level="replica")
    d = outboxd_factory(on_cluster(cluster), start=False)
    rc, out, err = d.run_cmd(["check"], timeout=30)
    assert rc == 2, (out, err)
    assert re.search(r"^wal_level\s+FAIL", out, re.M), out
    assert re.search(r"^wal2json\s+FAIL .*wal_level is not logical", out, re.M), out
    assert "install" not in out, out


def test_check_skips_the_backlog_of_an_existing_slot(pg, outboxd_factory, slot_name):
    """Once the slot exists, `run` never reads the backlog again, so
    `check` does not judge a predicate gone stale: it says why it skips it.
    Before, it says the row count is the planner's estimate."""
    d = outboxd_factory({"outbox": {"backlog_where": "created_at > now() - interval '1 day'"}},
                        start=False)
    rc, out, err = d.run_cmd(["check"], timeout=30)
    assert rc == 0, (out, err)
    assert re.search(r"^backlog\s+ok .*the planner estimates \d+ rows", out, re.M), out
    d.start()
    wait_streaming(pg, slot_name)
    rc, out, err = d.run_cmd(["check", "-s", "outbox.backlog_where=no_such_column > 0"],
                             timeout=30)
    assert rc == 0, (out, err)
    assert re.search(r"^backlog\s+ok\s+not read: slot \S+ exists", out, re.M), out


def run_bare(args, env=None):
    """outboxd ARGS with no configuration file unless env names one."""
    e = {k: v for k, v in harness.os.environ.items()
         if k not in ("OUTBOXD_CONFIG", "OUTBOXD_TEST_DEFAULT_CONFIG")}
    e.update(env or {})
    return harness.subprocess.run([OUTBOXD_BIN] + args, capture_output=True,
                                  text=True, timeout=30, env=e)


def test_each_command_has_its_own_help():
    """`outboxd COMMAND --help` prints that command's text (check's lines,
    what slot status prints), not the general usage; --if-not-exists and
    --accept-gap belong to slot create only (and `slot --help` names
    both)."""
    texts = {}
    for args, says in ((["run"], "Stream"), (["check"], "inbox tables"),
                       (["slot"], "slot COMMAND --help"),
                       (["slot", "create"], "--accept-gap"),
                       (["slot", "drop"], "backlog_where"),
                       (["slot", "status"], "retained_wal_bytes"),
                       (["inbox"], "inbox.topics")):
        r = run_bare(args + ["--help"])
        assert r.returncode == 0, (args, r.stderr)
        assert re.match(r"Usage: outboxd \[?%s" % " ".join(args), r.stdout), (args, r.stdout)
        assert says in r.stdout, (args, r.stdout)
        texts[" ".join(args)] = r.stdout
    assert len(set(texts.values())) == len(texts)
    assert "Exit codes: 0 every check passed" in texts["check"]
    general = run_bare(["--help"])
    assert general.returncode == 0 and general.stdout not in texts.values()
    for flag in ("--if-not-exists", "--accept-gap"):
        assert flag in texts["slot"] and flag in texts["slot create"], flag
        for args in (["check", flag], ["slot", "drop", flag]):
            r = run_bare(args)
            assert r.returncode == 2 and flag in r.stderr, (args, r.stderr)


def test_default_config_file(tmp_path):
    """Without -c and OUTBOXD_CONFIG, outboxd reads /etc/outboxd/outboxd.ini
    when it exists (a test build reads OUTBOXD_TEST_DEFAULT_CONFIG in its
    place); -c still wins."""
    default = tmp_path / "outboxd.ini"
    default.write_text("[outbox]\ntopik = x\n")
    r = run_bare(["check"], env={"OUTBOXD_TEST_DEFAULT_CONFIG": str(default)})
    assert r.returncode == 2, r.stderr
    assert "outbox.topik" in r.stderr and str(default) in r.stderr, r.stderr
    other = tmp_path / "other.ini"
    other.write_text("[outbox]\ntopic_x = x\n")
    r = run_bare(["check", "-c", str(other)],
                 env={"OUTBOXD_TEST_DEFAULT_CONFIG": str(default)})
    assert "outbox.topic_x" in r.stderr and "topik" not in r.stderr, r.stderr


def test_slot_create_if_not_exists(pg, outboxd_factory, slot_name):
    """slot create --if-not-exists: a slot of the configured plugin there
    is exit 0; without the flag a second create fails; a slot of the other
    plugin is exit 1 naming how to switch decoders."""
    d = outboxd_factory(start=False)
    rc, out, err = d.run_cmd(["slot", "create"], timeout=30)
    assert rc == 0, err
    rc, out, err = d.run_cmd(["slot", "create"], timeout=30)
    assert rc == 1, err
    rc, out, err = d.run_cmd(["slot", "create", "--if-not-exists"], timeout=30)
    assert rc == 0, err
    assert "exists already" in err, err
    rc, out, err = d.run_cmd(["slot", "create", "--if-not-exists",
                              "-s", "postgres.plugin=pgoutput"], timeout=30)
    assert rc == 1, err
    assert "Switching decoders" in err and "backlog_where" in err, err
    assert pg.slot(slot_name)["plugin"] == "wal2json"


def test_check_warns_of_another_outboxd_on_the_database(pg, outboxd_factory, slot_name):
    """Every slot of a database decodes every logical message: `check`
    warns (and passes) when another outboxd streams a slot of the same
    database, naming it; with no message prefix there is nothing to share."""
    other = outboxd_factory({"postgres": {"slot": slot_name[:60] + "_b"}}, start=False)
    rc, out, err = other.run_cmd(["check"], timeout=30)
    assert re.search(r"^message prefix\s+ok ", out, re.M), out
    outboxd_factory()
    wait_streaming(pg, slot_name)
    rc, out, err = other.run_cmd(["check"], timeout=30)
    assert rc == 0, (out, err)
    assert re.search(r"^message prefix\s+warn .*slot %s\b.*message_prefix" % slot_name,
                     out, re.M), out
    rc, out, err = other.run_cmd(["check", "-s", "outbox.message_prefix="], timeout=30)
    assert "message prefix" not in out, out


def test_no_flush_line_after_a_start_that_never_streamed(pg, outboxd_factory):
    """A start refused before streaming (the table missing: exit 1) does
    not say it flushes 0 in-flight events."""
    d = outboxd_factory({"outbox": {"table": "public.no_such_outbox"}}, start=False)
    rc, out, err = d.run_cmd(["run"], timeout=60)
    assert rc == 1, (out, err)
    assert "public.no_such_outbox" in err, err
    assert "flushing" not in err, err


def _metric_names(address):
    with urllib.request.urlopen("http://%s/metrics" % address, timeout=5) as r:
        return set(re.findall(r"^(outboxd_\w+)", r.read().decode(), re.M))


def test_publisher_and_inbox_default_http_ports_differ_and_both_run(
        pg, broker, outboxd_factory, slot_name, test_id, tmp_path):
    """With http.listen left out, the publisher serves on 127.0.0.1:7187
    and the inbox on 127.0.0.1:7188, so both run on one host at once (both
    took 127.0.0.1:9187, postgres_exporter's port, and the second exited
    1); each port answers with its own daemon's metrics."""
    pub = outboxd_factory({"http": {"listen": UNSET}})
    env = InboxEnv(pg, broker, test_id, tmp_path)
    cfg = env.config()
    del cfg["http"]
    inbox = harness.Outboxd(OUTBOXD_BIN, cfg, str(tmp_path / "inbox"), command="inbox")
    env.instances.append(inbox)
    try:
        pub.wait_log(r"serving /metrics, /healthz and /readyz on 127\.0\.0\.1:7187\b", 20)
        inbox.wait_log(r"serving /metrics, /healthz and /readyz on 127\.0\.0\.1:7188\b", 20)
        wait_streaming(pg, slot_name)
        pub.wait_log(r"streaming from slot", 20)
        assert pub.running() and inbox.running(), (pub.log_tail(), inbox.log_tail())
        assert "outboxd_replication_lag_bytes" in _metric_names("127.0.0.1:7187")
        assert "outboxd_inbox_records_total" in _metric_names("127.0.0.1:7188")
    finally:
        env.stop_all()


def test_http_port_taken_is_one_line_naming_http_listen(outboxd_factory):
    """A taken http.listen port: exit 1 with one error line that names
    http.listen, the address and the reason, and says what to do."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = "127.0.0.1:%d" % taken.getsockname()[1]
        d = outboxd_factory({"http": {"listen": address}})
        assert d.wait(20) == 1, d.log_tail()
    errors = [line for line in d.log_text().splitlines() if " error: " in line]
    assert len(errors) == 1, errors
    assert ("error: could not listen on %s for http.listen: Address already in use; "
            "set http.listen to a free host:port, or empty it to serve no HTTP" % address) \
        in errors[0], errors
