// Once per test project: starts one anvil with the project's test USDC (tests reach it through inject()),
// initialises and migrates one embedded data directory whose image every throwaway embedded database of the
// run starts from (embedded-image-setup.ts: initdb and the migrations once, not once per service), migrates
// one template database on the server that the run's databases are copied from (database.ts), and after
// the run drops the databases this run created on the server (tollgate_t_<run>_…, never another run's).
// The server-only tests a run skips are listed after the summary (run-summary-reporter.ts).
import { randomBytes } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import postgres from 'postgres'
import type { TestProject } from 'vitest/node'
import { startDevChain } from '../../src/chain/dev-chain.ts'
import { throwawayDatabaseImage } from '../../src/db/embedded.ts'
import { migrate } from '../../src/db/migrate.ts'
import { createSql } from '../../src/db/sql.ts'
import { templateDatabase } from './template-database.ts'

declare module 'vitest' {
  export interface ProvidedContext {
    rpcUrl: string
    usdcAddress: string
    chainId: number
    /** Prefix of this run's test databases on the server. */
    databasePrefix: string
    /** An initialised, migrated embedded data directory (PGlite's uncompressed dump) in a file. */
    embeddedImagePath: string
    /** The same before any migration: for the tests of the migrations themselves. */
    embeddedEmptyImagePath: string
  }
}

export default async function setup(project: TestProject) {
  const serverUrl = process.env.DATABASE_URL || null
  const databasePrefix = `tollgate_t_${randomBytes(3).toString('hex')}_`
  const [chain, empty] = await Promise.all([
    startDevChain({ payers: 0, payerFunding: 0n }),
    throwawayDatabaseImage(),
    serverUrl ? migrateTemplateDatabase(serverUrl, databasePrefix) : null,
  ])
  const imageDir = mkdtempSync(join(tmpdir(), 'tollgate-pglite-image-'))
  const embeddedImagePath = join(imageDir, 'data-dir.tar')
  const embeddedEmptyImagePath = join(imageDir, 'empty-data-dir.tar')
  writeFileSync(embeddedEmptyImagePath, empty)
  writeFileSync(embeddedImagePath, await migratedImage(empty))
  project.provide('embeddedImagePath', embeddedImagePath)
  project.provide('embeddedEmptyImagePath', embeddedEmptyImagePath)
  project.provide('rpcUrl', chain.rpcUrl)
  project.provide('usdcAddress', chain.usdcAddress)
  project.provide('chainId', chain.chainId)
  project.provide('databasePrefix', databasePrefix)
  return async () => {
    await chain.stop()
    rmSync(imageDir, { recursive: true, force: true })
    if (serverUrl) await dropTestDatabases(serverUrl, databasePrefix)
  }
}

/**
 * The empty image with every migration applied: a service starting from it finds nothing left to migrate
 * (~1 to 1.5 s of each start on two busy cores). Its migrations still run, through the same migrate().
 */
async function migratedImage(empty: Uint8Array): Promise<Uint8Array> {
  const [{ PGlite }, { PGLiteSocketServer }] = await Promise.all([
    import('@electric-sql/pglite'),
    import('@electric-sql/pglite-socket'),
  ])
  const db = await PGlite.create('memory://', { loadDataDir: new Blob([empty]) })
  try {
    const server = new PGLiteSocketServer({ db, host: '127.0.0.1', port: 0 })
    await server.start()
    const sql = createSql(`postgres://postgres@${server.getServerConn()}/postgres?sslmode=disable`, {
      max: 1,
    })
    try {
      await migrate(sql)
    } finally {
      await sql.end()
      await server.stop()
    }
    return new Uint8Array(await (await db.dumpDataDir('none')).arrayBuffer())
  } finally {
    await db.close()
  }
}

/** The server twin of migratedImage: `<prefix>template`, migrated, which freshDatabaseUrl copies. */
async function migrateTemplateDatabase(serverUrl: string, prefix: string): Promise<void> {
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} })
  try {
    await admin.unsafe(`CREATE DATABASE "${templateDatabase(prefix)}"`)
  } finally {
    await admin.end()
  }
  const url = new URL(serverUrl)
  url.pathname = `/${templateDatabase(prefix)}`
  // Ended before any copy: PostgreSQL copies a template only while nobody is connected to it.
  const sql = createSql(url.toString(), { max: 1 })
  try {
    await migrate(sql)
  } finally {
    await sql.end()
  }
}

/** Drops the databases whose names start with prefix; FORCE ends sessions a stopped test left open. */
export async function dropTestDatabases(serverUrl: string, prefix: string): Promise<string[]> {
  if (!/^tollgate_t_[0-9a-f]+_$/.test(prefix))
    throw new Error(`refusing to drop databases by prefix ${prefix}`)
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} })
  try {
    const rows = await admin<{ datname: string }[]>`
      SELECT datname FROM pg_database WHERE starts_with(datname, ${prefix})`
    for (const { datname } of rows) await admin.unsafe(`DROP DATABASE IF EXISTS "${datname}" WITH (FORCE)`)
    return rows.map((r) => r.datname)
  } finally {
    await admin.end()
  }
}
