"""Integration tests of the inbox's consumer group when inbox.group is left
out (sql/README.md, "The inbox tables"): it is derived from the inbox's
database (as the server names it) and table,
outboxd-inbox.<database>.<schema>.<table>, so two receiving services
reading one topic each get every event, while the instances of one inbox
share their group; an inbox upgraded from the old default group
(outboxd-inbox) takes its stored positions over, reading nothing again
and skipping nothing."""

import re
import subprocess

import pytest

import harness
from conftest import BROKER_BIN, OUTBOXD_BIN
from harness import wait_until
from test_inbox import (INBOX_SQL, Feed, InboxEnv, assert_exactly_once,
                        inbox_env)

assert inbox_env  # a fixture, used by name


def derived(env, db, name):
    """An outboxd inbox of env's topic into database db with inbox.group
    left out (not started)."""
    cfg = env.config(inbox_conninfo=env.pg.conninfo(db))
    del cfg["inbox"]["group"]
    d = harness.Outboxd(OUTBOXD_BIN, cfg, str(env.tmpdir / name),
                        command="inbox", start=False)
    env.instances.append(d)
    return d


def ids_in(env, db):
    return {r[0] for r in env.pg.sql("SELECT id FROM public.inbox",
                                     dbname=db)}


def group_line(d):
    """`check`'s inbox group line: (ok, detail)."""
    rc, out, err = d.run_cmd(["check"])
    m = re.search(r"^inbox group\s+(ok|FAIL)\s+(.*)$", out, re.M)
    assert m, (out, err)
    return m.group(1) == "ok", m.group(2)


def test_two_inboxes_with_default_groups_each_store_every_event(inbox_env,
                                                                broker):
    """Two receiving services, each with its own database and the default
    settings, read one topic: each stores every event. (Before, both
    joined the consumer group outboxd-inbox and split the topic's
    partitions: each stored only part of the events, silently.) `check`
    prints the group each one uses."""
    env = inbox_env()
    other = env.db + "_b"
    env.pg.create_db(other)
    env.pg.run_file(INBOX_SQL, other)
    feed = Feed(broker, env.topic)
    first = feed.events(200)
    feed.flush()
    inboxes = [derived(env, db, "inbox-" + db) for db in (env.db, other)]
    for d in inboxes:
        d.start()
    for db in (env.db, other):
        wait_until(lambda: ids_in(env, db) == set(first), 90, 0.2,
                   "%s stores the first 200 events" % db)
    more = feed.events(50)
    feed.flush()
    for db in (env.db, other):
        wait_until(lambda: ids_in(env, db) == set(first + more), 60, 0.2,
                   "%s stores all 250 events" % db)
    for d, db in zip(inboxes, (env.db, other)):
        ok, detail = group_line(d)
        assert ok and detail.startswith(
            "outboxd-inbox.%s.public.inbox (derived" % db), detail
        assert "consumer group outboxd-inbox.%s.public.inbox" % db in \
            d.log_text(), d.log_tail()
        assert d.running(), d.log_tail()


def test_default_group_takes_over_the_old_default_groups_positions(
        inbox_env, broker):
    """An inbox that stored its positions under outboxd-inbox (the default
    of earlier versions) is started again with inbox.group still left out:
    `check` says the derived group takes those positions over, and the
    inbox resumes from them, reading none of the stored events again
    (their rows were deleted, and stay deleted) and storing every new
    one; the old group's rows are left as they were."""
    env = inbox_env()
    feed = Feed(broker, env.topic)
    first = feed.events(100)
    feed.flush()
    old = env.start(inbox_group="outboxd-inbox")
    wait_until(lambda: env.rows() == 100, 60, 0.2, "100 rows")
    hw = env.high_watermarks()
    old_stored = {p: n for p, n in hw.items() if n > 0}
    env.group = "outboxd-inbox"
    wait_until(lambda: env.stored() == old_stored, 30, 0.2)
    assert old.stop() == 0, old.log_tail()
    env.sql("DELETE FROM public.inbox")

    d = derived(env, env.db, "inbox-upgraded")
    ok, detail = group_line(d)
    assert ok and "takes over the positions stored under outboxd-inbox" \
        in detail, detail
    d.start()
    d.wait_log("took over the %d positions stored under outboxd-inbox"
               % len(old_stored), 30)
    second = feed.events(50)
    feed.flush()
    wait_until(lambda: env.rows() == 50, 60, 0.2, "50 new rows")
    env.group = "outboxd-inbox.%s.public.inbox" % env.db
    env.wait_consumed()
    assert ids_in(env, env.db) == set(second)
    assert not set(first) & ids_in(env, env.db)
    env.group = "outboxd-inbox"
    assert env.stored() == old_stored
    assert d.running(), d.log_tail()


