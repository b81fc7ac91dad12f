// Vacuum and analyze for the embedded database. PGlite is PostgreSQL in one session with no background
// processes: it keeps the statistics autovacuum reads (pg_stat_user_tables) but no autovacuum ever runs.
// Without this, every claim captured, every delivery marked sent and every running balance moved leaves a
// dead row that is never reclaimed (the tables grow by them forever), the planner keeps the statistics of
// the day the table was created, and transaction ids are never frozen: past autovacuum_freeze_max_age
// PostgreSQL starts warning, and at about two billion it stops accepting writes.
//
// The thresholds are autovacuum's own defaults (PostgreSQL 16 §25.1.6), read from the database's settings,
// so a table is vacuumed here exactly when a server would have vacuumed it.
import type { Sql } from './sql.ts'

export interface TableDue {
  /** Schema-qualified and quoted by the database (quote_ident), safe to splice into VACUUM. */
  relation: string
  /** VACUUM (ANALYZE) when true (dead rows, inserts or transaction age past the threshold), else ANALYZE. */
  vacuum: boolean
}

/**
 * Ordinary tables (partitions included: a partitioned parent has no rows of its own) that autovacuum would
 * process now, the most dead rows first; not those whose autovacuum_enabled is off.
 */
export async function tablesDue(sql: Sql): Promise<TableDue[]> {
  // The one session's counts reach the shared statistics when it goes idle, at most once a second; a
  // database busy without pause would show counts that lag. Forced here, they are current at the read.
  await sql`SELECT pg_stat_force_next_flush()`
  return sql<TableDue[]>`
    SELECT relation, vacuum FROM (
      SELECT format('%I.%I', t.schemaname, t.relname) AS relation, t.n_dead_tup AS dead,
             (t.n_dead_tup > v_base + v_scale * t.n_live_tup
               OR t.n_ins_since_vacuum > i_base + i_scale * t.n_live_tup
               OR age(c.relfrozenxid) > freeze_age) AS vacuum,
             t.n_mod_since_analyze > a_base + a_scale * t.n_live_tup AS analyze_due
        FROM pg_stat_user_tables t JOIN pg_class c ON c.oid = t.relid,
             (SELECT current_setting('autovacuum_vacuum_threshold')::float8 AS v_base,
                     current_setting('autovacuum_vacuum_scale_factor')::float8 AS v_scale,
                     current_setting('autovacuum_vacuum_insert_threshold')::float8 AS i_base,
                     current_setting('autovacuum_vacuum_insert_scale_factor')::float8 AS i_scale,
                     current_setting('autovacuum_analyze_threshold')::float8 AS a_base,
                     current_setting('autovacuum_analyze_scale_factor')::float8 AS a_scale,
                     current_setting('autovacuum_freeze_max_age')::float8 AS freeze_age) thresholds
       WHERE c.relkind = 'r'
         -- A table an operator took out of autovacuum stays out of this too.
         AND NOT coalesce('autovacuum_enabled=false' = ANY (c.reloptions), false)
    ) due
     WHERE vacuum OR analyze_due
     ORDER BY dead DESC, relation`
}

/** Vacuums (and analyzes) or only analyzes one table; each its own statement, outside any transaction. */
export async function maintainTable(sql: Sql, table: TableDue): Promise<void> {
  // relation comes from format('%I.%I') over the catalog: quoted identifiers, never caller text.
  await sql.unsafe(table.vacuum ? `VACUUM (ANALYZE) ${table.relation}` : `ANALYZE ${table.relation}`)
}
