// Revenue booked per capture batch (migration 0050): paid calls of two merchants captured in several batches,
// a refund of one call and a payout batch leave one owner share and one fee entry per account per batch (not
// per call), each the sum of the calls that name the batch; reconcile is clean, and a call charge or an entry
// amount tampered by one base unit is reported.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import { type Funded, fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { waitFor } from '../helpers/wait-for.ts'

const HOUR = 3_600_000
let svc: TestService
let upstream: Awaited<ReturnType<typeof startUpstream>>
let payer: Funded
let merchants: Array<Awaited<ReturnType<typeof registerMerchant>> & { url: string }>

beforeAll(async () => {
  svc = await startTestService({
    overrides: {
      // Captures of calls answered together wait together: each round below is written as one batch.
      claims: { capture_flush_ms: 400 },
      // The payout batch runs when the test says so, for any amount owed.
      payouts: { interval_ms: HOUR, threshold_check_interval_ms: HOUR, threshold: 0.000001 },
    },
  })
  upstream = await startUpstream()
  payer = await fundedAccount(100_000_000n)
  merchants = []
  for (let i = 0; i < 2; i++) {
    const m = await registerMerchant(svc)
    const ep = await svc.api('/api/v1/endpoints', {
      key: m.key,
      body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
    })
    expect(ep.status).toBe(201)
    merchants.push({ ...m, url: ep.body.metered_url })
  }
}, 60_000)
afterAll(async () => {
  await svc?.stop()
  await upstream?.close()
})

/** `n` paid calls to each merchant at once; resolves when every one is captured. */
async function round(n: number): Promise<string[]> {
  const hashes: Array<{ hash: string; url: string }> = []
  for (const m of merchants) {
    for (let i = 0; i < n; i++)
      hashes.push({ hash: await payUsdc(payer, svc.chain.treasury, 10_000n), url: m.url })
  }
  const answers = await Promise.all(hashes.map((h) => fetch(h.url, { headers: { 'x-payment': h.hash } })))
  expect(answers.map((a) => a.status)).toEqual(hashes.map(() => 200))
  const keys = hashes.map((h) => `tx:${h.hash.toLowerCase()}`)
  await waitFor(
    async () => {
      const [r] = await svc.sql<{ n: number }[]>`
        SELECT count(*)::int AS n FROM claims WHERE proof_key = ANY(${keys}) AND status = 'captured'`
      return r!.n === keys.length
    },
    { what: 'the captures', timeoutMs: 15_000 },
  )
  return keys
}

async function ledgerShape() {
  const [row] = await svc.sql<
    {
      calls: number
      batches: number
      pairs: number
      batch_entries: number
      call_entries: number
      dup: number
    }[]
  >`
    SELECT (SELECT count(*)::int FROM calls) AS calls,
           (SELECT count(DISTINCT ledger_batch_id)::int FROM calls) AS batches,
           (SELECT count(*)::int FROM (SELECT DISTINCT ledger_batch_id, account_id FROM calls) p) AS pairs,
           (SELECT count(*)::int FROM ledger_entries WHERE source_type = 'capture_batch') AS batch_entries,
           (SELECT count(*)::int FROM ledger_entries WHERE source_type = 'call') AS call_entries,
           (SELECT count(*)::int FROM (
              SELECT 1 FROM ledger_entries WHERE source_type = 'capture_batch'
              GROUP BY source_id, account_id, kind HAVING count(*) <> 1) d) AS dup`
  return row!
}

