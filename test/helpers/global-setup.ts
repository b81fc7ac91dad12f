// Once per test project: starts one anvil with the project's test USDC (tests reach it through inject()),
// initialises one embedded data directory whose image every throwaway embedded database of the run starts
// from (embedded-image-setup.ts: initdb once, not once per service), and after the run drops the databases
// this run created on the server (tollgate_t_<run>_…, never another run's).
// The server-only tests a run skips are listed after the summary (run-summary-reporter.ts).
import { randomBytes } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import postgres from 'postgres'
import type { TestProject } from 'vitest/node'
import { startDevChain } from '../../src/chain/dev-chain.ts'
import { throwawayDatabaseImage } from '../../src/db/embedded.ts'

declare module 'vitest' {
  export interface ProvidedContext {
    rpcUrl: string
    usdcAddress: string
    chainId: number
    /** Prefix of this run's test databases on the server. */
    databasePrefix: string
    /** An initialised, empty embedded data directory (PGlite's uncompressed dump) in a file. */
    embeddedImagePath: string
  }
}

export default async function setup(project: TestProject) {
  const serverUrl = process.env.DATABASE_URL || null
  const databasePrefix = `tollgate_t_${randomBytes(3).toString('hex')}_`
  const [chain, image] = await Promise.all([
    startDevChain({ payers: 0, payerFunding: 0n }),
    throwawayDatabaseImage(),
  ])
  const imageDir = mkdtempSync(join(tmpdir(), 'tollgate-pglite-image-'))
  const embeddedImagePath = join(imageDir, 'data-dir.tar')
  writeFileSync(embeddedImagePath, image)
  project.provide('embeddedImagePath', embeddedImagePath)
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
