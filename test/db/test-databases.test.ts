// The suite's own hygiene: server-only tests are listed for the skip message, and global teardown drops this
// run's test databases on the server and leaves every other database (another run's included) alone.
import { randomBytes } from 'node:crypto'
import postgres from 'postgres'
import { describe, expect, inject, it } from 'vitest'
import { freshDatabaseUrl, serverUrl, usingServer } from '../helpers/database.ts'
import { dropTestDatabases } from '../helpers/global-setup.ts'
import { serverOnlyTestFiles } from '../helpers/server-only-files.ts'

describe('test databases', () => {
  it('the skip message lists the server-only test files', () => {
    const files = serverOnlyTestFiles()
    expect(files).toContain('test/payouts/crash.test.ts')
    expect(files).toContain('test/data-plane/two-instances.test.ts')
  })

  it.runIf(usingServer)(
    "teardown drops its run's databases and no other's",
    async () => {
      // A run prefix of its own. With the run's real one, this check dropped (WITH FORCE) the databases of the
      // test files running beside it, mid-test: "database … is not currently accepting connections" in their
      // instances' writes, and a failure wherever a file was still asserting.
      const prefix = `tollgate_t_${randomBytes(4).toString('hex')}_`
      const mine = `${prefix}check`
      const runs = new URL((await freshDatabaseUrl())!).pathname.slice(1)
      expect(runs.startsWith(inject('databasePrefix'))).toBe(true)
      const admin = postgres(serverUrl!, { max: 1, onnotice: () => {} })
      const other = 'tollgate_t_ffffff_othertest'
      try {
        await admin.unsafe(`CREATE DATABASE ${mine}`)
        await admin.unsafe(`CREATE DATABASE ${other}`)
        const dropped = await dropTestDatabases(serverUrl!, prefix)
        expect(dropped).toEqual([mine])
        const left = (await admin`SELECT datname FROM pg_database`).map((r) => r.datname)
        expect(left).not.toContain(mine)
        expect(left).toContain(other)
        // The run's own databases (this file's, and the files' running now) are global teardown's to drop.
        expect(left).toContain(runs)
        await expect(dropTestDatabases(serverUrl!, 'tollgate_t_')).rejects.toThrow(/refusing/)
      } finally {
        await admin.unsafe(`DROP DATABASE IF EXISTS ${mine}`)
        await admin.unsafe(`DROP DATABASE IF EXISTS ${other}`)
        await admin.end()
      }
      // Each DROP DATABASE waits for a forced checkpoint of the whole server: beside a hundred test databases
      // being written by the files running alongside, two of them took 53 s and then over 60 s in CI.
    },
    180_000,
  )
})
