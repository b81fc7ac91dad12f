// The suite's own hygiene: server-only tests are listed for the skip message, and global teardown drops this
// run's test databases on the server and leaves every other database (another run's included) alone.
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

  it.runIf(usingServer)("teardown drops this run's databases and no other's", async () => {
    const mine = new URL((await freshDatabaseUrl())!).pathname.slice(1)
    expect(mine.startsWith(inject('databasePrefix'))).toBe(true)
    const admin = postgres(serverUrl!, { max: 1, onnotice: () => {} })
    const other = 'tollgate_t_ffffff_othertest'
    try {
      await admin.unsafe(`CREATE DATABASE ${other}`)
      const dropped = await dropTestDatabases(serverUrl!, inject('databasePrefix'))
      expect(dropped).toContain(mine)
      const left = (await admin`SELECT datname FROM pg_database`).map((r) => r.datname)
      expect(left).not.toContain(mine)
      expect(left).toContain(other)
      await expect(dropTestDatabases(serverUrl!, 'tollgate_t_')).rejects.toThrow(/refusing/)
    } finally {
      await admin.unsafe(`DROP DATABASE IF EXISTS ${other}`)
      await admin.end()
    }
  })
})
