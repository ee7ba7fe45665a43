# PostgreSQL 15 with the wal2json output plugin, for deploy/docker-compose.yml.
# The official image already has the PostgreSQL apt repository configured.
FROM postgres:15-bookworm

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        postgresql-15-wal2json \
 && rm -rf /var/lib/apt/lists/*
