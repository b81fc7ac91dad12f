// Webhook guarantees that need a PostgreSQL server (a second process or instance on the same database;
// embedded PGlite is a single session and is not written to survive a SIGKILL): nothing is lost across a
// crash, and two instances deliver each event once per endpoint.

import { Webhook } from 'standardwebhooks'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { afterAll, describe, expect, it } from 'vitest'
import { insertEvent } from '../../src/db/events.ts'
import { createSql, type Sql } from '../../src/db/sql.ts'
import { fundedAccount } from '../helpers/accounts.ts'
import { type ChildService, freePort, pidAlive, startChildService } from '../helpers/child-service.ts'
import { freshDatabaseUrl, usingServer } from '../helpers/database.ts'
import { callApi, registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { type Captured, startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.ts'

const cleanups: Array<() => Promise<unknown>> = []
afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => {})
})

const wallet = () => privateKeyToAccount(generatePrivateKey()).address
const byEvent = (id: string) => (c: Captured) => c.headers['webhook-id'] === id

describe.runIf(usingServer)('webhooks across a crash and across instances', () => {
  it('SIGKILL after the state change and before delivery: after a restart the events are delivered', async () => {
    const databaseUrl = (await freshDatabaseUrl())!
    const treasury = await fundedAccount(0n)
    const port = await freePort()
    const settings = {
      // The first retry comes 2 s after the refused attempt: the kill lands between attempts.
      webhooks: { retry_schedule_ms: [2000, 300, 300, 300, 300], timeout_ms: 1000, poll_interval_ms: 200 },
    }
    const sql: Sql = createSql(databaseUrl, { max: 2 })
    cleanups.push(() => sql.end({ timeout: 1 }))
    let child: ChildService = await startChildService({
      databaseUrl,
      treasuryKey: treasury.privateKey,
      settings,
    })
    cleanups.push(() => child.kill('SIGKILL'))
    const reg = await callApi(child.url, '/api/v1/register', {
      body: { wallet_address: wallet(), business_name: 'Crash Co' },
    })
    const key = reg.body.api_key as string
    const accountId = reg.body.account.id as string
    const created = await callApi(child.url, '/api/v1/webhooks', {
      key,
      body: { url: `http://127.0.0.1:${port}/hook` },
    })
    expect(created.status).toBe(201)
    const secret = created.body.secret as string

    // The state change commits; the receiver is down, so the first attempt is refused.
    const first = await insertEvent(sql, { accountId, type: 'payment.received', data: { n: 1 } })
    await waitFor(
      async () => (await sql`SELECT 1 FROM webhook_attempts WHERE event_id = ${first}`).length > 0,
      {
        timeoutMs: 10_000,
        what: () => `a first attempt:\n${child.output()}`,
      },
    )
    const killedPid = child.pid
    await child.kill('SIGKILL')
    // The server itself is dead, not a wrapper around it: nothing keeps serving on the port.
    expect(pidAlive(killedPid)).toBe(false)
    // A second state change commits while no service runs at all.
    const second = await insertEvent(sql, { accountId, type: 'payout.sent', data: { n: 2 } })

    const receiver: WebhookReceiver = await startWebhookReceiver({ port })
    cleanups.push(() => receiver.close())
    child = await startChildService({ databaseUrl, treasuryKey: treasury.privateKey, settings })
    const got = await Promise.all([
      receiver.waitFor(byEvent(first), 15_000),
      receiver.waitFor(byEvent(second), 15_000),
    ])
    const verifier = new Webhook(secret)
    expect(verifier.verify(got[0].body, got[0].headers)).toMatchObject({ id: first, data: { n: 1 } })
    expect(verifier.verify(got[1].body, got[1].headers)).toMatchObject({ id: second, type: 'payout.sent' })
    // The receiver answers before the dispatcher records the success: wait for the record.
    await waitFor(
      async () => {
        const rows = await sql<{ status: string }[]>`SELECT status FROM webhook_deliveries`
        return rows.length === 2 && rows.every((r) => r.status === 'delivered')
      },
      { timeoutMs: 5_000, intervalMs: 50, what: 'both deliveries recorded as delivered' },
    )
    await child.kill('SIGTERM')
  })

  it('two instances on one database deliver each event once per endpoint', async () => {
    const databaseUrl = await freshDatabaseUrl()
    const overrides = { webhooks: { poll_interval_ms: 200, retry_schedule_ms: [100, 100], timeout_ms: 2000 } }
    const a: TestService = await startTestService({ databaseUrl, overrides })
    cleanups.push(() => a.stop())
    const b: TestService = await startTestService({ databaseUrl, overrides, treasury: a.treasury })
    cleanups.push(() => b.stop())
    const r1 = await startWebhookReceiver()
    const r2 = await startWebhookReceiver()
    cleanups.push(
      () => r1.close(),
      () => r2.close(),
    )
    const { key, account } = await registerMerchant(a, wallet())
    for (const r of [r1, r2]) {
      expect((await a.api('/api/v1/webhooks', { key, body: { url: `${r.url}/hook` } })).status).toBe(201)
    }
    const ids: string[] = []
    // Events written through both instances' pools while both dispatchers are pushed to run at once
    // (runNow ignores leadership: only the row claims keep them apart).
    const pushes: Promise<void>[] = []
    for (let i = 0; i < 20; i++) {
      ids.push(
        await insertEvent((i % 2 ? a : b).sql, {
          accountId: account.id,
          type: 'payment.received',
          data: { i },
        }),
      )
      pushes.push(a.jobs.runNow('webhook-dispatch'), b.jobs.runNow('webhook-dispatch'))
    }
    await Promise.all(pushes)
    for (const r of [r1, r2]) await Promise.all(ids.map((id) => r.waitFor(byEvent(id), 10_000)))
    // Give a duplicate, if any, the time to show up: a fixed wait on purpose (nothing more must happen).
    await new Promise((res) => setTimeout(res, 600))
    for (const r of [r1, r2]) {
      expect(r.received).toHaveLength(ids.length)
      expect(new Set(r.received.map((c) => c.headers['webhook-id'])).size).toBe(ids.length)
    }
  })
})
