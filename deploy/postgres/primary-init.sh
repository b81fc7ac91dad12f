#!/bin/bash
# Runs once, when the primary's data directory is created (/docker-entrypoint-initdb.d): a replication role
# for the standby, allowed to stream from the compose network with a password, and synchronous replication
# to it (docs/failover.md: a claim is acknowledged only once the standby has it, so a failover never forgets
# a proof that was served). Set from here, not on the command line: the entrypoint's temporary init server
# takes the command's settings too, and its CREATE DATABASE would wait for a standby that does not exist yet.
set -euo pipefail
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v pw="$POSTGRES_REPLICATION_PASSWORD" -v names="$SYNCHRONOUS_STANDBY_NAMES" <<'SQL'
CREATE ROLE replicator WITH REPLICATION LOGIN PASSWORD :'pw';
ALTER SYSTEM SET synchronous_standby_names = :'names';
ALTER SYSTEM SET synchronous_commit = 'on';
SQL
echo "host replication replicator all scram-sha-256" >> "$PGDATA/pg_hba.conf"
