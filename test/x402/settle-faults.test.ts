// Settlement under faults: broadcasts refused for a while lose no authorization that is still valid; an
// authorization that expires unsettled leaves nothing booked (logged and counted); the intake throttle answers
// new x402 payloads 503 settlement_backlog before anything is claimed.
import type { Hex } from 'viem'
import { type Chain, createWalletClient, http, publicActions } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { baseSepolia } from 'viem/chains'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { preparePaymentHeader, signPaymentHeader } from 'x402/client'
import { decodePayment } from 'x402/schemes'
import { broadcast, quoteFees } from '../../src/chain/payouts.ts'
import { type StoredAuthorization, signSettlement } from '../../src/chain/settle.ts'
import { settlements } from '../../src/observability/metrics.ts'
import { type RpcProxy, startRpcProxy } from '../helpers/rpc-proxy.ts'
import { startX402Setup, type X402Setup } from './harness.ts'

let setup: X402Setup
let gate: RpcProxy

beforeAll(async () => {
  setup = await startX402Setup({
    // The job is run by hand (runNow) so each step is observed; the throttle engages at 25 unsettled. About
    // the leader's batches: the service settles after the call (an explicit choice; the default is before).
    overrides: {
      settlement: {
        interval_ms: 3_600_000,
        throttle_backlog_count: 25,
        throttle_check_ms: 50,
        before_answer: { enabled: false },
      },
    },
    rpcUrlFor: async (chainUrl) => {
      gate = await startRpcProxy(chainUrl)
      return gate.url
    },
    logLevel: 'error',
  })
})
afterAll(async () => {
  await setup?.stop()
  await gate?.close()
})

async function outcomeCount(outcome: string): Promise<number> {
  const m = await settlements.get()
  return m.values.find((v) => v.labels.outcome === outcome)?.value ?? 0
}

function authorizationOf(header: string): { from: Hex; nonce: Hex } {
  return (decodePayment(header).payload as { authorization: { from: Hex; nonce: Hex } }).authorization
}

