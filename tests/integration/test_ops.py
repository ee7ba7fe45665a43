"""Integration tests of outboxd's operational surface: Prometheus metrics,
/healthz and /readyz (deploy/README.md, "Metrics and health"), JSON logs without secrets, `outboxd
check`, the shipped SQL files (least-privilege role), the README's
configuration reference against the code, and the deploy files (§7).

Also here: the metrics port under a flood of idle connections (the probes
still answer), and the systemd watchdog pinged while outboxd waits for
producer queue room (marked no_sanitizers: left to tests/run.sh's plain
pass)."""

import json
import math
import os
import re
import resource
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest
import yaml

import harness
from conftest import BUILD_DIR, REPO_ROOT
from harness import free_port, header, lsn_to_int, wait_until
from test_cli import (EXIT_USAGE, closed_port_conninfo, describe,
                      run_outboxd, wait_slot_active, write_config)
from test_faults import Feed, make_topic, wait_streaming

SQL_DIR = REPO_ROOT / "sql"
DEPLOY_DIR = REPO_ROOT / "deploy"
CONFIG_C = REPO_ROOT / "src" / "config.c"
README = REPO_ROOT / "README.md"
# The configuration reference, in one place (the man page is made from it).
CONFIG_REFERENCE = REPO_ROOT / "deploy" / "README.md"

SECTIONS = ("postgres", "outbox", "inbox", "kafka", "kafka_auth", "http", "log")


# ---------------------------------------------------------------------------
# HTTP and Prometheus text


def http_get(port, path, timeout=5.0):
    """(status, body text) of GET http://127.0.0.1:port/path; (None, error)
    when nothing answers."""
    url = "http://127.0.0.1:%d%s" % (port, path)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8")
    except (urllib.error.URLError, ConnectionError, OSError) as e:
        return None, str(e)


def wait_http(port, path, status, word, timeout=30.0, daemon=None):
    """Waits until GET path answers status with word in its body; returns
    the body."""
    def probe():
        if daemon is not None and not daemon.running():
            raise AssertionError("outboxd exited (rc=%s) while waiting for "
                                 "%s %s; log:\n%s" % (daemon.proc.returncode,
                                                      path, status,
                                                      daemon.log_tail()))
        got = http_get(port, path)
        return got if got[0] == status and word in got[1] else None
    try:
        return wait_until(probe, timeout, 0.2)[1]
    except TimeoutError:
        raise AssertionError("%s never answered %s %r; last answer %r"
                             % (path, status, word, http_get(port, path)))


def http_overrides(port, **sections):
    """Config overrides serving HTTP on 127.0.0.1:port, merged with
    sections ({name: {key: value}})."""
    out = {"http": {"listen": "127.0.0.1:%d" % port}}
    for name, items in sections.items():
        out.setdefault(name, {}).update(items)
    return out


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)"
                     r"(?:\s+-?\d+)?$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*'
                    r'(?:,|$)')


class Metrics:
    """A parsed /metrics page: samples {(name, ((label, value), ...)):
    float} and types {family: type}. Every line must be a comment or a
    well-formed sample."""

    def __init__(self, text):
        self.text = text
        self.samples = {}
        self.types = {}
        for line in text.splitlines():
            if not line.strip():
                continue
            if line.startswith("#"):
                m = re.match(r"^# TYPE (\S+) (counter|gauge|histogram|"
                             r"summary|untyped)$", line)
                if m:
                    self.types[m.group(1)] = m.group(2)
                else:
                    assert re.match(r"^# HELP \S+ ", line), \
                        "malformed comment line %r" % line
                continue
            m = _SAMPLE.match(line)
            assert m, "malformed sample line %r" % line
            labels = ()
            if m.group(2):
                pos, raw, found = 0, m.group(2), []
                while pos < len(raw):
                    lm = _LABEL.match(raw, pos)
                    assert lm and lm.end() > pos, \
                        "malformed labels in %r" % line
                    found.append((lm.group(1), lm.group(2)))
                    pos = lm.end()
                labels = tuple(sorted(found))
            key = (m.group(1), labels)
            assert key not in self.samples, "duplicate sample %r" % line
            self.samples[key] = float(m.group(3))

    def get(self, name, default=None, **labels):
        return self.samples.get((name, tuple(sorted(labels.items()))),
                                default)

    def value(self, name, **labels):
        v = self.get(name, **labels)
        assert v is not None, "no sample %s%r in:\n%s" % (name, labels,
                                                         self.text)
        return v

    def series(self, name):
        """{labels dict as sorted tuple: value} of every sample of name."""
        return {lab: v for (n, lab), v in self.samples.items() if n == name}

    def buckets(self, name):
        """[(le, cumulative count)] of histogram name, in le order."""
        out = []
        for lab, v in self.series(name + "_bucket").items():
            le = dict(lab)["le"]
            out.append((math.inf if le == "+Inf" else float(le), v))
        return sorted(out)


def scrape(port):
    status, body = http_get(port, "/metrics")
    assert status == 200, "/metrics answered %s: %s" % (status, body)
    return Metrics(body)