@pytest.fixture(scope="module")
def broker_without_joingroup_v0(tmp_path_factory):
    """A broker that offers JoinGroup v2 to v9 only, as Apache Kafka 4.0.0
    does (KIP-896 removed v0 and v1; 4.0.1 and 4.1.0 brought them back,
    KAFKA-19444)."""
    logdir = tmp_path_factory.mktemp("broker-kafka-4.0.0")
    b = harness.MockBroker(BROKER_BIN, brokers=1,
                           logfile=str(logdir / "ob-mockbroker.log"))
    try:
        assert b.cmd("apiversion 11 2 9") == "ok"
        yield b
    finally:
        b.stop()


# A second broker: under AddressSanitizer the two mock clusters look like
# one (tests/run.sh), and the point here is the protocol, not memory.
@pytest.mark.no_sanitizers
def test_inbox_joins_a_broker_without_joingroup_v0(
        pg, broker_without_joingroup_v0, test_id, tmp_path):
    """librdkafka before 2.11 (Debian 12's 2.0.2 among them) counts a
    broker without JoinGroup v0 as one without balanced consumer groups
    (with debug=feature it logs "Disabling feature BrokerBalancedConsumer"),
    yet its consumer joins the group with JoinGroup v2 and later all the
    same: `outboxd inbox` is assigned the topic's partitions and stores
    every record once. (Kerberos is what breaks there: its feature needs
    JoinGroup v0 too; deploy/README.md, "Kafka versions".)"""
    env = InboxEnv(pg, broker_without_joingroup_v0, test_id, tmp_path)
    try:
        feed = Feed(broker_without_joingroup_v0, env.topic)
        ids = feed.events(50)
        feed.flush()
        env.start()
        assert_exactly_once(env, ids)
    finally:
        env.stop_all()


def fit_line(env, name, **kafka):
    """`check`'s kafka fit line for env's configuration with the [kafka]
    properties kafka (underscores for dots): (ok, detail)."""
    cfg = env.config()
    for key, value in kafka.items():
        cfg["kafka"][key.replace("_", ".")] = value
    d = harness.Outboxd(OUTBOXD_BIN, cfg, str(env.tmpdir / name),
                        command="inbox", start=False)
    rc, out, err = d.run_cmd(["check"])
    m = re.search(r"^kafka fit\s+(ok|FAIL)\s+(.*)$", out, re.M)
    assert m, (out, err)
    return m.group(1) == "ok", m.group(2)


# Kerberos as librdkafka is configured for it, without a KDC: no kinit
# runs (min.time.before.relogin 0), and the features are decided before
# any authentication.
KERBEROS = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "GSSAPI",
            "sasl_kerberos_min_time_before_relogin": "0"}


def librdkafka_version():
    out = subprocess.run([OUTBOXD_BIN, "--version"], capture_output=True,
                         text=True, check=True).stdout
    m = re.search(r"^librdkafka (\d+)\.(\d+)", out, re.M)
    assert m, out
    return int(m.group(1)), int(m.group(2))


@pytest.mark.no_sanitizers
def test_check_says_whether_librdkafka_and_the_brokers_fit(
        pg, broker, broker_without_joingroup_v0, test_id, tmp_path):
    """`check` prints a `kafka fit` line from the protocol features the
    linked librdkafka enabled for the brokers it talked to: with a broker
    that offers JoinGroup v0 everything fits; with one that does not (as
    Apache Kafka 4.0.0) the inbox still fits (it joins with later
    JoinGroup versions: test_inbox_joins_a_broker_without_joingroup_v0)
    and the line says so, but Kerberos does not before librdkafka 2.11,
    where neither daemon could authenticate: the line fails and says
    what to change. From 2.11 both fit there."""
    version = librdkafka_version()
    plain = InboxEnv(pg, broker, test_id, tmp_path / "plain")
    ok, detail = fit_line(plain, "fits")
    # "and the others it talked to" when the probe reached more than one
    # of the 3 brokers before it ended, which is a matter of timing.
    assert ok and re.search(r"fits broker \S+( and the others it talked "
                            r"to)?: idempotent producer, consumer groups$",
                            detail), detail
    ok, detail = fit_line(plain, "fits-kerberos", **KERBEROS)
    assert ok and "consumer groups, Kerberos" in detail, detail

    v4 = InboxEnv(pg, broker_without_joingroup_v0, test_id, tmp_path / "v4")
    ok, detail = fit_line(v4, "no-v0")
    kerberos_ok, kerberos_detail = fit_line(v4, "no-v0-kerberos", **KERBEROS)
    if version >= (2, 11):
        # JoinGroup v2 to v9 serve both (a range, not v0 exactly).
        assert ok and detail.endswith(": idempotent producer, consumer groups"), detail
        assert kerberos_ok and kerberos_detail.endswith("consumer groups, Kerberos"), \
            kerberos_detail
        return
    assert ok and "offers no JoinGroup v0" in detail \
        and "outboxd inbox joins with the later JoinGroup versions" \
        in detail, detail
    assert not kerberos_ok, kerberos_detail
    assert "did not enable Kerberos" in kerberos_detail \
        and "use librdkafka 2.11 or later" in kerberos_detail, kerberos_detail
