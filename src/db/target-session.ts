// Multi-host DATABASE_URLs (`postgres://h1:5432,h2:5432/db?target_session_attrs=read-write`): the driver
// tries each host in turn and keeps the first whose session matches. postgres 3.4.9 judges `read-write` by
// the `default_transaction_read_only` its server reports at start-up, and a PostgreSQL ≥ 14 hot standby
// reports it `off` (only `transaction_read_only` is on there): so `read-write` accepts a standby, every write
// then fails with "cannot execute … in a read-only transaction", and after a failover the pool may sit on
// the new standby. `primary` (not in recovery, `pg_is_in_recovery()` false) is what read-write means for a
// primary/standby pair, and the driver checks it correctly: `read-write` is asked for as `primary`.
import type postgres from 'postgres'

type TargetSessionAttrs = postgres.Options<Record<string, never>>['target_session_attrs']

export function targetSessionAttrs(url: string): { target_session_attrs?: TargetSessionAttrs } {
  const query = url.indexOf('?')
  const asked =
    (query < 0 ? null : new URLSearchParams(url.slice(query + 1)).get('target_session_attrs')) ??
    process.env.PGTARGETSESSIONATTRS
  return asked === 'read-write' ? { target_session_attrs: 'primary' } : {}
}