DOCUMENTED_FAMILIES = {
    "outboxd_events_published_total": "counter",
    "outboxd_events_dead_lettered_total": "counter",
    "outboxd_transactions_total": "counter",
    "outboxd_inflight_events": "gauge",
    "outboxd_confirmed_lsn": "gauge",
    "outboxd_received_lsn": "gauge",
    "outboxd_server_wal_end_lsn": "gauge",
    "outboxd_replication_lag_bytes": "gauge",
    "outboxd_publish_latency_seconds": "histogram",
    "outboxd_postgres_connected": "gauge",
    "outboxd_kafka_connected": "gauge",
    "outboxd_reconnects_total": "counter",
    "outboxd_build_info": "gauge",
    "outboxd_postgres_refused": "gauge",
    "outboxd_lag_seconds": "gauge",
    "outboxd_ready": "gauge",
    "outboxd_slot_retained_wal_bytes": "gauge",
    "outboxd_slot_wal_status": "gauge",
}

# The inbox's families: `outboxd inbox` shows them, the publisher does not.
INBOX_FAMILIES = ("outboxd_inbox_records_total", "outboxd_inbox_lag_records",
                  "outboxd_inbox_partition_lag_records",
                  "outboxd_inbox_position_mismatches_total")

UNLABELLED = ("outboxd_transactions_total", "outboxd_inflight_events",
              "outboxd_confirmed_lsn", "outboxd_received_lsn",
              "outboxd_server_wal_end_lsn", "outboxd_replication_lag_bytes",
              "outboxd_postgres_connected", "outboxd_kafka_connected")


def check_histogram(m, name):
    """Cumulative buckets ending in +Inf == _count, and a _sum."""
    buckets = m.buckets(name)
    assert len(buckets) >= 2 and buckets[-1][0] == math.inf, buckets
    counts = [c for _, c in buckets]
    assert counts == sorted(counts), "buckets not cumulative: %r" % buckets
    assert buckets[-1][1] == m.value(name + "_count"), buckets
    assert m.value(name + "_sum") >= 0
    return m.value(name + "_count"), m.value(name + "_sum")


def check_spec_metrics(m):
    """Every family of deploy/README.md "Metrics and health", with its type and labels."""
    for family, kind in DOCUMENTED_FAMILIES.items():
        assert m.types.get(family) == kind, (
            "%s: TYPE %s, expected %s" % (family, m.types.get(family), kind))
    for family in INBOX_FAMILIES:
        assert family not in m.types, "the publisher shows the inbox's %s" % family
    for name in UNLABELLED:
        m.value(name)
    for target in ("postgres", "kafka"):
        m.value("outboxd_reconnects_total", target=target)
    # The first line is "outboxd <version>" (the library versions follow).
    version = run_outboxd(["--version"]).stdout.splitlines()[0].split()[-1]
    assert m.value("outboxd_build_info", version=version) == 1
    check_histogram(m, "outboxd_publish_latency_seconds")
    assert m.value("outboxd_replication_lag_bytes") == max(
        0, m.value("outboxd_server_wal_end_lsn")
        - m.value("outboxd_confirmed_lsn"))


# ---------------------------------------------------------------------------
# database helpers


def fresh_db(pg, name, files=("outbox.sql",)):
    """Creates database name and runs the given sql/ files in it."""
    pg.create_db(name)
    for f in files:
        pg.run_file(str(SQL_DIR / f), dbname=name)
    return name


def commit_events(pg, dbname, agg_type, n):
    """Inserts n events of agg_type in one transaction; returns the WAL
    insert position inside the transaction (before its commit record)."""
    conn = pg.connect(dbname)
    conn.autocommit = False
    try:
        with conn.cursor() as cur:
            cur.execute(
                "INSERT INTO public.outbox (aggregate_type, aggregate_id, "
                "event_type, payload) SELECT %s, 'key-' || g, 'tested', "
                "jsonb_build_object('n', g) FROM generate_series(1, %s) g",
                (agg_type, n))
            cur.execute("SELECT pg_current_wal_insert_lsn()")
            lsn = lsn_to_int(cur.fetchone()[0])
        conn.commit()
    finally:
        conn.close()
    return lsn


def check_lines(stdout):
    """`outboxd check` output -> [(name, ok, detail)] of its result lines
    (`name  ok|FAIL  detail`), and the remaining lines."""
    results, other = [], []
    for line in stdout.splitlines():
        m = re.match(r"^(\S.*?)\s+(ok|warn|FAIL)\b\s*(.*)$", line)
        if m:
            results.append((m.group(1), m.group(2) != "FAIL", m.group(3)))
        elif line.strip():
            other.append(line)
    return results, other


def failed_checks(stdout):
    return [r for r in check_lines(stdout)[0] if not r[1]]


def assert_check_passes(d):
    rc, out, err = d.run_cmd(["check"])
    results, other = check_lines(out)
    text = "rc=%s\n%s\n%s" % (rc, out, err)
    assert rc == 0, text
    assert results and all(ok for _, ok, _ in results), text
    assert all("passed" in line for line in other), text
    return out, err


# ---------------------------------------------------------------------------
# metrics


