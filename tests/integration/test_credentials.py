"""Integration tests of short-lived credentials (deploy/README.md,
"Short-lived credentials"): postgres.password_command runs before every
connection, so a password rotated while outboxd streams costs a
reconnect at most, never the stream; a command that fails, hangs or
prints nothing is an error naming it, retried, and `check` reports it;
kafka_auth.token_command feeds librdkafka's OAUTHBEARER token refresh.

The Postgres tests use a cluster of this module whose pg_hba.conf asks
the test role for a scram-sha-256 password. The test broker (librdkafka
2.0.2's mock cluster) has no SASL: a client asking it for OAUTHBEARER
never authenticates, so the Kafka tests show what outboxd does up to the
broker (the command runs at client creation and again before the token
expires, its output is never logged) and tests/README.md says what stays
untested."""

import os
import re
import stat
import time

import pytest

import harness
from conftest import OUTBOX_SQL, OUTBOXD_BIN
from harness import free_port, wait_until
from test_cli import EXIT_USAGE
from test_ops import (check_lines, commit_events, failed_checks,
                      http_overrides, wait_http)

ROLE = "ob_rot"

PG_HBA = """local all all trust
host all postgres 127.0.0.1/32 trust
host all %s 127.0.0.1/32 scram-sha-256
""" % ROLE


@pytest.fixture(scope="module")
def auth_pg(tmp_path_factory):
    """A cluster where ROLE logs in with a password only."""
    cluster = harness.PgCluster(str(tmp_path_factory.mktemp("auth-pg")))
    try:
        with open(os.path.join(cluster.datadir, "pg_hba.conf"), "w") as f:
            f.write(PG_HBA)
        cluster.start()
        cluster.run_file(str(OUTBOX_SQL))
        for stmt in ("CREATE ROLE %s LOGIN REPLICATION PASSWORD 'pw-start'"
                     % ROLE,
                     "GRANT SELECT ON public.outbox TO %s" % ROLE,
                     "GRANT SELECT, INSERT, UPDATE, DELETE ON public.outboxd_slots "
                     "TO %s" % ROLE):
            cluster.sql(stmt)
        yield cluster
    finally:
        cluster.destroy()


def write_script(path, body):
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


def count_lines(path):
    try:
        with open(path) as f:
            return len(f.read().splitlines())
    except FileNotFoundError:
        return 0


