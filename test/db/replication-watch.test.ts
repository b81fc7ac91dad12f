// With no standby (the embedded database, or a server streaming to nobody) there is nothing a failover could
// forget: database.require_synchronous_standby refuses nothing, /readyz stays ready, the gauges read 0.
// A real asynchronous and synchronous standby: test/chaos/replication-watch.test.ts.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startReplicationWatch } from '../../src/db/replication-watch.ts'
import { createSql } from '../../src/db/sql.ts'
import { createLogger } from '../../src/observability/logger.ts'
import { fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { refusedPort } from '../helpers/child-service.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream, type Upstream } from '../helpers/upstream.ts'

let svc: TestService
let upstream: Upstream
beforeAll(async () => {
  svc = await startTestService({
    overrides: { database: { data_dir: 'memory://', require_synchronous_standby: true } },
  })
  upstream = await startUpstream()
})
afterAll(async () => {
  await svc?.stop()
  await upstream?.close()
})

describe('replication state without a standby', () => {
  it('says so on /readyz and in the gauges, and a required synchronous standby refuses no paid call', async () => {
    const ready = await fetch(`http://127.0.0.1:${svc.adminPort}/readyz`)
    expect(ready.status).toBe(200)
    const body = (await ready.json()) as {
      status: string
      checks: Array<{ name: string; ok: boolean; degraded?: boolean; detail?: string }>
    }
    expect(body.status).toBe('ready')
    const check = body.checks.find((c) => c.name === 'replication')
    expect(check?.ok).toBe(true)
    expect(check?.degraded).toBeUndefined()
    // The embedded database is never asked; a server here streams to no standby.
    expect(check?.detail).toMatch(
      svc.config.database.url ? /^no standby attached/ : /^embedded database: no replication$/,
    )
    const text = await (await fetch(`http://127.0.0.1:${svc.adminPort}/metrics`)).text()
    expect(text).toMatch(/^tollgate_db_replication_unsafe 0$/m)
    for (const state of ['sync', 'quorum', 'potential', 'async', 'unknown'])
      expect(text).toMatch(new RegExp(`^tollgate_db_standbys\\{sync_state="${state}"\\} 0$`, 'm'))

    const merchant = await registerMerchant(svc)
    const ep = await svc.api('/api/v1/endpoints', {
      key: merchant.key,
      body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
    })
    const payer = await fundedAccount(10_000_000n)
    const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
    const paid = await fetch((ep.body as { metered_url: string }).metered_url, {
      headers: { 'x-payment': hash },
    })
    expect(paid.status).toBe(200)
    await paid.arrayBuffer()
  })

  it('required, a state never read (no server answered at start) refuses paid calls, and says so', async () => {
    // A port nothing listens on: every read is refused, as when the first one at start fails.
    const sql = createSql(`postgres://postgres@127.0.0.1:${await refusedPort()}/postgres`, {
      max: 1,
      connectTimeoutMs: 1_000,
    })
    const watch = await startReplicationWatch({
      sql,
      logger: createLogger('silent'),
      embedded: false,
      require: true,
      checkMs: 60_000,
    })
    try {
      expect(watch.state.kind).toBe('unread')
      expect(watch.refusing).toBe('replication not read yet')
      expect(await watch.readiness.check()).toMatchObject({ ok: true, degraded: true })
    } finally {
      watch.stop()
      await sql.end({ timeout: 1 })
    }
  })
})
