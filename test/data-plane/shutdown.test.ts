// SIGTERM drains: captures queued for their batch are written before the process lets go of the database.
import { describe, expect, it } from 'vitest'
import { createSql } from '../../src/db/sql.ts'
import { fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { freshDatabaseUrl, usingServer } from '../helpers/database.ts'
import { registerMerchant, startTestService } from '../helpers/service.ts'
import { startUpstream } from '../helpers/upstream.ts'

describe.runIf(usingServer)('shutdown', () => {
  it('stop() writes the captures still waiting for their batch', async () => {
    const databaseUrl = await freshDatabaseUrl()
    // A long flush interval: without the drain, the capture would still be waiting when we stop.
    const svc = await startTestService({ databaseUrl, overrides: { claims: { capture_flush_ms: 60_000 } } })
    const upstream = await startUpstream()
    try {
      const { key } = await registerMerchant(svc)
      const ep = (
        await svc.api('/api/v1/endpoints', {
          key,
          body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
        })
      ).body
      const payer = await fundedAccount(1_000_000n)
      const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
      expect((await fetch(ep.metered_url, { headers: { 'x-payment': hash } })).status).toBe(200)
    } finally {
      await svc.stop()
      await upstream.close()
    }
    const sql = createSql(databaseUrl!, { max: 1 })
    try {
      const rows = await sql`SELECT c.status, (SELECT count(*) FROM calls)::int AS calls FROM claims c`
      expect(rows).toEqual([{ status: 'captured', calls: 1 }])
    } finally {
      await sql.end()
    }
  })
})