def test_metrics_serve_spec_families_and_move(pg, broker, outboxd_factory,
                                              slot_name, test_id):
    """/metrics has every metric of deploy/README.md "Metrics and health"; publishing 10 events in 3
    transactions and one bad (non-transactional) message moves them."""
    db = fresh_db(pg, "ops_metrics_%s" % test_id)
    agg = "metrics_%s" % test_id
    topic = "outbox.event.%s" % agg
    port = free_port()
    d = outboxd_factory(http_overrides(
        port, postgres={"conninfo": pg.conninfo(db)}))
    wait_http(port, "/readyz", 200, "ready", daemon=d)
    wait_slot_active(pg, slot_name)
    m0 = scrape(port)
    check_spec_metrics(m0)
    assert m0.value("outboxd_postgres_connected") == 1
    assert m0.value("outboxd_kafka_connected") == 1
    count0, sum0 = check_histogram(m0, "outboxd_publish_latency_seconds")

    started = time.monotonic()
    inner = [commit_events(pg, db, agg, n) for n in (2, 3, 5)]
    pg.sql("SELECT pg_logical_emit_message(false, 'outbox', %s)",
           (json.dumps({"id": "bad-%s" % test_id, "aggregate_type": agg,
                        "aggregate_id": "k", "event_type": "x",
                        "payload": {}}),), dbname=db)

    def settled():
        m = scrape(port)
        done = (m.get("outboxd_events_published_total", topic=topic) == 10
                and m.get("outboxd_events_dead_lettered_total",
                          reason="non-transactional-message") == 1
                and m.value("outboxd_inflight_events") == 0)
        return m if done else None
    m1 = wait_until(settled, 30, 0.2, "10 events published, 1 dead-lettered")
    elapsed = time.monotonic() - started
    check_spec_metrics(m1)
    # The dead-letter record counts as published to the dead-letter topic.
    assert set(m1.series("outboxd_events_published_total")) <= {
        (("topic", topic),), (("topic", d.config["outbox"]["dlq_topic"]),)
    }, m1.text
    assert m1.value("outboxd_transactions_total") >= \
        m0.value("outboxd_transactions_total") + 3, m1.text
    count1, sum1 = check_histogram(m1, "outboxd_publish_latency_seconds")
    assert count1 >= count0 + 10, (count0, count1)
    # Each latency (commit to ack) lies within the time the test waited.
    assert 0 < sum1 - sum0 <= (count1 - count0) * (elapsed + 0.05), (
        "latency sum grew by %.3fs for %d events acknowledged within %.3fs:"
        "\n%s" % (sum1 - sum0, count1 - count0, elapsed, m1.text))
    assert m1.value("outboxd_received_lsn") > inner[-1], m1.text
    assert m1.value("outboxd_confirmed_lsn") > \
        m0.value("outboxd_confirmed_lsn"), (m0.text, m1.text)

    # The confirmed position passes the last commit and is what the slot
    # shows (compared at a moment the two agree; they move with idle WAL).
    def agrees():
        c = scrape(port).value("outboxd_confirmed_lsn")
        return (c > inner[-1]
                and c == pg.slot(slot_name)["confirmed_flush_lsn_int"])
    wait_until(agrees, 30, 0.2, "outboxd_confirmed_lsn == slot's "
               "confirmed_flush_lsn, past the last commit (slot %r, "
               "metrics %r)" % (pg.slot(slot_name), scrape(port).text))
    assert d.stop() == 0, d.log_tail()


# ---------------------------------------------------------------------------
# health and readiness


def test_readyz_ready_then_standby_then_takeover(pg, broker, outboxd_factory,
                                                 slot_name):
    """Two instances on one slot: the first streams (/readyz 200 ready),
    the second waits (/readyz 503 standby, /healthz 200) and takes over
    when the first stops."""
    port_a, port_b = free_port(), free_port()
    fast = {"standby_retry_ms": 300}
    a = outboxd_factory(http_overrides(port_a, postgres=fast))
    wait_http(port_a, "/readyz", 200, "ready", daemon=a)
    wait_http(port_a, "/healthz", 200, "", daemon=a)
    wait_slot_active(pg, slot_name)
    b = outboxd_factory(http_overrides(port_b, postgres=fast))
    wait_http(port_b, "/readyz", 503, "standby", daemon=b)
    wait_http(port_b, "/healthz", 200, "", daemon=b)
    status, body = http_get(port_a, "/readyz")
    assert status == 200 and "ready" in body, (status, body)
    assert scrape(port_b).value("outboxd_postgres_connected") == 0
    assert a.stop() == 0, a.log_tail()
    wait_http(port_b, "/readyz", 200, "ready", timeout=30, daemon=b)


def test_readyz_connecting_while_postgres_unreachable(broker,
                                                      outboxd_factory):
    port = free_port()
    d = outboxd_factory(http_overrides(
        port, postgres={"conninfo": closed_port_conninfo(),
                        "reconnect_max_backoff_ms": 500}))
    wait_http(port, "/readyz", 503, "connecting", daemon=d)
    wait_http(port, "/healthz", 200, "", daemon=d)
    wait_until(lambda: scrape(port).value("outboxd_reconnects_total",
                                          target="postgres") >= 2,
               20, 0.2, "reconnects_total{target=postgres} counts retries")
    m = scrape(port)
    check_spec_metrics(m)
    assert m.value("outboxd_postgres_connected") == 0
    assert http_get(port, "/readyz")[0] == 503
    assert d.stop() == 0, d.log_tail()


