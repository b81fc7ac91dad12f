// The x402 upto settlement job on a real service, database and anvil: captured upto calls (permits signed by
// the published client for a 0.50 USDC maximum) settle on chain for exactly their charges, in one batch
// through the treasury's UptoSettlementBatcher (or one transaction for a permit naming the treasury itself);
// a zero charge sends nothing; a payer who moves their funds fails only their own; revenue is booked with the
// settlement, and reconcile finds charged ≤ signed and settled = booked, and says so when it is not.
import type { Address } from 'viem'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { captureClaim, claimProof } from '../../src/books/claims.ts'
import { type StoredUptoPermit, uptoPermitFromStored, uptoProofKey } from '../../src/chain/upto-permit.ts'
import { installUptoContracts, uptoBatcherAddress } from '../../src/chain/upto-settle.ts'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import { checkClaims } from '../../src/control-plane/jobs/reconcile-claims.ts'
import { newId } from '../../src/ids.ts'
import { splitOwnerShare } from '../../src/money.ts'
import { UPTO_SETTLEMENT_JOB } from '../../src/schemes/upto/settle-after.ts'
import { chainClients, type Funded, payUsdc, usdcBalance } from '../helpers/accounts.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { approvedPayer, publishedUptoPermit } from '../helpers/upto-payer.ts'

const MAX = 500_000n
const { rpcUrl } = chainClients()

let svc: TestService
let merchant: Awaited<ReturnType<typeof registerMerchant>>
let batcher: Address

beforeAll(async () => {
  svc = await startTestService({
    overrides: {
      settlement: { interval_ms: 3_600_000, per_transaction: 50 },
      payouts: { interval_ms: 3_600_000 },
    },
  })
  batcher = uptoBatcherAddress(svc.treasury.address)
  await installUptoContracts(rpcUrl, svc.treasury.address)
  merchant = await registerMerchant(svc)
})
afterAll(async () => {
  await svc?.stop()
})

/** A served upto call as the scheme books it: claimed at the signed maximum, captured for its charge. */
async function servedCall(permit: StoredUptoPermit, charge: bigint): Promise<string> {
  const proofKey = uptoProofKey(uptoPermitFromStored(permit))
  const claimed = await claimProof(svc.sql, {
    proofKey,
    kind: 'upto',
    proofAtMs: null,
    targetType: 'call',
    targetId: 'ep_upto',
    accountId: merchant.account.id,
    payer: permit.from,
    amountAtomic: BigInt(permit.amount),
    retryWindowMs: 600_000,
    leaseMs: 30_000,
    authorization: permit,
  })
  expect(claimed.outcome).toBe('won')
  const split = splitOwnerShare(charge, svc.config.fees.owner_share_bps)
  const captured = await captureClaim(svc.sql, {
    callId: newId('call'),
    proofKey,
    endpointId: 'ep_upto',
    accountId: merchant.account.id,
    ownerWallet: merchant.wallet,
    payer: permit.from,
    amountAtomic: charge,
    ownerShareAtomic: split.owner,
    feeAtomic: split.fee,
    upstreamStatus: 200,
    method: 'POST',
  })
  expect(captured.ok).toBe(true)
  return proofKey
}

async function claimRows(keys: string[]) {
  return svc.sql<
    { proof_key: string; settled_atomic: string | null; settlement_error: string | null; tx: string | null }[]
  >`
    SELECT proof_key, settled_atomic::text, settlement_error, settlement_tx AS tx FROM claims
    WHERE proof_key = ANY(${keys}::text[]) ORDER BY array_position(${keys}::text[], proof_key)`
}

/** The upto settlement check of the admin port's /readyz. */
async function uptoReadiness(): Promise<{ ok: boolean; detail: string }> {
  const r = await fetch(`http://127.0.0.1:${svc.adminPort}/readyz`)
  const body = (await r.json()) as { checks: Array<{ name: string; ok: boolean; detail: string }> }
  return body.checks.find((c) => c.name === 'x402_upto_settlement')!
}

async function treasuryNonce(): Promise<number> {
  return svc.chain.publicClient.getTransactionCount({ address: svc.treasury.address, blockTag: 'pending' })
}

