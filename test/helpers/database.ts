// A fresh database for a test: a new database on the PostgreSQL server named by DATABASE_URL (CI), or
// an in-memory embedded PGlite when no server is given (each service instance gets its own then).
import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import postgres from 'postgres'
import { inject } from 'vitest'
import {
  type EmbeddedDatabase,
  startEmbeddedDatabase,
  startThrowawayDatabasesFrom,
} from '../../src/db/embedded.ts'
import { migrate } from '../../src/db/migrate.ts'
import { createSql, type Sql } from '../../src/db/sql.ts'
import { templateDatabase } from './template-database.ts'

export const serverUrl = process.env.DATABASE_URL || null
export const usingServer = serverUrl !== null

/** For the tests of the migrations: this file's throwaway embedded databases start before any migration. */
export function startEmbeddedDatabasesEmpty(): void {
  startThrowawayDatabasesFrom(new Blob([readFileSync(inject('embeddedEmptyImagePath'))]))
}

/** Tests that need two instances on one database need a server: PGlite is a single session. */
export const describeWithServer = usingServer ? 'server' : 'embedded'

/**
 * Inside vitest a copy of the run's migrated template (global-setup.ts), so a service starting on it finds
 * nothing left to migrate; `empty` for the tests of the migrations themselves, and outside vitest.
 */
export async function freshDatabaseUrl(options: { empty?: boolean } = {}): Promise<string | null> {
  if (!serverUrl) return null
  // The run's prefix: global teardown drops this run's databases and no other run's. Measurement scripts
  // run outside vitest (no injected prefix) leave theirs under their own prefix.
  const prefix = process.env.VITEST ? inject('databasePrefix') : 'tollgate_tool_'
  const name = `${prefix}${randomBytes(6).toString('hex')}`
  const template = process.env.VITEST && !options.empty ? ` TEMPLATE "${templateDatabase(prefix)}"` : ''
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} })
  try {
    await admin.unsafe(`CREATE DATABASE ${name}${template}`)
  } finally {
    await admin.end()
  }
  const url = new URL(serverUrl)
  url.pathname = `/${name}`
  return url.toString()
}

/**
 * A fresh, migrated database with a client, for tests of the books and the SQL below them: a server database
 * when DATABASE_URL is set, else an in-memory PGlite. `stop` ends the client and the embedded database.
 */
export async function migratedDatabase(options: {
  max: number
}): Promise<{ sql: Sql; stop(): Promise<void> }> {
  let url = await freshDatabaseUrl()
  let embedded: EmbeddedDatabase | null = null
  if (!url) {
    embedded = await startEmbeddedDatabase({ dataDir: 'memory://' })
    url = embedded.url
  }
  const sql = createSql(url, options)
  await migrate(sql)
  return {
    sql,
    async stop() {
      await sql.end()
      await embedded?.stop()
    },
  }
}
