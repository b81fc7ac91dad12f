// An EIP-3009 authorization pays as x402 (or MPP), claimed by its nonce; tollgate settles it after the call
// (or before the answer). Its payer, served by it, can submit the very authorization on chain themselves before
// tollgate does (anyone can, the moment it sits in a pending settlement). The transfer that makes is the
// authorization's money, which tollgate's settlement then finds used and books: presented as a transaction-hash
// proof it would serve a second call, and matched by its amount it would pay a checkout payment, with money
// already booked. Neither: the proof is refused (`authorization_transfer`), the watcher leaves the transfer
// out, and the books and the chain agree.
import type { Hex } from 'viem'
import { createWalletClient, http } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { usdcAbi } from '../../src/chain/usdc.ts'
import { callApi } from '../helpers/service.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { registerMerchantKey, startX402Setup, type X402Setup } from './harness.ts'

// One call priced 0.009001 USDC: an authorization of 9,001 base units, the figure of a 0.009 USDC payment.
const PRICE_USD = 0.009001

interface SignedAuthorization {
  signature: Hex
  authorization: { from: Hex; to: Hex; value: string; validAfter: string; validBefore: string; nonce: Hex }
}

let s: X402Setup
let key: string
let paymentId: string
let tx: Hex

beforeAll(async () => {
  s = await startX402Setup({
    priceUsd: PRICE_USD,
    overrides: {
      payouts: { interval_ms: 3_600_000 },
      chain: { poll_interval_ms: 100 },
      // Settled after the call, by the leader's batch when the test runs it: the payer's window.
      settlement: { interval_ms: 3_600_000, per_transaction: 50, before_answer: { enabled: false } },
    } as never,
    logLevel: 'error',
  })
  key = await registerMerchantKey(s.svc.url, s.chain.payers[3]!.address, 'checkout Co')
  const created = await callApi(s.svc.url, '/api/v1/payments', {
    key,
    body: { amount: 0.009, description: 'a checkout of the same figure' },
  })
  expect(created.status, created.text).toBe(201)
  expect(created.body.amount_requested_atomic).toBe('9001')
  paymentId = created.body.id

  // Served once by the authorization (the published v1 client's header).
  const [signed] = await s.sign(1)
  expect((await s.pay(signed!.header)).status).toBe(200)
  await s.svc.flushCaptures()

  // The payer submits the same authorization themselves, before tollgate settles it.
  const { payload } = JSON.parse(Buffer.from(signed!.header, 'base64').toString()) as {
    payload: SignedAuthorization
  }
  const a = payload.authorization
  const payer = createWalletClient({
    account: privateKeyToAccount(s.chain.payers[signed!.payer]!.privateKey),
    transport: http(s.chain.rpcUrl),
  })
  tx = await payer.writeContract({
    address: s.chain.usdcAddress,
    abi: usdcAbi,
    functionName: 'transferWithAuthorization',
    args: [
      a.from,
      a.to,
      BigInt(a.value),
      BigInt(a.validAfter),
      BigInt(a.validBefore),
      a.nonce,
      payload.signature,
    ],
    chain: null,
  })
  const receipt = await s.svc.chain.publicClient.waitForTransactionReceipt({ hash: tx })
  expect(receipt.status).toBe('success')
})

afterAll(async () => {
  await s?.stop()
})

async function presented(): Promise<void> {
  const r = await fetch(s.meteredUrl, { headers: { 'X-PAYMENT': tx } })
  const body = (await r.json()) as { error?: string }
  expect(r.status, JSON.stringify(body)).toBe(402)
  expect(body.error).toBe('authorization_transfer')
  expect(r.headers.get('retry-after')).toBeNull()
}

describe('an authorization served as x402, then submitted by its payer', () => {
  it('is no transaction-hash proof, before or after the watcher saw it', async () => {
    await presented()
    await waitFor(
      async () => {
        const receipt = await s.svc.chain.publicClient.getTransactionReceipt({ hash: tx })
        const [row] = await s.svc.sql<{ n: number }[]>`
          SELECT count(*)::int AS n FROM watcher_cursors WHERE next_block > ${receipt.blockNumber.toString()}`
        return row!.n > 0
      },
      { what: "the watcher past the payer's transaction", timeoutMs: 10_000 },
    )
    await presented()
    // One call reached the upstream; nothing claimed the hash.
    expect(s.upstream.count()).toBe(1)
    expect(await s.svc.sql`SELECT 1 FROM claims WHERE proof_key = ${`tx:${tx.toLowerCase()}`}`).toHaveLength(
      0,
    )
  })

  it('pays no checkout payment of its figure, is no unmatched inflow, and settles its own claim', async () => {
    const payment = await callApi(s.svc.url, `/api/v1/payments/${paymentId}`, { key })
    expect(payment.body.status).toBe('pending')
    expect(await s.svc.sql`SELECT 1 FROM unmatched_inflows WHERE tx_hash = ${tx.toLowerCase()}`).toHaveLength(
      0,
    )
    // tollgate's settlement finds the authorization used by the payer's transaction and books it once.
    await s.svc.jobs.runNow('x402-settlement')
    await waitFor(async () => (await s.settlementState()).settled === 1, {
      what: 'the authorization settled',
      timeoutMs: 10_000,
    })
    const [claim] = await s.svc.sql<{ tx: string }[]>`
      SELECT lower(settlement_tx) AS tx FROM claims WHERE kind = 'eip3009' AND settled_at IS NOT NULL`
    expect(claim!.tx).toBe(tx.toLowerCase())
    expect(await s.reconcileDifferences()).toEqual([])
  })
})
