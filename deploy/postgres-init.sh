#!/bin/sh
# Init script for the postgres service of deploy/docker-compose.yml, run once
# when the data directory is created, after sql/outbox.sql and sql/role.sql
# (mounted as 10-outbox.sql and 20-role.sql). It gives the outboxd role the
# password from OUTBOXD_DB_PASSWORD; sql/role.sql deliberately sets none.
# Passed as a psql variable, so the password needs no quoting. Written to
# work both executed and sourced (the entrypoint sources non-executable
# scripts), hence no `set -e` or `exit`.
: "${OUTBOXD_DB_PASSWORD:?set OUTBOXD_DB_PASSWORD for the outboxd role}"
psql -v ON_ERROR_STOP=1 --username "${POSTGRES_USER:-postgres}" \
     --dbname "${POSTGRES_DB:-postgres}" --set pw="$OUTBOXD_DB_PASSWORD" <<'EOSQL'
ALTER ROLE outboxd PASSWORD :'pw';
EOSQL
