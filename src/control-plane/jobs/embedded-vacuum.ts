// What autovacuum does on a server, for the embedded database (which has none): every
// database.embedded_vacuum_interval_ms the leader vacuums or analyzes the tables past autovacuum's
// thresholds, one statement a table. The embedded database is one session, so each statement holds the
// paid calls behind it for its length (~0.2 s for a table of 100,000 rows of 600 B): one table at a time
// lets the books writer's statements in between, and the thresholds keep it to tables that need it.
import { maintainTable, tablesDue } from '../../db/embedded-vacuum.ts'
import { embeddedMaintenance } from '../../observability/metrics.ts'
import type { BackgroundModule, JobDeps } from './runner.ts'

export interface Maintained {
  vacuumed: string[]
  analyzed: string[]
  ms: number
}

export async function maintainEmbeddedTables(deps: Pick<JobDeps, 'sql'>): Promise<Maintained> {
  const started = performance.now()
  const done: Maintained = { vacuumed: [], analyzed: [], ms: 0 }
  for (const table of await tablesDue(deps.sql)) {
    await maintainTable(deps.sql, table)
    if (table.vacuum) done.vacuumed.push(table.relation)
    else done.analyzed.push(table.relation)
    embeddedMaintenance.inc({ kind: table.vacuum ? 'vacuum' : 'analyze' })
  }
  done.ms = Math.round(performance.now() - started)
  return done
}

export function createEmbeddedVacuumJobs(deps: JobDeps): BackgroundModule {
  if (!deps.embedded) return { jobs: [] }
  return {
    jobs: [
      {
        name: 'embedded-vacuum',
        intervalMs: deps.config.database.embedded_vacuum_interval_ms,
        run: async () => {
          const done = await maintainEmbeddedTables(deps)
          if (done.vacuumed.length + done.analyzed.length > 0) {
            deps.logger.info('embedded database maintained', { ...done })
          }
          return done
        },
      },
    ],
  }
}