describe('x402 settlement under faults', () => {
  it('broadcasts refused for a while lose no valid authorization; they settle once the RPC accepts again', async () => {
    const signed = await setup.sign(20)
    for (const s of signed) expect((await setup.pay(s.header)).status).toBe(200)
    await setup.svc.flushCaptures()
    const failedBefore = await outcomeCount('broadcast_failed')

    gate.refuseBroadcasts = true
    await setup.svc.jobs.runNow('x402-settlement')
    await setup.svc.jobs.runNow('x402-settlement')
    expect(gate.refused).toBeGreaterThan(0)
    expect(await outcomeCount('broadcast_failed')).toBeGreaterThan(failedBefore)
    // Nothing settled, nothing failed, no hash left behind for a transaction that was never sent.
    const stalled = await setup.settlementState()
    expect(stalled).toMatchObject({ settled: 0, expired: 0, reverted: 0, backlog: 20, ownerShareAtomic: 0n })
    const [pending] = await setup.svc.sql<{ n: number }[]>`
      SELECT count(*)::int AS n FROM claims WHERE kind = 'eip3009' AND settlement_tx IS NOT NULL`
    expect(pending!.n).toBe(0)

    gate.refuseBroadcasts = false
    await setup.svc.jobs.runNow('x402-settlement')
    const s = await setup.settlementState()
    expect(s).toMatchObject({ settled: 20, expired: 0, reverted: 0, backlog: 0 })
    const share = (setup.priceAtomic * BigInt(setup.svc.config.fees.owner_share_bps)) / 10_000n
    expect(s.ownerShareAtomic).toBe(20n * share)
    for (const { header } of signed) {
      const a = authorizationOf(header)
      expect(await setup.authorizationUsed(a.from, a.nonce)).toBe(true)
    }
  })

  it('a broadcast whose answer was lost: the books name the transaction that carried the money', async () => {
    const signed = await setup.sign(3)
    for (const s of signed) expect((await setup.pay(s.header)).status).toBe(200)
    await setup.svc.flushCaptures()
    const keys = (
      await setup.svc.sql<{ proof_key: string }[]>`
        SELECT proof_key FROM claims WHERE kind = 'eip3009' AND settled_at IS NULL AND settlement_error IS NULL`
    ).map((r) => r.proof_key)
    expect(keys).toHaveLength(3)

    // The node takes the transactions and mines them; the settler only sees errors and forgets its hashes.
    gate.loseBroadcastAnswers = true
    await setup.svc.jobs.runNow('x402-settlement')
    gate.loseBroadcastAnswers = false
    for (const { header } of signed) {
      const a = authorizationOf(header)
      expect(await setup.authorizationUsed(a.from, a.nonce)).toBe(true)
    }
    // The next run signs them again; that transaction finds them used and books them settled.
    await setup.svc.jobs.runNow('x402-settlement')
    await setup.svc.jobs.runNow('x402-settlement')
    const rows = await setup.svc.sql<{ proof_key: string; settlement_tx: string; settled: boolean }[]>`
      SELECT proof_key, settlement_tx, settled_at IS NOT NULL AS settled FROM claims
      WHERE proof_key = ANY(${keys}::text[])`
    for (const r of rows) {
      expect(r.settled).toBe(true)
      // The recorded transaction is the one that moved the money, not the one that found it gone.
      const receipt = await setup.svc.chain.publicClient.getTransactionReceipt({
        hash: r.settlement_tx as Hex,
      })
      expect(receipt.status).toBe('success')
    }
    const differences = await setup.reconcileDifferences()
    expect(differences.filter((d) => keys.some((k) => d.includes(k)) || d.startsWith('inflow'))).toEqual([])
  })

  it("a settlement queued over a minute behind a hole in its sender's nonces is settled again, once", async () => {
    const [paid] = await setup.sign(1)
    expect((await setup.pay(paid!.header)).status).toBe(200)
    await setup.svc.flushCaptures()
    const [claim] = await setup.svc.sql<{ proof_key: string; authorization_payload: StoredAuthorization }[]>`
      SELECT proof_key, authorization_payload FROM claims
      WHERE kind = 'eip3009' AND settled_at IS NULL AND settlement_error IS NULL`
    // A settler that went away with a gap: its transaction carrying this authorization sits at nonce 1 of an
    // account whose nonce 0 nothing will ever fill; the node keeps it queued.
    const settler = privateKeyToAccount(generatePrivateKey())
    const client = setup.svc.chain.publicClient
    await client.request({
      method: 'anvil_setBalance' as never,
      params: [settler.address, '0xde0b6b3a7640000'] as never,
    })
    const queued = await signSettlement(settler, {
      chainId: setup.svc.chain.chainId,
      usdc: setup.svc.chain.usdc.address,
      authorization: claim!.authorization_payload,
      nonce: 1,
      gas: 150_000n,
      fees: await quoteFees(client),
    })
    expect(await broadcast(client, queued.rawTx)).toEqual({ ok: true })
    await setup.svc.sql`
      UPDATE claims SET settlement_tx = ${queued.hash} WHERE proof_key = ${claim!.proof_key}`

    // Young, it is waited for: a second transaction would only revert once the first is mined.
    await setup.svc.jobs.runNow('x402-settlement')
    const [waiting] = await setup.svc.sql<{ settlement_tx: string; settled: boolean }[]>`
      SELECT settlement_tx, settled_at IS NOT NULL AS settled FROM claims WHERE proof_key = ${claim!.proof_key}`
    expect(waiting).toEqual({ settlement_tx: queued.hash, settled: false })

    // Over a minute behind the hole: taken as lost, signed again from the treasury, settled.
    await setup.svc.sql`
      UPDATE claims SET captured_at = now() - interval '2 minutes' WHERE proof_key = ${claim!.proof_key}`
    await setup.svc.jobs.runNow('x402-settlement')
    await setup.svc.jobs.runNow('x402-settlement')
    const [settled] = await setup.svc.sql<{ settlement_tx: string; settled: boolean }[]>`
      SELECT settlement_tx, settled_at IS NOT NULL AS settled FROM claims WHERE proof_key = ${claim!.proof_key}`
    expect(settled!.settled).toBe(true)
    expect(settled!.settlement_tx).not.toBe(queued.hash)
    const a = claim!.authorization_payload
    expect(await setup.authorizationUsed(a.from, a.nonce)).toBe(true)

    // The hole filled at last: the queued transaction is mined and moves nothing (the token refuses an
    // authorization twice); the payer paid once.
    const before = await setup.balanceOf(a.from)
    const filler = await settler.signTransaction({
      type: 'eip1559',
      chainId: setup.svc.chain.chainId,
      to: settler.address,
      value: 0n,
      nonce: 0,
      gas: 21_000n,
      ...(await quoteFees(client)),
    })
    expect(await broadcast(client, filler)).toEqual({ ok: true })
    const receipt = await client.waitForTransactionReceipt({ hash: queued.hash, timeout: 30_000 })
    expect(receipt.status).toBe('reverted')
    expect(await setup.balanceOf(a.from)).toBe(before)
    // Two minutes old, the claim engaged the intake throttle (throttle_oldest_s) until it settled; the flag
    // is read again every throttle_check_ms, and the next test pays at once: read it now.
    await setup.svc.refreshSettlementThrottle()
  })

  it('an authorization that expires unsettled leaves nothing booked, and is counted', async () => {
    const requirements = await setup.requirements()
    const payer = setup.chain.payers[1]!
    const wallet = createWalletClient({
      account: privateKeyToAccount(payer.privateKey),
      chain: baseSepolia as Chain,
      transport: http(setup.chain.rpcUrl),
    }).extend(publicActions)
    // The library's two steps, with a window just long enough to be accepted (6 s settlement margin).
    const unsigned = preparePaymentHeader(payer.address, 1, requirements)
    const validBefore = Math.floor(Date.now() / 1000) + 8
    unsigned.payload.authorization.validBefore = String(validBefore)
    const header = await signPaymentHeader(wallet, requirements, unsigned)
    expect((await setup.pay(header)).status).toBe(200)
    await setup.svc.flushCaptures()
    const before = await setup.settlementState()
    const expiredBefore = await outcomeCount('expired')

    // The settler is down (broadcasts refused) until the window closes.
    gate.refuseBroadcasts = true
    await setup.svc.jobs.runNow('x402-settlement')
    // The authorization's window closing is the thing under test: validBefore is wall-clock time.
    await new Promise((r) => setTimeout(r, Math.max(0, validBefore * 1000 - Date.now()) + 1_100))
    gate.refuseBroadcasts = false
    await setup.svc.jobs.runNow('x402-settlement')

    const after = await setup.settlementState()
    expect(after.expired).toBe(before.expired + 1)
    expect(after.settled).toBe(before.settled)
    expect(after.ownerShareAtomic).toBe(before.ownerShareAtomic)
    expect(after.feeAtomic).toBe(before.feeAtomic)
    expect(after.unsettledBookedEntries).toBe(0)
    expect(await outcomeCount('expired')).toBe(expiredBefore + 1)
    const a = authorizationOf(header)
    expect(await setup.authorizationUsed(a.from, a.nonce)).toBe(false)
  })

  it('new x402 payloads get 503 settlement_backlog with Retry-After once the backlog passes its limit', async () => {
    const signed = await setup.sign(40)
    let served = 0
    let refused: Awaited<ReturnType<X402Setup['pay']>> | null = null
    for (const s of signed) {
      const upstreamBefore = setup.upstream.count()
      const [claimsBefore] = await setup.svc.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM claims`
      const r = await setup.pay(s.header)
      if (r.status === 200) {
        served++
        await setup.svc.flushCaptures()
        // The throttle reads the new backlog now rather than at its next tick.
        await setup.svc.refreshSettlementThrottle()
        continue
      }
      refused = r
      // Refused before anything was claimed or forwarded.
      const [claimsAfter] = await setup.svc.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM claims`
      expect(claimsAfter!.n).toBe(claimsBefore!.n)
      expect(setup.upstream.count()).toBe(upstreamBefore)
      break
    }
    expect(refused).toMatchObject({
      status: 503,
      retryAfter: '5',
      body: { error: { code: 'settlement_backlog' } },
    })
    expect(served).toBeGreaterThanOrEqual(25)
    expect(served).toBeLessThan(30)

    // Once settled, intake resumes.
    await setup.svc.jobs.runNow('x402-settlement')
    await setup.svc.refreshSettlementThrottle()
    expect((await setup.pay(signed[39]!.header)).status).toBe(200)
  })
})
