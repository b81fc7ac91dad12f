#!/bin/bash
# The standby's entrypoint: on first start, a base backup of the primary (-R: standby.signal and
# primary_conninfo, application_name=standby1, the name synchronous_standby_names matches; -C -S: a
# replication slot, so the primary keeps the WAL this standby has not received yet); then PostgreSQL in hot
# standby. After a promotion this directory is a primary, and it is never copied over again (not empty).
set -euo pipefail
# The replication password, for the base backup and for every connection the standby makes to the primary
# later (written on every start: it comes from the environment, the home directory is not a volume).
printf 'postgres:5432:replication:replicator:%s\n' "$POSTGRES_REPLICATION_PASSWORD" > "$HOME/.pgpass"
printf 'postgres:5432:*:replicator:%s\n' "$POSTGRES_REPLICATION_PASSWORD" >> "$HOME/.pgpass"
chmod 0600 "$HOME/.pgpass"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  until pg_isready -h postgres -p 5432 -U "$POSTGRES_USER"; do sleep 1; done
  pg_basebackup -h postgres -p 5432 -U replicator -D "$PGDATA" -R -X stream -C -S standby1 \
    -d "application_name=standby1" --checkpoint=fast
  # The copy carries the primary's synchronous_standby_names: once promoted and alone, this server would
  # wait on every commit for a standby of its own. It runs asynchronous until one is attached.
  echo "synchronous_standby_names = ''" >> "$PGDATA/postgresql.auto.conf"
  chmod 0700 "$PGDATA"
fi
exec postgres