def test_readyz_kafka_down_while_brokers_are_down(pg, broker,
                                                  outboxd_factory):
    port = free_port()
    d = outboxd_factory(http_overrides(port))
    wait_http(port, "/readyz", 200, "ready", daemon=d)
    broker.cmd("down all")
    wait_http(port, "/readyz", 503, "kafka-down", timeout=45, daemon=d)
    assert scrape(port).value("outboxd_kafka_connected") == 0
    broker.cmd("up all")
    wait_http(port, "/readyz", 200, "ready", timeout=45, daemon=d)
    assert scrape(port).value("outboxd_kafka_connected") == 1


# ---------------------------------------------------------------------------
# JSON logs, secrets, ${ENV}

PG_SECRET = "S3cretPG"
URI_SECRET = "S3cretURI"
KAFKA_SECRET = "S3cretKafka"

_HARNESS_MARK = re.compile(r"^=== start \d\d:\d\d:\d\d$")


def json_log_records(text):
    """Every line of outboxd's output as a JSON object (the harness's own
    `=== start` marker lines excepted)."""
    records = []
    for line in text.splitlines():
        if _HARNESS_MARK.match(line):
            continue
        try:
            rec = json.loads(line)
        except ValueError as e:
            raise AssertionError("log line is not JSON (%s): %r" % (e, line))
        assert isinstance(rec, dict), line
        records.append(rec)
    return records


def assert_no_secret(text, secrets, where):
    for s in secrets:
        assert s not in text, "secret %r appears in %s:\n%s" % (s, where,
                                                                 text)


@pytest.mark.parametrize("conninfo_form", ["keyword", "uri"])
def test_json_logs_carry_slot_and_no_secrets(pg, broker, consumer,
                                             outboxd_factory, slot_name,
                                             test_id, conninfo_form):
    """log.format=json, log.level=debug: every line is a JSON object with
    ts, level, msg and the slot; no password of the config anywhere in the
    output of run, check or slot status. The slot name comes from
    ${OB_TEST_SLOT}."""
    if conninfo_form == "keyword":
        conninfo = pg.conninfo() + " password=" + PG_SECRET
    else:
        conninfo = "postgresql://postgres:%s@127.0.0.1:%d/postgres" % (
            URI_SECRET, pg.port)
    secrets = (PG_SECRET, URI_SECRET, KAFKA_SECRET)
    agg = "jsonlog_%s" % test_id
    d = outboxd_factory({
        "postgres": {"conninfo": conninfo, "slot": "${OB_TEST_SLOT}"},
        "kafka": {"sasl.password": KAFKA_SECRET},
        "log": {"format": "json", "level": "debug"},
    }, env={"OB_TEST_SLOT": slot_name})
    wait_slot_active(pg, slot_name)
    commit_events(pg, "postgres", agg, 2)
    got = consumer.collect("outbox.event.%s" % agg, min_count=2, settle=0.2)
    assert len(got) == 2, got
    for args in (["check"], ["slot", "status"]):
        rc, out, err = d.run_cmd(args)
        assert rc == 0, "%s: rc=%s\n%s\n%s" % (args, rc, out, err)
        assert_no_secret(out + err, secrets, "`outboxd %s`" % " ".join(args))
        json_log_records(err)
    assert slot_name in out
    assert d.stop() == 0, d.log_tail()

    text = d.log_text()
    assert_no_secret(text, secrets, "the run log")
    records = json_log_records(text)
    assert len(records) >= 5, text
    for rec in records:
        for field in ("ts", "level", "msg"):
            assert isinstance(rec.get(field), str), (field, rec)
        assert rec["level"] in ("debug", "info", "warning", "error"), rec
        assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", rec["ts"]), rec
        assert rec.get("slot") == slot_name, rec
    assert any(r["level"] == "debug" for r in records), text
    # Lines about one WAL position carry it as a field (here the
    # confirmations and the final one at shutdown).
    confirms = [r for r in records if r["msg"].startswith("confirmed ")]
    assert confirms, text
    for rec in confirms:
        assert re.match(r"^[0-9A-F]+/[0-9A-F]+$", rec.get("lsn", "")), rec
        assert rec["msg"] == "confirmed " + rec["lsn"], rec


# ---------------------------------------------------------------------------
# outboxd check


def test_check_passes_on_the_test_cluster(pg, broker, outboxd_factory):
    d = outboxd_factory(start=False)
    out, err = assert_check_passes(d)
    for name in ("wal_level", "kafka", "postgres"):
        assert name in out, out


def test_check_and_run_fail_on_wal_level_replica(broker, outboxd_factory,
                                                 tmp_path):
    cluster = harness.PgCluster(str(tmp_path / "replica"),
                                wal_level="replica").start()
    try:
        cluster.run_file(str(SQL_DIR / "outbox.sql"))
        d = outboxd_factory({"postgres": {"conninfo": cluster.conninfo()}},
                            start=False)
        rc, out, err = d.run_cmd(["check"])
        assert rc == EXIT_USAGE, (rc, out, err)
        failed = failed_checks(out)
        assert any("wal_level" in " ".join(f[::2]) for f in failed), (out,
                                                                       err)
        d.start()
        assert d.wait(30) == 1, d.log_tail()
        assert "wal_level" in d.log_text(), d.log_tail()
    finally:
        cluster.destroy()


