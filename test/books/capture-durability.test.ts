// A served call is captured exactly once even when the database goes away between the upstream's answer and
// the capture write: the capture is kept, retried with backoff while the database refuses it, and lands once
// it is back. The outage is made server-side on the test's own database (connections refused, the service's
// pooled connections terminated); the shared server itself is never stopped. (A full PostgreSQL restart
// also reaches the driver's null-socket crash, porsager/postgres#1208, which src/db/sql.ts works
// around apart from this.)
import postgres from 'postgres'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { captureQueue, captureRetries } from '../../src/observability/metrics.ts'
import { fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { freshDatabaseUrl, serverUrl, usingServer } from '../helpers/database.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { waitFor } from '../helpers/wait-for.ts'

let admin: postgres.Sql
let database = ''
let svc: TestService
let upstream: Awaited<ReturnType<typeof startUpstream>>
let openGate: (() => void) | null = null
let received = 0

const gauge = async (m: typeof captureQueue | typeof captureRetries) => (await m.get()).values[0]?.value ?? 0

/** The database refuses new connections and the service's pooled ones (main and books writer) are cut (the leader's advisory-lock
 * session and LISTEN sessions are left alone: they are not what writes captures). */
async function databaseDown(): Promise<void> {
  await admin.unsafe(`ALTER DATABASE ${database} WITH ALLOW_CONNECTIONS false`)
  await admin`
    SELECT pg_terminate_backend(a.pid) FROM pg_stat_activity a
    WHERE a.datname = ${database} AND a.pid <> pg_backend_pid() AND a.application_name IN ('tollgate', 'tollgate-books')
      AND a.query NOT ILIKE 'listen%'
      AND NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory')`
}
async function databaseUp(): Promise<void> {
  await admin.unsafe(`ALTER DATABASE ${database} WITH ALLOW_CONNECTIONS true`)
}

describe.runIf(usingServer)('captures across a database outage', () => {
  beforeAll(async () => {
    const url = (await freshDatabaseUrl())!
    database = new URL(url).pathname.slice(1)
    admin = postgres(serverUrl!, { max: 1, onnotice: () => {} })
    svc = await startTestService({ databaseUrl: url, overrides: { jobs: { enabled: false } } })
    upstream = await startUpstream((req, res) => {
      received++
      if (req.url?.startsWith('/gate')) {
        openGate = () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}')
        return true
      }
      return false
    })
  })
  afterAll(async () => {
    await svc?.stop()
    await upstream?.close()
    if (database) await databaseUp()
    await admin?.end()
  })

  it('a capture that fails while the database is down is retried and lands once, when it is back', async () => {
    const { key } = await registerMerchant(svc)
    const ep = (
      await svc.api('/api/v1/endpoints', { key, body: { upstream_url: `${upstream.url}/gate`, price: 0.01 } })
    ).body
    const payer = await fundedAccount(1_000_000n)
    const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
    const retriesBefore = await gauge(captureRetries)

    const call = fetch(ep.metered_url, { headers: { 'x-payment': hash } })
    await waitFor(() => received === 1, {
      what: 'the upstream to receive the paid call',
      timeoutMs: 30_000,
      intervalMs: 50,
      retryErrors: true,
    })
    // The claim is written; now the database goes away before the upstream answers.
    await databaseDown()
    openGate!()
    const res = await call
    expect(res.status).toBe(200)
    await waitFor(async () => (await gauge(captureRetries)) > retriesBefore, {
      what: 'a failed capture write to be retried',
      timeoutMs: 30_000,
      intervalMs: 50,
      retryErrors: true,
    })
    expect(await gauge(captureQueue)).toBe(1)

    await databaseUp()
    await waitFor(
      async () => {
        const [row] = await svc.sql`SELECT status FROM claims WHERE proof_key = ${`tx:${hash}`}`
        return row?.status === 'captured'
      },
      { what: 'the capture to land', timeoutMs: 30_000, intervalMs: 50, retryErrors: true },
    )
    const calls =
      await svc.sql`SELECT upstream_status FROM calls WHERE call_proof_key(proof_key, proof) = ${`tx:${hash}`}`
    expect(calls).toEqual([{ upstream_status: 200 }])
    const entries = await svc.sql`
      SELECT e.kind FROM ledger_entries e
      JOIN calls k ON e.source_type = 'capture_batch' AND e.source_id = k.ledger_batch_id::text
        AND e.account_id = k.account_id
      WHERE call_proof_key(k.proof_key, k.proof) = ${`tx:${hash}`} ORDER BY e.kind`
    expect(entries.map((e) => e.kind)).toEqual(['fee', 'owner_share'])
    await waitFor(async () => (await gauge(captureQueue)) === 0, {
      what: 'the queue to empty',
      timeoutMs: 30_000,
      intervalMs: 50,
      retryErrors: true,
    })

    // The instance is still serving after the restart.
    const second = await payUsdc(payer, svc.chain.treasury, 10_000n)
    const again = fetch(ep.metered_url, { headers: { 'x-payment': second } })
    await waitFor(() => received === 2, {
      what: 'the second call upstream',
      timeoutMs: 30_000,
      intervalMs: 50,
      retryErrors: true,
    })
    openGate!()
    expect((await again).status).toBe(200)
  })
})