describe('x402 upto settlement', () => {
  it('settles each permit for exactly its charge, in one batch, and books that revenue', async () => {
    const charges = [123_457n, 0n, MAX, 1n, 77_000n]
    // One after another: concurrent mints from the shared deployer can race for its nonce.
    const payers: Funded[] = []
    for (const _ of charges) payers.push(await approvedPayer())
    const permits = await Promise.all(
      payers.map((p) =>
        publishedUptoPermit(p, { max: MAX, payTo: svc.treasury.address, facilitator: batcher }),
      ),
    )
    const keys = await Promise.all(permits.map((p, i) => servedCall(p, charges[i]!)))
    // The last payer empties the wallet after being served: only that permit fails.
    const drained = payers[4]!
    await payUsdc(drained, payers[0]!.address, await usdcBalance(drained.address))

    // Readiness names the backlog while the permits wait (deadlines 300 s away: above the 60 s margin).
    const waiting = await uptoReadiness()
    expect(waiting.ok).toBe(true)
    expect(waiting.detail).toMatch(/^5 unsettled, soonest deadline in \d+ s$/)
    const before = await Promise.all(payers.map((p) => usdcBalance(p.address)))
    const treasuryBefore = await usdcBalance(svc.treasury.address)
    const nonceBefore = await treasuryNonce()
    await svc.jobs.runNow(UPTO_SETTLEMENT_JOB)
    expect((await treasuryNonce()) - nonceBefore).toBe(1)

    const after = await Promise.all(payers.map((p) => usdcBalance(p.address)))
    expect(before.map((b, i) => b - after[i]!)).toEqual([123_457n, 0n, MAX, 1n, 0n])
    expect((await usdcBalance(svc.treasury.address)) - treasuryBefore).toBe(123_457n + MAX + 1n)
    const rows = await claimRows(keys)
    expect(rows.map((r) => [r.settled_atomic, r.settlement_error])).toEqual([
      ['123457', null],
      ['0', null],
      [MAX.toString(), null],
      ['1', null],
      [null, 'reverted'],
    ])
    // The zero charge sent nothing; the others share the one batch transaction.
    expect(rows[1]!.tx).toBeNull()
    expect(new Set([rows[0]!.tx, rows[2]!.tx, rows[3]!.tx, rows[4]!.tx]).size).toBe(1)

    const [booked] = await svc.sql<{ owner: string; fee: string }[]>`
      SELECT coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'owner_share'), 0)::text AS owner,
             coalesce(sum(e.amount_atomic) FILTER (WHERE e.kind = 'fee'), 0)::text AS fee
      FROM ledger_entries e
      WHERE e.source_type = 'settlement_batch'
        AND e.source_id IN (SELECT c.ledger_batch_id::text FROM calls c
                            WHERE call_proof_key(c.proof_key, c.proof) = ANY(${keys}::text[]))`
    const bps = svc.config.fees.owner_share_bps
    const owner = [123_457n, 0n, MAX, 1n].reduce((s, c) => s + splitOwnerShare(c, bps).owner, 0n)
    expect(BigInt(booked!.owner)).toBe(owner)
    expect(BigInt(booked!.owner) + BigInt(booked!.fee)).toBe(123_457n + MAX + 1n)

    // Reconcile: claims consistent (charged ≤ signed, settled = booked) and the chain's inflow matches.
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.differences).toEqual([])
    expect((await uptoReadiness()).detail).toBe('no backlog')
    // A second run finds nothing to send.
    await svc.jobs.runNow(UPTO_SETTLEMENT_JOB)
    expect(await treasuryNonce()).toBe(nonceBefore + 1)
  })

  it('settles a permit naming the treasury itself in its own transaction', async () => {
    const payer = await approvedPayer()
    const permit = await publishedUptoPermit(payer, {
      max: MAX,
      payTo: svc.treasury.address,
      facilitator: svc.treasury.address,
    })
    const key = await servedCall(permit, 4_321n)
    const before = await usdcBalance(payer.address)
    await svc.jobs.runNow(UPTO_SETTLEMENT_JOB)
    expect(before - (await usdcBalance(payer.address))).toBe(4_321n)
    expect((await claimRows([key]))[0]).toMatchObject({ settled_atomic: '4321', settlement_error: null })
  })

  it('reconcile names an upto call charged above its signed maximum, and never sends it', async () => {
    const payer = await approvedPayer()
    const permit = await publishedUptoPermit(payer, {
      max: MAX,
      payTo: svc.treasury.address,
      facilitator: batcher,
    })
    const key = await servedCall(permit, MAX + 1n)
    const from = new Date(Date.now() - 60_000)
    const check = await checkClaims(svc.sql, { from, to: new Date(Date.now() + 60_000) })
    expect(check.upto_charged_above_signed).toBe(1)
    expect(check.differences.join('\n')).toContain(
      `claim ${key}: upto call charged more than its payer signed`,
    )
    const before = await usdcBalance(payer.address)
    await svc.jobs.runNow(UPTO_SETTLEMENT_JOB)
    expect(await usdcBalance(payer.address)).toBe(before)
    expect((await claimRows([key]))[0]).toMatchObject({
      settled_atomic: null,
      settlement_error: 'over_maximum',
    })
  })
})
