// A settlement tollgate itself sends moves the payers' money to the treasury: the transfer watcher sees it
// like any transfer. It is the money of x402 calls already booked, so it must never be matched to a checkout
// payment by its amount (the payment would be paid by money that is not its own, counted twice) nor listed
// as an unmatched inflow (no one sent it unasked), nor taken as a transaction-hash proof by whoever reads its
// hash on chain (a call served with money already booked). Both senders: the leader's batch (the treasury)
// and a settler slot (settled before the answer).
import { afterEach, describe, expect, it } from 'vitest'
import { callApi } from '../helpers/service.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { registerMerchantKey, startX402Setup, type X402Setup } from '../x402/harness.ts'

// One call priced 0.009001 USDC, settled alone: a transfer of 9,001 base units, the figure of a 0.009 USDC
// payment (the smallest free offset is 1).
const PRICE_USD = 0.009001
const jobs = { payouts: { interval_ms: 3_600_000 }, chain: { poll_interval_ms: 100 } }

let setup: X402Setup | undefined
afterEach(async () => {
  await setup?.stop()
  setup = undefined
})

async function settledAlone(before: boolean): Promise<{ s: X402Setup; key: string; paymentId: string }> {
  const s = await startX402Setup({
    priceUsd: PRICE_USD,
    overrides: {
      ...jobs,
      settlement: { interval_ms: 3_600_000, per_transaction: 50, before_answer: { enabled: before } },
    } as never,
    logLevel: 'error',
  })
  setup = s
  const key = await registerMerchantKey(s.svc.url, s.chain.payers[3]!.address, 'checkout Co')
  const created = await callApi(s.svc.url, '/api/v1/payments', {
    key,
    body: { amount: 0.009, description: 'a checkout' },
  })
  expect(created.status, created.text).toBe(201)
  expect(created.body.amount_requested_atomic).toBe('9001')
  const [signed] = await s.sign(1)
  expect((await s.pay(signed!.header)).status).toBe(200)
  await s.svc.flushCaptures()
  if (!before) await s.svc.jobs.runNow('x402-settlement')
  await waitFor(async () => (await s.settlementState()).settled === 1, {
    what: 'the settlement mined and recorded',
    timeoutMs: 10_000,
  })
  return { s, key, paymentId: created.body.id }
}

/** Once the transfer watcher's cursor is past the block of transaction `tx`. */
async function watcherPast(s: X402Setup, tx: string) {
  const receipt = await s.svc.chain.publicClient.getTransactionReceipt({ hash: tx as `0x${string}` })
  await waitFor(
    async () => {
      const rows = await s.svc.sql<{ n: number }[]>`
        SELECT count(*)::int AS n FROM watcher_cursors WHERE next_block > ${receipt.blockNumber.toString()}`
      return rows[0]!.n > 0
    },
    { what: "the watcher past the settlement's block", timeoutMs: 10_000 },
  )
}

async function expectLeftAlone(s: X402Setup, key: string, paymentId: string) {
  const [claim] = await s.svc.sql<{ tx: string }[]>`
    SELECT settlement_tx AS tx FROM claims WHERE kind = 'eip3009' AND settled_at IS NOT NULL`
  const tx = claim!.tx.toLowerCase()
  // The watcher has gone past the settlement's block (its cursor), with the payment's figure open.
  await watcherPast(s, tx)
  const payment = await callApi(s.svc.url, `/api/v1/payments/${paymentId}`, { key })
  expect(payment.body.status).toBe('pending')
  expect(await s.svc.sql`SELECT 1 FROM claims WHERE proof_key = ${`tx:${tx}`}`).toHaveLength(0)
  expect(await s.svc.sql`SELECT 1 FROM unmatched_inflows WHERE tx_hash = ${tx}`).toHaveLength(0)
  expect(await s.reconcileDifferences()).toEqual([])
}

describe("tollgate's own settlement transaction is neither a checkout payment of its figure nor unmatched", () => {
  it("the leader's batch, sent from the treasury; reconcile names one taken before", async () => {
    const { s, key, paymentId } = await settledAlone(false)
    await expectLeftAlone(s, key, paymentId)
    // What the watcher did before: the payment paid by the settlement's hash. Written as it wrote it.
    const [claim] = await s.svc.sql<{ tx: string }[]>`
      SELECT lower(settlement_tx) AS tx FROM claims WHERE kind = 'eip3009' AND settled_at IS NOT NULL`
    await s.svc.sql`
      INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic, status,
                          proof_at, horizon_at)
      SELECT ${`tx:${claim!.tx}`}, 'tx', 'payment', id, account_id, ${s.chain.payers[0]!.address}, 9001,
             'applied', now(), now()
      FROM payments WHERE id = ${paymentId}`
    const differences = await s.reconcileDifferences()
    expect(differences).toContain(
      `claim tx:${claim!.tx}: a transaction-hash proof of a transaction that settled other claims`,
    )
    expect(differences.some((d) => d.startsWith('inflow: chain 9001 ≠ books 18002'))).toBe(true)
  })

  it("settled before the answer, from the instance's settler slot", async () => {
    const { s, key, paymentId } = await settledAlone(true)
    await expectLeftAlone(s, key, paymentId)
  })
})

describe("tollgate's own settlement transaction as a transaction-hash proof", () => {
  it('pays no metered call, before or after the watcher saw it: its money is the x402 call’s already', async () => {
    const { s } = await settledAlone(true)
    const [claim] = await s.svc.sql<{ tx: string }[]>`
      SELECT settlement_tx AS tx FROM claims WHERE kind = 'eip3009' AND settled_at IS NOT NULL`
    const tx = claim!.tx as `0x${string}`
    // 9,001 base units moved to the treasury in it: enough for the 0.009001 call, were they anyone's.
    const asked = async () => {
      const r = await fetch(s.meteredUrl, { headers: { 'X-PAYMENT': tx } })
      const body = (await r.json()) as { error?: string }
      expect(r.status, JSON.stringify(body)).toBe(402)
      expect(body.error).toBe('own_settlement')
      expect(r.headers.get('retry-after')).toBeNull()
    }
    await asked()
    await watcherPast(s, tx)
    await asked()
    // Only the x402 call reached the upstream; nothing claimed the hash.
    expect(s.upstream.count()).toBe(1)
    expect(await s.svc.sql`SELECT 1 FROM claims WHERE proof_key = ${`tx:${tx.toLowerCase()}`}`).toHaveLength(
      0,
    )
  })
})