def write_secret(path, text):
    """Replaces the file in one rename: the command never reads half."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def password_overrides(pg, port, command, test_id, **postgres):
    """outboxd as ROLE, without a password in the conninfo, with the
    pgoutput publication made beforehand (ROLE may not make one)."""
    pg.sql("DROP PUBLICATION IF EXISTS pub_%s" % test_id)
    pg.sql("CREATE PUBLICATION pub_%s FOR TABLE public.outbox WITH "
           "(publish = 'insert', publish_via_partition_root = true)"
           % test_id)
    settings = {"conninfo": "host=127.0.0.1 port=%d dbname=postgres user=%s"
                            % (pg.port, ROLE),
                "password_command": command,
                "reconnect_max_backoff_ms": 500}
    settings.update(postgres)
    return http_overrides(port, postgres=settings)


def terminate_backends(pg):
    """Ends every session of ROLE (the walsender and the plain ones);
    returns how many there were."""
    return pg.sql("SELECT count(pg_terminate_backend(pid)) FROM "
                  "pg_stat_activity WHERE usename = %s", (ROLE,))[0][0]


def test_password_rotated_while_streaming(auth_pg, broker, consumer,
                                          outboxd_factory, slot_name,
                                          test_id, tmp_path):
    """The password changes every few seconds and outboxd's sessions are
    ended after each change: outboxd reconnects with the command's new
    password each time (and after a refusal, when the server's password
    changed before the command's), publishes every event, keeps running,
    and never logs a password."""
    pg = auth_pg
    secret = str(tmp_path / "password")
    calls = str(tmp_path / "calls")
    write_secret(secret, "pw-start")
    script = write_script(str(tmp_path / "getpw.sh"),
                          'echo "$PGHOST $PGPORT $PGUSER $PGDATABASE" >> %s\n'
                          'cat %s\n' % (calls, secret))
    port = free_port()
    d = outboxd_factory(password_overrides(pg, port, script, test_id))
    wait_http(port, "/readyz", 200, "ready", daemon=d)
    with open(calls) as f:
        assert f.readline().split() == ["127.0.0.1", str(pg.port), ROLE,
                                        "postgres"]

    agg = "rot_%s" % test_id
    passwords = ["pw-start"]
    commit_events(pg, "postgres", agg, 5)
    for i in range(4):
        pw = "pw-%d-%s" % (i, os.urandom(6).hex())
        passwords.append(pw)
        before = count_lines(calls)
        pg.sql("ALTER ROLE %s PASSWORD '%s'" % (ROLE, pw))
        if i % 2 == 1:
            # The server's password changed and the command's not yet:
            # the reconnect is refused until the file catches up.
            since = d.log_size()
            assert terminate_backends(pg) >= 1
            d.wait_log(r"password authentication failed.*refused "
                       r"\(password\): the server rejected the password "
                       r"postgres\.password_command gave for role",
                       timeout=20, since=since)
            write_secret(secret, pw)
        else:
            write_secret(secret, pw)
            assert terminate_backends(pg) >= 1
        wait_until(lambda: count_lines(calls) > before, 20, 0.1,
                   "the command runs again for the reconnect")
        wait_http(port, "/readyz", 200, "ready", timeout=30, daemon=d)
        commit_events(pg, "postgres", agg, 5)
        time.sleep(1)

    got = consumer.collect("outbox.event.%s" % agg, min_count=25, timeout=60,
                           settle=0.5)
    ids = {harness.header(r, "id") for r in got}
    assert len(ids) == 25, sorted(ids)  # every event, from every round
    assert d.running(), d.log_tail()
    # One run per connection: at least the first ones and one per round.
    assert count_lines(calls) >= 1 + 4, count_lines(calls)

    rc, out, err = d.run_cmd(["check"])
    results, _ = check_lines(out)
    auth = [r for r in results if r[0] == "postgres auth"]
    assert len(auth) == 1 and auth[0][1], (out, err)
    assert re.match(r"postgres\.password_command gave a password in \d+ ms; "
                    r"the server accepted it$", auth[0][2]), auth[0]

    assert d.stop() == 0, d.log_tail()
    text = d.log_text() + out + err
    for pw in passwords:
        assert pw not in text, "password %s in the log" % pw
    pg.drop_slot(slot_name)


FAILING = [
    ("false", "false", {}, r'\("false"\) exited with status 1'),
    ("stdout-then-exit", "printf leaked-pw-1234; exit 3", {},
     r'\("printf"\) exited with status 3'),
    ("hangs", "sleep 60", {"credential_timeout_ms": 1000},
     r'\("sleep"\) timed out after 1000 ms and was killed'),
    ("prints-nothing", "true", {},
     r'\("true"\) exited with status 0 but printed nothing'),
]


@pytest.mark.parametrize("case", FAILING, ids=[c[0] for c in FAILING])
def test_failing_password_command_is_retried(auth_pg, broker,
                                             outboxd_factory, test_id,
                                             case):
    """A command that fails, hangs or prints nothing: an error naming the
    command and its exit status, retried with the reconnect backoff,
    never a crash nor a connection without a password; `check` reports
    it."""
    _, command, extra, said = case
    pg = auth_pg
    port = free_port()
    d = outboxd_factory(password_overrides(pg, port, command, test_id,
                                           **extra))
    pat = (r"could not get a password for postgres: "
           r"postgres\.password_command " + said + "; retrying")
    wait_until(lambda: len(re.findall(pat, d.log_text())) >= 3, 30, 0.2,
               "outboxd retries the command")
    assert d.running(), d.log_tail()
    wait_http(port, "/readyz", 503, "connecting", daemon=d)
    assert pg.sql("SELECT count(*) FROM pg_stat_activity WHERE usename = %s",
                  (ROLE,))[0][0] == 0

    t0 = time.monotonic()
    rc, out, err = d.run_cmd(["check"])
    assert rc == EXIT_USAGE, (rc, out, err)
    failed = failed_checks(out)
    auth = [r for r in failed if r[0] == "postgres auth"]
    assert len(auth) == 1, (out, err)
    assert re.match(r"postgres\.password_command " + said, auth[0][2]), auth
    assert time.monotonic() - t0 < 30
    assert d.stop() == 0, d.log_tail()
    assert "leaked-pw-1234" not in d.log_text() + out + err


def test_hanging_password_command_keeps_outboxd_alive_and_stoppable(
        auth_pg, broker, outboxd_factory, test_id):
    """While a password command hangs (here for up to 60 s), /healthz stays
    200 (the loop's heartbeat goes on) and SIGTERM stops outboxd at once,
    killing the command, rather than after the command's timeout."""
    port = free_port()
    d = outboxd_factory(password_overrides(auth_pg, port, "sleep 60",
                                           test_id,
                                           credential_timeout_ms=60000))
    wait_http(port, "/readyz", 503, "connecting", daemon=d)
    time.sleep(12)  # longer than /healthz's 10 s stall limit
    wait_http(port, "/healthz", 200, "ok", timeout=1, daemon=d)
    t0 = time.monotonic()
    assert d.stop() == 0, d.log_tail()
    assert time.monotonic() - t0 < 5, time.monotonic() - t0


# ---------------------------------------------------------------------------
# kafka_auth.token_command


def token_script(tmp_path, lifetime_ms, body=None):
    """A token command that counts its runs in tmp_path/token-calls and
    prints a token that lives lifetime_ms."""
    calls = str(tmp_path / "token-calls")
    body = body or ('printf \'{"token": "tok-%%s", "lifetime_ms": %d, '
                    '"principal": "outboxd"}\\n\' "$(date +%%s%%N)"\n'
                    % lifetime_ms)
    return write_script(str(tmp_path / "token.sh"),
                        "date +%%s.%%N >> %s\n%s" % (calls, body)), calls


def oauth_overrides(port, command):
    return http_overrides(
        port, kafka={"security.protocol": "SASL_PLAINTEXT",
                     "sasl.mechanism": "OAUTHBEARER"},
        kafka_auth={"method": "command", "token_command": command})


def test_token_command_runs_at_start_and_before_expiry(
        pg, broker, outboxd_factory, tmp_path):
    """The token command runs when the producer's client starts and again
    before each token expires (librdkafka refreshes at 80% of lifetime_ms,
    on a timer of 1 s): with 3 s tokens, every 2.4 to 3.5 s. Its output is
    never logged; `check` prints the kafka auth line."""
    command, calls = token_script(tmp_path, 3000)
    d = outboxd_factory(oauth_overrides(free_port(), command))
    wait_until(lambda: count_lines(calls) >= 3, 20, 0.1,
               "the token command runs at start and twice more")
    with open(calls) as f:
        runs = [float(t) for t in f.read().split()]
    gaps = [b - a for a, b in zip(runs, runs[1:])]
    assert all(2.0 <= g <= 3.6 for g in gaps[:2]), gaps
    assert d.running(), d.log_tail()
    assert "could not get a kafka token" not in d.log_text()

    rc, out, err = d.run_cmd(["check"])
    results, _ = check_lines(out)
    auth = [r for r in results if r[0] == "kafka auth"]
    # The mock broker takes no SASL: the token is made, never accepted.
    assert len(auth) == 1 and not auth[0][1], (out, err)
    assert re.match(r"kafka_auth\.token_command gave a token for outboxd "
                    r"\(lifetime 3000 ms\) in \d+ ms; no broker took it",
                    auth[0][2]), auth
    assert d.stop() == 0, d.log_tail()
    assert "tok-" not in d.log_text() + out + err


def test_bad_token_command_is_logged_without_its_output(
        pg, broker, outboxd_factory, tmp_path):
    """A token command whose output is no token object: the error says
    what is wrong without quoting it, librdkafka asks again (every 10 s),
    outboxd keeps running."""
    command, calls = token_script(tmp_path, 0,
                                  body="echo secret-not-json-5678\n")
    d = outboxd_factory(oauth_overrides(free_port(), command))
    d.wait_log(r"could not get a kafka token: what kafka_auth\.token_command "
               r"printed is not a JSON object \(line 1, column \d+\); "
               r"retrying in 10 s", timeout=20)
    assert d.running(), d.log_tail()
    assert d.stop() == 0, d.log_tail()
    assert "secret-not-json-5678" not in d.log_text()


def test_token_command_needs_oauthbearer(pg, broker, outboxd_factory,
                                         tmp_path):
    """kafka_auth.method = command without kafka.sasl.mechanism =
    OAUTHBEARER is a configuration error naming both."""
    command, _ = token_script(tmp_path, 3000)
    d = outboxd_factory({"kafka_auth": {"method": "command",
                                        "token_command": command}},
                        start=False)
    rc, out, err = d.run_cmd(["check"])
    assert rc == EXIT_USAGE, (rc, out, err)
    assert "kafka_auth.method = command needs kafka.sasl.mechanism = " \
           "OAUTHBEARER (it is unset)" in err, err


# ---------------------------------------------------------------------------
# outboxd inbox: the same settings


def test_inbox_connects_with_the_password_command(auth_pg, broker, test_id,
                                                  tmp_path):
    """`outboxd inbox` takes its password from postgres.password_command
    too, with the inbox database in PGDATABASE, and runs it again when
    its session is ended: every record is stored once."""
    from test_inbox import Feed, InboxEnv, assert_exactly_once
    env = InboxEnv(None, broker, test_id, tmp_path, cluster=auth_pg)
    env.sql("GRANT SELECT, INSERT ON TABLE public.inbox TO %s" % ROLE)
    env.sql("GRANT SELECT, INSERT, UPDATE ON TABLE "
            "public.outboxd_inbox_offsets TO %s" % ROLE)
    auth_pg.sql("ALTER ROLE %s PASSWORD 'pw-inbox'" % ROLE)
    calls = str(tmp_path / "calls")
    script = write_script(str(tmp_path / "getpw.sh"),
                          'echo "$PGDATABASE" >> %s\necho pw-inbox\n' % calls)
    feed = Feed(broker, env.topic)
    ids = feed.events(30)
    feed.flush()
    try:
        d = env.start(inbox_conninfo="host=127.0.0.1 port=%d dbname=%s user=%s"
                      % (auth_pg.port, env.db, ROLE),
                      postgres_password_command=script)
        wait_until(lambda: env.rows() == 30, 60, 0.2, "the inbox stores")
        before = count_lines(calls)
        assert terminate_backends(auth_pg) >= 1
        ids += feed.events(30)
        feed.flush()
        assert_exactly_once(env, ids)
        assert count_lines(calls) > before
        with open(calls) as f:
            assert set(f.read().split()) == {env.db}
        assert d.running(), d.log_tail()
    finally:
        env.stop_all()


def test_inbox_consumer_runs_the_token_command(pg, broker, test_id,
                                               tmp_path):
    """The inbox's consumer gets its OAUTHBEARER tokens from the token
    command as the producer does."""
    from test_inbox import InboxEnv
    env = InboxEnv(pg, broker, test_id, tmp_path)
    command, calls = token_script(tmp_path, 3000)
    try:
        cfg = env.config()
        cfg["kafka"].update({"security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "OAUTHBEARER"})
        cfg["kafka_auth"] = {"method": "command", "token_command": command}
        d = harness.Outboxd(OUTBOXD_BIN, cfg, str(tmp_path / "inbox"),
                            command="inbox")
        env.instances.append(d)
        wait_until(lambda: count_lines(calls) >= 2, 20, 0.1,
                   "the token command runs at start and again")
        assert d.running(), d.log_tail()
        assert "tok-" not in d.log_text()
    finally:
        env.stop_all()
