// A fresh database for a test: a new database on the PostgreSQL server named by DATABASE_URL (CI), or
// an in-memory embedded PGlite when no server is given (each service instance gets its own then).
import { randomBytes } from 'node:crypto'
import postgres from 'postgres'
import { inject } from 'vitest'

export const serverUrl = process.env.DATABASE_URL || null
export const usingServer = serverUrl !== null

/** Tests that need two instances on one database need a server: PGlite is a single session. */
export const describeWithServer = usingServer ? 'server' : 'embedded'

export async function freshDatabaseUrl(): Promise<string | null> {
  if (!serverUrl) return null
  // The run's prefix: global teardown drops this run's databases and no other run's. Measurement scripts
  // run outside vitest (no injected prefix) leave theirs under their own prefix.
  const prefix = process.env.VITEST ? inject('databasePrefix') : 'tollgate_tool_'
  const name = `${prefix}${randomBytes(6).toString('hex')}`
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} })
  try {
    await admin.unsafe(`CREATE DATABASE ${name}`)
  } finally {
    await admin.end()
  }
  const url = new URL(serverUrl)
  url.pathname = `/${name}`
  return url.toString()
}