def test_check_reports_each_problem_once_in_its_table(broker,
                                                      outboxd_factory,
                                                      tmp_path):
    """With wal_level = replica and two bad [kafka] properties, `check`
    writes its table only: no log line on stderr beside it, each bad
    property named once (in the kafka settings line, not again as an
    unreachable broker), the server's refusal to make a slot shown as the
    plugin line's cause."""
    cluster = harness.PgCluster(str(tmp_path / "replica"),
                                wal_level="replica").start()
    try:
        cluster.run_file(str(SQL_DIR / "outbox.sql"))
        d = outboxd_factory({"postgres": {"conninfo": cluster.conninfo()},
                             "kafka": {"bogus.one": "1", "bogus.two": "2"},
                             "log": {"level": "info"}}, start=False)
        rc, out, err = d.run_cmd(["check"])
        text = "rc=%s\n%s\n--- stderr:\n%s" % (rc, out, err)
        assert rc == EXIT_USAGE, text
        assert err == "", text
        for word in ("bogus.one", "bogus.two"):
            assert sum(word in line for line in out.splitlines()) == 1, text
        failed = {name: detail for name, _, detail in failed_checks(out)}
        assert "bogus.one" in failed.get("kafka settings", ""), text
        assert "kafka" not in failed, text
        assert "wal_level" in failed, text
        assert "wal_level" in failed.get("wal2json", ""), text
    finally:
        cluster.destroy()


def test_check_fails_naming_kafka_when_broker_unreachable(pg,
                                                          outboxd_factory):
    d = outboxd_factory({"kafka": {"bootstrap.servers": "127.0.0.1:%d"
                                   % free_port()}}, start=False)
    rc, out, err = d.run_cmd(["check"])
    assert rc == EXIT_USAGE, (rc, out, err)
    failed = failed_checks(out)
    assert failed and all("kafka" in name for name, _, _ in failed), (out,
                                                                     err)


# ---------------------------------------------------------------------------
# sql/: DDL, least-privilege role, examples


def test_sql_files_and_least_privilege_role_stream(pg, broker, consumer,
                                                   outboxd_factory, test_id):
    """sql/outbox.sql, role.sql and examples.sql run cleanly on a fresh
    database; outboxd connected as the role streams every example event."""
    db = fresh_db(pg, "ops_sql_%s" % test_id, ("outbox.sql", "role.sql"))
    fresh_db(pg, db, ("outbox.sql", "role.sql"))  # idempotent
    role = pg.sql("SELECT rolreplication, rolsuper, rolcanlogin, "
                  "rolcreatedb, rolcreaterole, rolbypassrls FROM pg_roles "
                  "WHERE rolname = 'outboxd'")
    assert role == [(True, False, True, False, False, False)], role
    grants = pg.sql("SELECT table_schema, table_name, privilege_type FROM "
                    "information_schema.role_table_grants WHERE grantee = "
                    "'outboxd'", dbname=db)
    assert sorted(grants) == [("public", "outbox", "SELECT"),
                              ("public", "outboxd_held_events", "DELETE"),
                              ("public", "outboxd_held_events", "INSERT"),
                              ("public", "outboxd_held_events", "SELECT"),
                              ("public", "outboxd_held_events", "UPDATE"),
                              ("public", "outboxd_held_keys", "DELETE"),
                              ("public", "outboxd_held_keys", "INSERT"),
                              ("public", "outboxd_held_keys", "SELECT"),
                              ("public", "outboxd_held_keys", "UPDATE"),
                              ("public", "outboxd_slots", "DELETE"),
                              ("public", "outboxd_slots", "INSERT"),
                              ("public", "outboxd_slots", "SELECT"),
                              ("public", "outboxd_slots", "UPDATE")], grants
    prefix = "sqlfiles_%s" % test_id
    d = outboxd_factory({
        "postgres": {"conninfo": pg.conninfo(db, user="outboxd")},
        "outbox": {"topic": prefix + ".{aggregate_type}"}})
    assert_check_passes(d)
    row = wait_slot_active(pg, d.config["postgres"]["slot"])
    assert row["database"] == db
    pg.run_file(str(SQL_DIR / "examples.sql"), dbname=db)
    got = consumer.collect(prefix + ".order", min_count=5, timeout=30)
    types = sorted(header(r, "type").decode() for r in got)
    assert types == sorted(["order-noted", "order-archived", "created",
                            "created", "paid"]), got
    assert pg.sql("SELECT count(*) FROM public.outbox", dbname=db) == [(1,)]
    assert d.stop() == 0, d.log_tail()


def test_examples_run_twice_beside_the_applications_orders_table(pg,
                                                                  test_id):
    """sql/examples.sql on a database that has an `orders` table of its
    own (another shape): it runs to the end, twice, writing each run's
    events, and leaves the application's table alone."""
    db = fresh_db(pg, "ops_examples_%s" % test_id)
    pg.sql("CREATE TABLE public.orders (id bigint PRIMARY KEY, note text)",
           dbname=db)
    for run in (1, 2):
        pg.run_file(str(SQL_DIR / "examples.sql"), dbname=db)
        kept = pg.sql("SELECT event_type FROM public.outbox ORDER BY seq",
                      dbname=db)
        assert kept == [("order-archived",)] * run, kept
    assert pg.sql("SELECT count(*) FROM public.orders", dbname=db) == [(0,)]


# ---------------------------------------------------------------------------
# README configuration reference vs. src/config.c


