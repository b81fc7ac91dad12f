// The running balances (migration 0011) equal the sums of the ledger entries after a mixed run: captured
// calls, a paid checkout payment, refunds of expired claims, x402 settlements (settled and failed), a payout
// that failed and the real payout that then confirmed; GET /account answers the same as the old sum over the
// entries; and reconcile fails when a stored balance drifts from its entries.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type Capture, claimAndCapture, markRefundDue } from '../../src/books/claims.ts'
import { failPayout, markPayoutSubmitted, recordPayouts } from '../../src/books/payouts.ts'
import { failSettlement, settleAuthorizations } from '../../src/books/settlement.ts'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import { checkBalances } from '../../src/control-plane/jobs/reconcile-balances.ts'
import { newId } from '../../src/ids.ts'
import { type Funded, fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { createOwners, type Owner, payTreasury, seedPaidCalls } from '../payouts/seed.ts'

const HOUR = 3_600_000
let svc: TestService
let owners: Owner[]
let payers: Funded[]

beforeAll(async () => {
  // Jobs are run by hand here (runNow): their timers are pushed far out so nothing moves under the test.
  svc = await startTestService({
    overrides: {
      payouts: { interval_ms: HOUR, threshold_check_interval_ms: HOUR },
      settlement: { interval_ms: HOUR },
      jobs: { expiry_interval_ms: HOUR },
    },
  })
  owners = await createOwners(svc.sql, 2)
  payers = [await fundedAccount(100_000_000n), await fundedAccount(100_000_000n)]
}, 120_000)
afterAll(async () => {
  await svc?.stop()
})

/** The balance exactly as GET /account computed it before migration 0011: a sum over every entry. */
async function summedBalance(accountId: string) {
  const [row] = await svc.sql`
    SELECT
      coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind IN ('owner_share', 'fee')), 0)::bigint AS captured,
      coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'owner_share'), 0)::bigint AS owner_share,
      coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'fee'), 0)::bigint AS fees,
      coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'owner_share' AND p.status = 'confirmed'), 0)::bigint AS paid_out,
      coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'owner_share' AND p.status IS DISTINCT FROM 'confirmed'), 0)::bigint AS pending,
      coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'owner_share' AND p.status IN ('pending', 'submitted')), 0)::bigint AS in_flight,
      coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'refund' AND p.status = 'confirmed'), 0)::bigint AS refunded,
      coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'refund' AND p.status IS DISTINCT FROM 'confirmed'), 0)::bigint AS refunds_pending
    FROM ledger_entries e LEFT JOIN payouts p ON p.id = e.payout_id
    WHERE e.account_id = ${accountId}`
  return Object.fromEntries(Object.entries(row!).map(([k, v]) => [k, String(v)]))
}

/** Every stored balance, account and wallet, equals the entries' sums (the reconcile check, full scope). */
async function expectExact() {
  const check = await checkBalances(svc.sql, null)
  expect(check.differences).toEqual([])
  expect(check.accounts_checked).toBeGreaterThan(0)
}

async function x402Calls(owner: Owner, n: number): Promise<string[]> {
  const keys = Array.from({ length: n }, () => `auth:31337:usdc:0xpayer:${newId('call')}`)
  await svc.sql`
    INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic, status,
                        retry_until, authorization_payload, horizon_at)
    SELECT k, 'eip3009', 'call', 'ep_x402', ${owner.accountId}, ${payers[0]!.address}, 20000, 'claimed',
           now() + interval '10 minutes', '{}'::jsonb, now()
    FROM unnest(${keys}::text[]) AS t(k)`
  const captures: Capture[] = keys.map((k) => ({
    callId: newId('call'),
    proofKey: k,
    endpointId: 'ep_x402',
    accountId: owner.accountId,
    ownerWallet: owner.wallet,
    payer: payers[0]!.address,
    amountAtomic: 20_000n,
    ownerShareAtomic: 19_000n,
    feeAtomic: 1_000n,
    upstreamStatus: 200,
    method: 'GET',
  }))
  await claimAndCapture(svc.sql, { claims: [], captures })
  return keys
}

describe('running balances', () => {
  it('equal the sums of the entries after a mixed run, and GET /account answers the same', async () => {
    // Captured transaction-hash calls (real transfers, the data plane's capture statement).
    await seedPaidCalls(svc.sql, { treasury: svc.chain.treasury, owners, payers, calls: 40 })
    await expectExact()

    // A paid checkout payment.
    const merchant = await registerMerchant(svc, owners[0]!.wallet)
    const created = await svc.api('/api/v1/payments', {
      key: merchant.key,
      body: { amount: 2, description: 'b' },
    })
    expect(created.status).toBe(201)
    const hash = await payUsdc(payers[1]!, svc.chain.treasury, BigInt(created.body.amount_requested_atomic))
    const paid = await fetch(created.body.payment_url, { method: 'POST', headers: { 'x-payment': hash } })
    expect(paid.status).toBe(200)

    // Refunds: real transfers whose claims ran out of their window uncaptured.
    const refundHashes = await payTreasury(svc.chain.treasury, [
      { payer: payers[0]!, amount: 70_000n },
      { payer: payers[1]!, amount: 90_000n },
    ])
    await svc.sql`
      INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic, status,
                          retry_until, horizon_at)
      SELECT k, 'tx', 'call', 'ep_seeded', ${owners[1]!.accountId}, payer, amt, 'claimed', now() - interval '1 second',
             now()
      FROM unnest(${refundHashes.map((h) => `tx:${h.toLowerCase()}`)}::text[],
                  ${[payers[0]!.address, payers[1]!.address]}::text[], ${['70000', '90000']}::bigint[])
        AS t(k, payer, amt)`
    expect((await markRefundDue(svc.sql)).ok).toBe(true)

    // x402: captured (no revenue yet), then two settled (revenue booked) and one failed (nothing booked).
    const keys = await x402Calls(owners[1]!, 3)
    await expectExact()
    expect(await settleAuthorizations(svc.sql, { proofKeys: [keys[0]!, keys[1]!] })).toEqual([
      keys[0],
      keys[1],
    ])
    expect(await failSettlement(svc.sql, { proofKey: keys[2]!, reason: 'expired' })).toBe(true)
    await expectExact()

    // A payout batch recorded (entries in flight), submitted, then failed: its entries are unpaid again.
    // Recorded under another treasury, so the real treasury's nonces stay untouched.
    const recorded = await recordPayouts(svc.sql, {
      treasury: '0x000000000000000000000000000000000000dEaD',
      firstNonce: 0,
      minAtomic: 1n,
      maxWallets: 100,
      maxEntries: 10_000,
      afford: () => null,
      sign: async ({ nonce }) => ({ rawTx: '0x', hash: `0x${nonce.toString(16).padStart(64, 'f')}` }),
    })
    expect(recorded.ok && recorded.payouts.length).toBeGreaterThan(0)
    await expectExact()
    const inFlight = await svc.sql`SELECT sum(in_flight_atomic)::bigint AS n FROM account_balance_totals`
    expect(inFlight[0]!.n).toBeGreaterThan(0n)
    const failing = recorded.ok ? recorded.payouts : []
    await markPayoutSubmitted(svc.sql, failing[0]!.id)
    for (const p of failing) {
      const r = await failPayout(svc.sql, { id: p.id, error: 'reverted', retryAt: new Date(Date.now() - 1) })
      expect(r.ok).toBe(true)
    }
    await expectExact()

    // The real payout batch pays everyone on chain and confirms: paid out and refunded.
    await svc.jobs.runNow('payout-batch')
    const open =
      await svc.sql`SELECT count(*)::int AS n FROM payouts WHERE status IN ('pending', 'submitted')`
    expect(open[0]!.n).toBe(0)
    await expectExact()
    const [totals] = await svc.sql`
      SELECT sum(paid_out_atomic)::bigint AS paid, sum(refunded_atomic)::bigint AS refunded FROM account_balance_totals`
    expect(totals!.paid).toBeGreaterThan(0n)
    expect(totals!.refunded).toBe(160_000n)

    // GET /account reads the one row, and says what the old sum over the entries said.
    for (const accountId of [merchant.account.id as string, owners[1]!.accountId]) {
      const want = await summedBalance(accountId)
      const [row] = await svc.sql`SELECT id FROM accounts WHERE id = ${accountId}`
      expect(row).toBeTruthy()
      const stored = await svc.sql`
        SELECT owner_share_atomic + fees_atomic AS captured, owner_share_atomic AS owner_share, fees_atomic AS fees,
               paid_out_atomic AS paid_out, owner_share_atomic - paid_out_atomic AS pending,
               in_flight_atomic AS in_flight, refunded_atomic AS refunded,
               refunds_atomic - refunded_atomic AS refunds_pending
        FROM account_balance_totals WHERE account_id = ${accountId}`
      expect(Object.fromEntries(Object.entries(stored[0]!).map(([k, v]) => [k, String(v)]))).toEqual(want)
    }
    const api = await svc.api('/api/v1/account', { key: merchant.key })
    expect(api.status).toBe(200)
    const want = await summedBalance(merchant.account.id)
    expect(api.body.balance.captured.amount_atomic).toBe(want.captured)
    expect(api.body.balance.paid_out.amount_atomic).toBe(want.paid_out)
    expect(api.body.balance.pending.amount_atomic).toBe(want.pending)

    // The whole run reconciles, balances included.
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.differences).toEqual([])
    expect(report.balances.drifted_accounts).toBe(0)
  }, 180_000)

  it('reconcile fails on a balance that drifted from its entries, and names it', async () => {
    const [acct] = await svc.sql<{ account_id: string; slot: number }[]>`
      SELECT account_id, slot FROM account_balances LIMIT 1`
    const [wallet] = await svc.sql<{ slot: number }[]>`
      SELECT slot FROM wallet_balances WHERE wallet = ${owners[0]!.wallet} LIMIT 1`
    const drift = (fee: number, unpaid: number) => [
      svc.sql`UPDATE account_balances SET fees_atomic = fees_atomic + ${fee}
              WHERE account_id = ${acct!.account_id} AND slot = ${acct!.slot}`,
      svc.sql`UPDATE wallet_balances SET unpaid_atomic = unpaid_atomic + ${unpaid}
              WHERE wallet = ${owners[0]!.wallet} AND slot = ${wallet!.slot}`,
    ]
    await Promise.all(drift(1, 5))
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.ok).toBe(false)
    expect(report.balances.drifted_accounts).toBe(1)
    expect(report.balances.drifted_wallets).toBe(1)
    expect(report.differences.join('\n')).toContain(`balance of account ${acct!.account_id}`)
    // A ranged run checks the accounts touched in its range: an old drift is the full run's to find.
    const ranged = await checkBalances(svc.sql, { since: new Date(Date.now() + 60_000) })
    expect(ranged.accounts_checked).toBe(0)
    await Promise.all(drift(-1, -5))
    expect((await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })).ok).toBe(true)
  }, 60_000)
})
