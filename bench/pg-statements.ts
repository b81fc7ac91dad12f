// Where a scenario's PostgreSQL time goes, statement by statement: pg_stat_statements of the instance's
// database, reset before a measured run and read after it, per request. Only on a server that preloads the
// extension (shared_preload_libraries = 'pg_stat_statements', pg_stat_statements.track = all to see the
// statements inside functions such as payer_reserved); BENCH_PG_STATEMENTS=1 asks for it. The CPU meter
// (bench/cpu.ts) says how much the database costs a call; this says which statements.
import postgres from 'postgres'

export interface StatementCost {
  /** Executions per request. */
  calls_per_request: number
  /** Execution + planning time per request (µs): wall time inside the backend, about its CPU here. */
  us_per_request: number
  /** Rows per execution. */
  rows_per_call: number
  /** Top level (sent by the client) or run inside a function or another statement. */
  toplevel: boolean
  query: string
}

/** Resets the statistics of databases whose name contains `database`; null when the server lacks them. */
export async function statementsMeter(
  server: string,
  database: string,
): Promise<{ read(requests: number, top?: number): Promise<StatementCost[]>; end(): Promise<void> } | null> {
  const admin = postgres(server, { max: 1, onnotice: () => {} })
  try {
    await admin.unsafe('CREATE EXTENSION IF NOT EXISTS pg_stat_statements')
    await admin`SELECT pg_stat_statements_reset(0, d.oid, 0) FROM pg_database d
                WHERE position(${database} in d.datname) > 0`
  } catch {
    await admin.end()
    return null
  }
  return {
    /** Since the reset, per request: the costliest `top` statements. */
    async read(requests, top = 25) {
      const rows = await admin<
        { calls: string; ms: number; rows: string; toplevel: boolean; query: string }[]
      >`
          SELECT s.calls::text, (s.total_exec_time + s.total_plan_time)::float8 AS ms, s.rows::text, s.toplevel,
                 s.query
          FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
          WHERE position(${database} in d.datname) > 0
          ORDER BY s.total_exec_time + s.total_plan_time DESC LIMIT ${top}`
      const per = Math.max(1, requests)
      return rows.map((r) => ({
        calls_per_request: Math.round((Number(r.calls) / per) * 1e4) / 1e4,
        us_per_request: Math.round((r.ms * 1000) / per),
        rows_per_call: Math.round((Number(r.rows) / Math.max(1, Number(r.calls))) * 10) / 10,
        toplevel: r.toplevel,
        query: r.query.replace(/\s+/g, ' ').slice(0, 240),
      }))
    },
    end: () => admin.end(),
  }
}

/**
 * BENCH_PG_STATEMENTS=1 on a BENCH_DATABASE_URL server: the meter of this run's databases (named with this
 * process's pid, as bench/targets/tollgate.ts names them); else null.
 */
export function statementsMeterFromEnv(): ReturnType<typeof statementsMeter> | Promise<null> {
  const server = process.env.BENCH_DATABASE_URL
  if (!server || process.env.BENCH_PG_STATEMENTS !== '1') return Promise.resolve(null)
  return statementsMeter(server, `_${process.pid}`)
}