def code_config_keys():
    """{section.key: default} of every row of config_keys[] in
    src/config.c."""
    src = CONFIG_C.read_text()
    m = re.search(r"config_keys\[\]\s*=\s*\{(.*?)\n\};", src, re.S)
    assert m, "config_keys[] not found in %s" % CONFIG_C
    rows = re.findall(r'\{\s*"(\w+)",\s*"([\w.]+)",([^\n]*)', m.group(1))
    keys = {}
    for section, key, rest in rows:
        default = re.search(r'"((?:[^"\\]|\\.)*)"\s*\}', rest)
        keys["%s.%s" % (section, key)] = default.group(1) if default else None
    assert len(keys) >= 15, keys
    return keys


def _section_marker(line):
    """The section a heading (`## [postgres]`) or a bold paragraph start
    (`**[kafka]**: ...`) introduces; "" for another heading; None if the
    line is neither."""
    h = re.match(r"^(#+\s+|\*\*)(.*)$", line)
    if not h:
        return None
    sm = re.match(r"^`?\[(\w+)\]", h.group(2).strip())
    if sm and sm.group(1) in SECTIONS:
        return sm.group(1)
    return "" if h.group(1).startswith("#") else None


def _cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def readme_config_keys(text):
    """{section.key: documented default or None} of every table row of
    README.md whose first cell names a setting: `section.key`, or `key`
    under a heading or bold paragraph naming [section]."""
    keys, section, default_col = {}, None, None
    for line in text.splitlines():
        marker = _section_marker(line)
        if marker is not None:
            section = marker or None
            continue
        if not re.match(r"^\s*\|", line):
            default_col = None
            continue
        cells = _cells(line)
        if default_col is None and "default" in [c.lower() for c in cells]:
            default_col = [c.lower() for c in cells].index("default")
            continue
        cell = re.sub(r"\s*=.*$", "", cells[0].strip("`*").strip())
        if not re.match(r"^[a-z_][a-z0-9_.]*$", cell):
            continue
        first = cell.split(".", 1)[0]
        if first in SECTIONS and "." in cell:
            name = cell
        elif section is not None:
            name = "%s.%s" % (section, cell)
        else:
            continue
        default = None
        if default_col is not None and default_col < len(cells):
            default = cells[default_col].strip()
            default = "" if default.startswith("(empty") or not default \
                else default.strip("`")
        keys[name] = default
    return keys


def test_readme_is_a_front_door():
    """README.md stays short (at most 200 lines) and opens with the two
    commands; each doc it links to exists, and every man page is in the
    tree."""
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) <= 200, "README.md has %d lines" % len(lines)
    assert lines[2:6] == [
        "```sh",
        "bash deploy/demo.sh     # the main job: outboxd between a throwaway "
        "Postgres and a local broker, events shown as they arrive",
        'bash tests/run.sh       # every test (unit, integration, real parts); '
        'ends with "N passed, N failed"',
        "```"], lines[:6]
    for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if not link.startswith("http"):
            assert (REPO_ROOT / link).exists(), link
    for page in ("outboxd.1", "outboxd.ini.5"):
        assert (DEPLOY_DIR / page).exists(), page


def test_readme_config_reference_matches_the_code():
    code = code_config_keys()
    assert CONFIG_REFERENCE.exists(), (
        "deploy/README.md is missing: it must document the configuration keys "
        "(a table with rows like `| postgres.conninfo | ... |`): %s"
        % sorted(code))
    documented = readme_config_keys(CONFIG_REFERENCE.read_text())
    assert documented, ("deploy/README.md has no configuration reference (table "
                        "rows like `| postgres.conninfo | ... |`)")
    undocumented = sorted(set(code) - set(documented))
    assert not undocumented, (
        "configuration keys in src/config.c missing from deploy/README.md's "
        "reference: %s" % undocumented)
    unknown = sorted(k for k in set(documented) - set(code)
                     if not k.startswith("kafka."))
    assert not unknown, ("deploy/README.md documents keys the code does not know: "
                         "%s" % unknown)
    assert "kafka.bootstrap.servers" in documented, sorted(documented)
    wrong = {k: (documented[k], code[k]) for k in code
             if documented[k] is not None and documented[k] != code[k]}
    assert not wrong, ("deploy/README.md's defaults differ from src/config.c's "
                       "(deploy/README.md, code): %s" % wrong)


# ---------------------------------------------------------------------------
# deploy/


def assert_config_loads(args, broker):
    """`outboxd check ARGS` runs its checks (Postgres unreachable, the
    broker up): no configuration error, only the postgres check fails."""
    r = run_outboxd(["check"] + list(args)
                    + ["-s", "postgres.conninfo=" + closed_port_conninfo(),
                       "-s", "kafka.bootstrap.servers=" + broker.bootstraps],
                    timeout=60)
    for bad in ("unknown configuration key", "invalid value",
                "could not parse", "invalid kafka", "cannot be changed"):
        assert bad not in r.stderr, describe(r)
    assert r.returncode == EXIT_USAGE, describe(r)
    failed = failed_checks(r.stdout)
    assert [f[0] for f in failed] == ["postgres"], describe(r)


def test_deploy_sample_config_loads(broker):
    assert_config_loads(["-c", str(DEPLOY_DIR / "outboxd.ini")], broker)


