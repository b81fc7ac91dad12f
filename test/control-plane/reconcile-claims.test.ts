// Reconcile sees what the serving invariants forbid: a claim won again without a release (a proof served
// twice), a captured claim without its call, a refund for a served call. Rows are fabricated, as a bug or a
// lost write would leave them; the report fails and names each, and the CLI exits non-zero.
import { spawnSync } from 'node:child_process'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import { usingServer } from '../helpers/database.ts'
import { entryArgs } from '../helpers/entry.ts'
import { startTestService, type TestService } from '../helpers/service.ts'

let svc: TestService

beforeAll(async () => {
  svc = await startTestService({ overrides: { jobs: { enabled: false } } })
})
afterAll(async () => {
  await svc?.stop()
})

const PAYER = '0x2222222222222222222222222222222222222222'

/** An x402 claim (no chain transfer to match, so only the claims checks speak). */
async function fabricate(o: {
  key: string
  status: string
  attempts: number
  releases: number
  call: boolean
}) {
  const callId = `call_${o.key.slice(-8)}`
  const captured = o.status === 'captured'
  // A capture names the call it wrote on its claim; a call written without one is named by no claim.
  await svc.sql`
    INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic, status,
                        attempts, releases, retry_until, captured_at, horizon_at, call_id)
    VALUES (${o.key}, 'eip3009', 'call', 'ep_x', 'acct_x', ${PAYER}, 1000, ${o.status}, ${o.attempts},
            ${o.releases}, now() + interval '10 minutes', ${captured ? new Date() : null}, now(),
            ${captured && o.call ? callId : null})`
  if (o.call) {
    await svc.sql`
      INSERT INTO calls (id, proof_key, endpoint_id, account_id, payer, amount_atomic, owner_share_atomic,
                         fee_atomic, upstream_status, method)
      VALUES (${callId}, ${o.key}, 'ep_x', 'acct_x', ${PAYER}, 1000, 950, 50, 200, 'GET')`
  }
}

describe('reconcile: claims against calls', () => {
  it('is clean on clean books', async () => {
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.claims.differences).toEqual([])
    expect(report.ok).toBe(true)
  })

  it('reports a double-served claim, a captured claim without a call and a refunded served call, and fails', async () => {
    await fabricate({
      key: 'auth:double-served-0001',
      status: 'captured',
      attempts: 2,
      releases: 0,
      call: true,
    })
    await fabricate({
      key: 'auth:no-call-00000002',
      status: 'captured',
      attempts: 1,
      releases: 0,
      call: false,
    })
    await fabricate({
      key: 'auth:refunded-served3',
      status: 'refund_due',
      attempts: 1,
      releases: 0,
      call: true,
    })
    await svc.sql`
      INSERT INTO ledger_entries (account_id, kind, wallet, amount_atomic, source_type, source_id)
      VALUES ('acct_x', 'refund', ${PAYER}, 1000, 'claim', 'auth:refunded-served3')`

    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.ok).toBe(false)
    expect(report.claims).toMatchObject({
      rewon_without_release: 1,
      captured_without_call: 1,
      call_without_capture: 1,
      refunds_of_captured: 1,
    })
    const text = report.differences.join('\n')
    expect(text).toContain('claim auth:double-served-0001: was won again without a release')
    expect(text).toContain('claim auth:no-call-00000002: is captured but has no call row')
    expect(text).toContain('claim auth:refunded-served3: has a call row but was never captured')
  })

  it.runIf(usingServer)('the CLI exits 1 on those differences', () => {
    const r = spawnSync(process.execPath, entryArgs('cli/reconcile'), {
      env: {
        ...process.env,
        NODE_ENV: 'test',
        DATABASE_URL: svc.databaseUrl,
        RPC_URL: svc.config.chain.rpc_url ?? '',
        USDC_ADDRESS: svc.chain.usdc.address,
        TREASURY_PRIVATE_KEY: svc.treasury.privateKey,
      },
      encoding: 'utf8',
      timeout: 60_000,
    })
    expect(r.stdout).toContain('was won again without a release')
    expect(r.status).toBe(1)
  })
})