describe('capture batches', () => {
  it('a mixed run books one entry per account and kind per batch, and reconcile is clean', async () => {
    await round(3)
    await round(2)
    await round(1)
    const shape = await ledgerShape()
    expect(shape.calls).toBe(12)
    // Several batches, at least one holding more than one call of an account.
    expect(shape.batches).toBeGreaterThanOrEqual(3)
    expect(shape.pairs).toBeLessThan(shape.calls)
    // Two entries (owner share, fee) per account per batch, none per call, none twice.
    expect(shape).toMatchObject({ batch_entries: 2 * shape.pairs, call_entries: 0, dup: 0 })
    // Each batch entry is the sum of its calls, to the base unit.
    const sums = await svc.sql<{ kind: string; entry: bigint; calls: bigint }[]>`
      SELECT e.kind, e.amount_atomic AS entry,
             (SELECT sum(CASE WHEN e.kind = 'fee' THEN c.fee_atomic ELSE c.owner_share_atomic END)
              FROM calls c WHERE c.ledger_batch_id::text = e.source_id AND c.account_id = e.account_id)::bigint
               AS calls
      FROM ledger_entries e WHERE e.source_type = 'capture_batch'`
    for (const s of sums) expect(s.entry).toBe(s.calls)

    // A merchant refunds one call: its own reversing entries; the batch entries stay as they are.
    const [call] = await svc.sql<{ id: string; amount_atomic: bigint; owner_share_atomic: bigint }[]>`
      SELECT id, amount_atomic, owner_share_atomic FROM calls WHERE account_id = ${merchants[0]!.account.id}
      ORDER BY created_at LIMIT 1`
    const refund = await svc.api('/api/v1/refunds', { key: merchants[0]!.key, body: { call_id: call!.id } })
    expect(refund.status).toBe(201)
    expect(refund.body).toMatchObject({
      amount_atomic: call!.amount_atomic.toString(),
      owner_debit_atomic: call!.owner_share_atomic.toString(),
    })
    // Refunded whole: nothing more to refund.
    const again = await svc.api('/api/v1/refunds', { key: merchants[0]!.key, body: { call_id: call!.id } })
    expect(again.status).toBeGreaterThanOrEqual(400)
    expect(
      await svc.sql`SELECT kind FROM ledger_entries WHERE source_type = 'refund' AND source_id = ${refund.body.id}`,
    ).toHaveLength(3)
    expect((await ledgerShape()).batch_entries).toBe(shape.batch_entries)

    // The payout batch pays the batch entries and the refund.
    await svc.jobs.runNow('payout-batch')
    const [unpaid] = await svc.sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM ledger_entries WHERE kind IN ('owner_share', 'refund') AND payout_id IS NULL`
    expect(unpaid!.n).toBe(0)
    await waitFor(
      async () => {
        const r = await svc.api(`/api/v1/refunds/${refund.body.id}`, { key: merchants[0]!.key })
        return r.body.status === 'paid'
      },
      { what: 'the refund paid', timeoutMs: 15_000 },
    )

    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.differences).toEqual([])
    expect(report.ok).toBe(true)
    expect(report.batches).toMatchObject({
      batches: shape.batches,
      calls: 12,
      entries: shape.batch_entries,
      mismatched: 0,
    })
    expect(report.balances).toMatchObject({ drifted_accounts: 0, drifted_wallets: 0 })
    expect(report.refunds).toMatchObject({ refunds: 1, paid: 1, over_refunded: 0 })
  }, 120_000)

  it('a call charge or a batch entry tampered by one base unit is reported', async () => {
    const [call] = await svc.sql<{ id: string; batch: string; account_id: string }[]>`
      SELECT id, ledger_batch_id::text AS batch, account_id FROM calls
      WHERE account_id = ${merchants[1]!.account.id} ORDER BY created_at DESC LIMIT 1`
    const names = `capture batch ${call!.batch} of account ${call!.account_id}`

    await svc.sql`
      UPDATE calls SET amount_atomic = amount_atomic + 1, owner_share_atomic = owner_share_atomic + 1
      WHERE id = ${call!.id}`
    let report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.ok).toBe(false)
    expect(report.batches.mismatched).toBe(1)
    expect(report.differences.join('\n')).toContain(names)
    await svc.sql`
      UPDATE calls SET amount_atomic = amount_atomic - 1, owner_share_atomic = owner_share_atomic - 1
      WHERE id = ${call!.id}`

    await svc.sql`
      UPDATE ledger_entries SET amount_atomic = amount_atomic - 1
      WHERE source_type = 'capture_batch' AND source_id = ${call!.batch} AND account_id = ${call!.account_id}
        AND kind = 'fee'`
    report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.ok).toBe(false)
    expect(report.batches.mismatched).toBe(1)
    expect(report.differences.join('\n')).toContain(names)
    await svc.sql`
      UPDATE ledger_entries SET amount_atomic = amount_atomic + 1
      WHERE source_type = 'capture_batch' AND source_id = ${call!.batch} AND account_id = ${call!.account_id}
        AND kind = 'fee'`

    report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.differences).toEqual([])
  }, 60_000)
})
