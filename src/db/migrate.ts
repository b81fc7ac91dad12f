// Applies src/db/migrations/*.sql in order, once, inside one transaction under an advisory lock, so two
// instances starting together never fight: the second waits, then finds nothing left to do.
import { readdirSync, readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { Sql } from './sql.ts'

const MIGRATIONS_DIR = join(dirname(fileURLToPath(import.meta.url)), 'migrations')
/** Arbitrary but fixed: the advisory lock key that serialises migrations across instances. */
const MIGRATION_LOCK_KEY = 7_301_001

export interface MigrationResult {
  applied: string[]
}

export async function migrate(sql: Sql, dir = MIGRATIONS_DIR): Promise<MigrationResult> {
  const files = readdirSync(dir)
    .filter((f) => /^\d{4}_.+\.sql$/.test(f))
    .sort()
  return sql.begin(async (tx) => {
    // A migration (an index on a big table) or the wait for another instance's may take longer than the
    // service's statement timeout: none here.
    await tx`SET LOCAL statement_timeout = 0`
    await tx`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK_KEY})`
    await tx`CREATE TABLE IF NOT EXISTS schema_migrations (
      name text PRIMARY KEY,
      applied_at timestamptz NOT NULL DEFAULT now()
    )`
    const done = new Set(
      (await tx<{ name: string }[]>`SELECT name FROM schema_migrations`).map((r) => r.name),
    )
    const applied: string[] = []
    for (const file of files) {
      if (done.has(file)) continue
      await tx.unsafe(readFileSync(join(dir, file), 'utf8'))
      await tx`INSERT INTO schema_migrations (name) VALUES (${file})`
      applied.push(file)
    }
    return { applied }
  }) as Promise<MigrationResult>
}