def test_deploy_compose_and_kubernetes_parse_and_their_configs_load(
        broker, tmp_path):
    compose = yaml.safe_load((DEPLOY_DIR / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"postgres", "kafka", "outboxd"} <= set(services), services
    cmd = [str(a) for a in services["outboxd"]["command"]]
    assert cmd[0] == "run", cmd
    sets = [a for i, a in enumerate(cmd) if i and cmd[i - 1] == "-s"]
    assert_config_loads(["-c", str(DEPLOY_DIR / "outboxd.ini")]
                        + [x for s in sets for x in ("-s", s)], broker)

    docs = [d for d in yaml.safe_load_all(
        (DEPLOY_DIR / "kubernetes.yaml").read_text()) if d]
    kinds = {d["kind"]: d for d in docs}
    assert {"ConfigMap", "Deployment"} <= set(kinds), list(kinds)
    ini = kinds["ConfigMap"]["data"]["outboxd.ini"]
    path = write_config(tmp_path / "k8s.ini", ini)
    assert_config_loads(["-c", path], broker)
    container = kinds["Deployment"]["spec"]["template"]["spec"][
        "containers"][0]
    assert container["args"][0] == "run", container


def unit_settings(text):
    """{(section, key): [values]} of a systemd unit file."""
    out, section = {}, None
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        m = re.match(r"^\[(\w+)\]$", line)
        if m:
            section = m.group(1)
            continue
        key, sep, value = line.partition("=")
        assert sep and section, "bad unit line %r" % line
        out.setdefault((section, key.strip()), []).append(value.strip())
    return out


def test_man_pages_name_files_meson_installs():
    """Every /usr/share/outboxd path the man pages name is a file `meson
    install` installs there (with --prefix=/usr), and every SQL file of
    sql/ is installed (meson introspect of the build under test)."""
    r = subprocess.run(["meson", "introspect", str(BUILD_DIR), "--installed"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, describe(r)
    installed = {re.sub(r"^.*?/share/", "/usr/share/", dest): src
                 for src, dest in json.loads(r.stdout).items()}
    pages = "".join((DEPLOY_DIR / name).read_text()
                    for name in ("outboxd.1", "outboxd.ini.5"))
    named = set(re.findall(r"/usr/share/outboxd/[\w./]*\w", pages))
    assert "/usr/share/outboxd/outboxd.ini" in named, named
    for path in named:  # a file, or a folder files are installed in
        assert path in installed or any(p.startswith(path + "/")
                                        for p in installed), \
            (path, sorted(installed))
    for sql in SQL_DIR.glob("*.sql"):
        assert installed.get("/usr/share/outboxd/sql/" + sql.name) == \
            str(sql), (sql, sorted(installed))


def test_systemd_unit_verifies():
    """Type=notify (deploy/README.md, "systemd") running `outboxd run`,
    reloaded with SIGHUP; `systemd-analyze
    verify` (where installed) complains of nothing but the binary not being
    installed at /usr/bin/outboxd."""
    path = DEPLOY_DIR / "outboxd.service"
    unit = unit_settings(path.read_text())
    assert unit.get(("Service", "Type")) == ["notify"], unit
    exec_start = unit[("Service", "ExecStart")][-1].split()
    assert exec_start[0].endswith("/outboxd") and exec_start[1] == "run", \
        exec_start
    # `systemctl reload` sends SIGHUP (test_reload.py).
    assert unit.get(("Service", "ExecReload")) == \
        ["/bin/kill -HUP $MAINPID"], unit
    assert ("Install", "WantedBy") in unit, unit
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        return  # optional tool (package systemd), not a test dependency
    r = subprocess.run([analyze, "verify", str(path)], capture_output=True,
                       text=True, timeout=60)
    complaints = [line for line in (r.stdout + r.stderr).splitlines()
                  if line.strip() and "/usr/bin/outboxd" not in line]
    assert not complaints, describe(r)


@pytest.mark.no_sanitizers
def test_watchdog_pinged_while_waiting_for_queue_room(
        pg, broker, outboxd_factory, slot_name, test_id, tmp_path):
    """Under systemd with WatchdogSec, a Kafka outage that fills the queue
    must not starve the watchdog (systemd would kill outboxd). Once the
    queue is full (5 records in flight), each of two 3 s windows gets a
    ping (outboxd pings each second with WATCHDOG_USEC 2 s; a starved
    watchdog gets none), and the queue is still full after them."""
    sock_path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(sock_path)
    os.chmod(sock_path, 0o777)
    sock.settimeout(0.2)
    agg = "wd_%s" % test_id
    make_topic(broker, agg)
    port = free_port()
    outboxd_factory(http_overrides(
        port, kafka={"queue.buffering.max.messages": "5"}),
        env={"NOTIFY_SOCKET": sock_path, "WATCHDOG_USEC": "2000000"})
    wait_streaming(pg, slot_name)

    def pings(seconds):
        n, end = 0, time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                n += sock.recv(4096).count(b"WATCHDOG=1")
            except socket.timeout:
                pass
        return n

    def inflight():
        return scrape(port).get("outboxd_inflight_events", 0)

    broker.cmd("down all")
    try:
        Feed(pg, agg).commit(30)
        wait_until(lambda: inflight() >= 5, 30, 0.1, "the queue full")
        while True:  # what came before the queue was full
            try:
                sock.recv(4096)
            except socket.timeout:
                break
        windows = [pings(3), pings(3)]
        assert inflight() >= 5, "the queue had room again"
        assert all(n >= 1 for n in windows), (
            "watchdog pings in two 3 s windows: %r" % windows)
    finally:
        broker.cmd("up all")
        sock.close()


# What src/http.c promises: one client address holds at most this many
# connections, a connection idle this long is closed, and at most
# HEAD_WAIT_LIMIT connections wait for a request head.
PER_CLIENT_LIMIT = 8


IDLE_TIMEOUT_S = 5


HEAD_WAIT_LIMIT = 96


FLOOD = 1000


# The flood comes from another loopback address than the probes, as an
# attacker's connections come from another address than the kubelet's.
FLOOD_SOURCE = "127.0.0.2"


HALF_REQUEST = b"GET /metrics HTTP/1.1\r\nHost: outboxd\r\n"


# One more line of a request head that never ends: a connection sent it is
# not idle.
HEAD_LINE = b"X-Pad: 1\r\n"


class Flood:
    """Idle connections to 127.0.0.1:port from FLOOD_SOURCE, each sent half
    a request; the ones the server closed are dropped by prune()."""

    def __init__(self, port):
        self.port = port
        self.conns = []
        self.opened = 0

    def add(self, n):
        """Opens n more connections (some may be refused or closed at
        once: prune() finds those)."""
        for _ in range(n):
            self.opened += 1
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind((FLOOD_SOURCE, 0))
                s.settimeout(1.0)
                s.connect(("127.0.0.1", self.port))
                s.sendall(HALF_REQUEST)
                s.setblocking(False)
                self.conns.append(s)
            except OSError:
                s.close()

    def prune(self, keep_busy=False):
        """Closes the connections the server closed; returns how many it
        still holds. The server never answers half a request, so a
        connection that reads anything (EOF, a reset) was closed. With
        keep_busy, each one still held is sent HEAD_LINE: the idle timeout
        cannot be what closes it before the next call (sooner than
        IDLE_TIMEOUT_S)."""
        alive = []
        for s in self.conns:
            try:
                closed = s.recv(1, socket.MSG_PEEK) == b""
            except BlockingIOError:
                closed = False
            except OSError:
                closed = True
            if not closed and keep_busy:
                try:
                    s.send(HEAD_LINE)
                except OSError:
                    closed = True
            if closed:
                s.close()
            else:
                alive.append(s)
        self.conns = alive
        return len(alive)

    def close(self):
        for s in self.conns:
            s.close()
        self.conns = []


def test_metrics_port_answers_probes_under_idle_connection_flood(
        pg, broker, consumer, outboxd_factory, test_id):
    """1,000 connections from one address, each sent half a request, and
    more coming: /healthz and /readyz (asked from another address) answer
    200 all along, the stream publishes, the server holds at most
    PER_CLIENT_LIMIT of the flood's connections and closes those once
    idle for IDLE_TIMEOUT_S.

    Nothing here depends on the machine's speed: the flood's connections
    are kept busy (a header line each half second) while the test waits
    for the server to hold at most PER_CLIENT_LIMIT, so only the
    per-address limit can close them (without it the server holds its
    whole table, 128, for as long as they are busy); the probes' latency
    is printed, not asserted (tests/bench measures speed), and a probe
    the flood shuts out gets no answer at all, which fails."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = FLOOD + 256
    if hard != resource.RLIM_INFINITY and hard < need:
        raise harness.HarnessError("the flood needs %d open files; the hard "
                                   "limit is %d" % (need, hard))
    if soft != resource.RLIM_INFINITY and soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    port = free_port()
    agg = "flood_%s" % test_id
    d = outboxd_factory(http_overrides(port))
    wait_http(port, "/readyz", 200, "ready", daemon=d)

    flood = Flood(port)
    try:
        flood.add(FLOOD)
        # One address holds no more than its share: the rest are closed
        # by the limit, not by the idle timeout (they are kept busy).
        wait_until(lambda: flood.prune(keep_busy=True) <= PER_CLIENT_LIMIT,
                   60, 0.5,
                   "at most %d flood connections held" % PER_CLIENT_LIMIT)

        # Probes all along while the flood goes on (50 more connections a
        # round, 40 rounds at most), and the stream publishes meanwhile.
        commit_events(pg, "postgres", agg, 5)
        slowest = 0.0
        deadline = time.monotonic() + IDLE_TIMEOUT_S + 3
        rounds = 0
        while time.monotonic() < deadline and rounds < 40:
            rounds += 1
            flood.add(50)
            for path, word in (("/healthz", "ok"), ("/readyz", "ready")):
                t0 = time.monotonic()
                status, body = http_get(port, path, timeout=10.0)
                slowest = max(slowest, time.monotonic() - t0)
                assert status == 200 and word in body, (
                    "%s answered %r %r during the flood (round %d, %d "
                    "connections opened)" % (path, status, body, rounds,
                                             flood.opened))
            time.sleep(0.1)
        print("slowest probe during the flood: %.3f s" % slowest)
        got = consumer.collect("outbox.event.%s" % agg, min_count=5,
                               timeout=30, settle=0.2)
        assert len(got) == 5, got

        # Connections left idle are closed by the server.
        wait_until(lambda: flood.prune() == 0, 6 * IDLE_TIMEOUT_S, 0.2,
                   "the server closed every idle flood connection")
    finally:
        flood.close()
    status, body = http_get(port, "/readyz")
    assert status == 200 and "ready" in body, (status, body)
    assert d.stop() == 0, d.log_tail()
