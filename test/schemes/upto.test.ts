// x402 `upto` end to end with the published client, unchanged (x402Client + UptoEvmScheme + @x402/fetch):
// a token-priced SSE endpoint offers upto for its ceiling; the client signs a Permit2 permit for it; the
// call is charged exactly the tokens tollgate measured on the stream (to the base unit), never above the
// signed maximum; the same payment again is refused; the settlement job moves exactly the charge on chain,
// and reconcile finds charged ≤ signed and settled = booked. The receipt URL shows the settling transaction,
// its mined block, confirmations to the head, and each permit's place among those the transaction carries.
// The endpoint here settles after the call (x402_settlement "after"): the settlement job's path. The default,
// settled before the answer, is test/schemes/upto-before-answer.test.ts.
import { createServer, type Server } from 'node:http'
import { wrapFetchWithPayment } from '@x402/fetch'
import { type Hash, parseAbi, parseEventLogs } from 'viem'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { installUptoContracts, uptoBatcherAddress } from '../../src/chain/upto-settle.ts'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import { UPTO_SETTLEMENT_JOB } from '../../src/schemes/upto/settle-after.ts'
import { chainClients, type Funded, fundedAccount, usdcBalance } from '../helpers/accounts.ts'
import { expectSettledAt, PENDING_SETTLEMENT } from '../helpers/receipts.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { approvedPayer, publishedUptoClient } from '../helpers/upto-payer.ts'
import { listenLocal, type Usage, writeUsageStream } from '../helpers/usage-stream.ts'

const { rpcUrl, publicClient } = chainClients()
// 3 and 15 USDC per million tokens: 3 and 15 base units per token, so the charge is exact in base units.
const INPUT_PER_MILLION = 3
const OUTPUT_PER_MILLION = 15
const MAX_PRICE_ATOMIC = 500_000n

/**
 * An OpenAI-compatible upstream streaming 50 chunks, then the usage chunk it was asked for: `usage`, or
 * `overUsage` on paths under /over (an answer whose tokens cost more than the ceiling).
 */
function startLlmUpstream(usage: Usage, overUsage: Usage) {
  const server: Server = createServer((req, res) => {
    const u = req.url?.includes('/over') ? overUsage : usage
    req.resume()
    req.on('end', () => writeUsageStream(res, 50, u))
  })
  return listenLocal(server)
}

let svc: TestService
let upstream: Awaited<ReturnType<typeof startLlmUpstream>>
let meteredUrl: string
let overUrl: string
let payer: Funded
const USAGE = { prompt_tokens: 1_234, completion_tokens: 5_678 }
const CHARGE = BigInt(USAGE.prompt_tokens * 3 + USAGE.completion_tokens * 15) // 88,872 base units

beforeAll(async () => {
  // The treasury's batcher is on chain before the service starts: it offers it as the facilitator.
  const treasury = await fundedAccount(0n)
  await installUptoContracts(rpcUrl, treasury.address)
  svc = await startTestService({
    treasury,
    overrides: {
      proxy: { allow_private_upstreams: true },
      // Two unsettled permits engage the intake throttle (the last test); the jobs run by hand.
      settlement: { interval_ms: 3_600_000, throttle_backlog_count: 2 },
      payouts: { interval_ms: 3_600_000 },
    },
  })
  // 10,000 in + 100,000 out = 1,530,000 base units, three times the ceiling.
  upstream = await startLlmUpstream(USAGE, { prompt_tokens: 10_000, completion_tokens: 100_000 })
  const merchant = await registerMerchant(svc)
  const ep = await svc.api('/api/v1/endpoints', {
    key: merchant.key,
    body: {
      upstream_url: `${upstream.url}/v1`,
      x402_settlement: 'after',
      pricing: {
        model: 'usage',
        unit: 'tokens',
        max_price: Number(MAX_PRICE_ATOMIC) / 1e6,
        input_price_per_million: INPUT_PER_MILLION,
        output_price_per_million: OUTPUT_PER_MILLION,
      },
    },
  })
  expect(ep.status, ep.text).toBe(201)
  meteredUrl = `${ep.body.metered_url}/chat/completions`
  overUrl = `${ep.body.metered_url}/over`
  payer = await approvedPayer()
})
afterAll(async () => {
  await svc?.stop()
  await upstream?.close()
})

const uptoClient = (p: Funded) => publishedUptoClient(svc, p)

function uptoFetch(p: Funded, f: typeof fetch = fetch) {
  return wrapFetchWithPayment(f, uptoClient(p))
}

const REQUEST = {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ model: 'm', stream: true, stream_options: { include_usage: true }, messages: [] }),
}

const UPTO_SETTLED = parseAbi([
  'event UptoSettled(address indexed owner, uint256 indexed nonce, uint256 amount)',
])

/**
 * The receipt URL after the settlement job: settled in the transaction the claim names, at the block the
 * chain mined it in, with confirmations up to the head, and at the place the batcher logged the permit
 * among the transaction's permits (its UptoSettled logs come in the order the calldata carries them).
 */
async function expectSettledReceipt(receiptId: string | null) {
  expect(receiptId).toMatch(/^rcpt_/)
  const r = await fetch(`${svc.url}/receipts/${receiptId}`)
  expect(r.status).toBe(200)
  const { settlement } = await r.json()
  const [claim] = await svc.sql<{ settlement_tx: Hash; nonce: string; payer: string }[]>`
    SELECT k.settlement_tx, k.authorization_payload->>'nonce' AS nonce, k.payer
    FROM calls c JOIN claims k ON k.proof_key = call_proof_key(c.proof_key, c.proof) WHERE c.id = ${`call_${receiptId!.slice(5)}`}`
  const mined = await publicClient.getTransactionReceipt({ hash: claim!.settlement_tx })
  const logged = parseEventLogs({ abi: UPTO_SETTLED, logs: mined.logs })
  const index = logged.findIndex(
    (l) => l.args.owner.toLowerCase() === claim!.payer.toLowerCase() && l.args.nonce === BigInt(claim!.nonce),
  )
  expect(index).toBeGreaterThanOrEqual(0)
  await expectSettledAt(settlement, {
    transaction: claim!.settlement_tx,
    block: mined.blockNumber,
    index,
    count: logged.length,
    chain: publicClient,
  })
  return settlement as { transaction: string; block_number: number; batch: { index: number; count: number } }
}

describe('x402 upto with the published client', () => {
  it('offers upto for the ceiling, naming our batcher as facilitator; never exact', async () => {
    const r = await fetch(meteredUrl, REQUEST)
    expect(r.status).toBe(402)
    const required = JSON.parse(Buffer.from(r.headers.get('payment-required')!, 'base64').toString())
    const upto = required.accepts.find((a: { scheme: string }) => a.scheme === 'upto')
    expect(upto).toMatchObject({
      amount: MAX_PRICE_ATOMIC.toString(),
      payTo: svc.treasury.address,
      extra: { assetTransferMethod: 'permit2', facilitatorAddress: uptoBatcherAddress(svc.treasury.address) },
    })
    expect(required.accepts.some((a: { scheme: string }) => a.scheme === 'exact')).toBe(false)
  })

  it('pays a token-priced SSE call and is charged exactly the tokens measured, settled for that on chain', async () => {
    const before = await usdcBalance(payer.address)
    const r = await uptoFetch(payer)(meteredUrl, REQUEST)
    expect(r.status).toBe(200)
    const text = await r.text()
    expect(text).toContain('t49 ')
    await svc.flushCaptures()
    // Served, not settled yet: the receipt says so, with no transaction, block or place.
    const receiptId = r.headers.get('x-receipt-id')
    const pending = await (await fetch(`${svc.url}/receipts/${receiptId}`)).json()
    expect(pending.settlement).toEqual(PENDING_SETTLEMENT)
    const [call] = await svc.sql<
      { amount_atomic: bigint; proof_key: string; ceiling_atomic: bigint | null }[]
    >`
      SELECT c.amount_atomic, call_proof_key(c.proof_key, c.proof) AS proof_key, c.ceiling_atomic FROM calls c JOIN claims k ON k.proof_key = call_proof_key(c.proof_key, c.proof)
      WHERE k.kind = 'upto' AND k.payer = ${payer.address}`
    expect(call!.amount_atomic).toBe(CHARGE)
    expect(BigInt(call!.amount_atomic)).toBeLessThanOrEqual(MAX_PRICE_ATOMIC)
    // Nothing moved yet: upto settles after the call, for the charge.
    expect(await usdcBalance(payer.address)).toBe(before)
    await svc.jobs.runNow(UPTO_SETTLEMENT_JOB)
    expect(before - (await usdcBalance(payer.address))).toBe(CHARGE)
    const [claim] = await svc.sql<{ settled_atomic: string }[]>`
      SELECT settled_atomic::text FROM claims WHERE proof_key = ${call!.proof_key}`
    expect(claim!.settled_atomic).toBe(CHARGE.toString())
    // Alone in its transaction: the first of one.
    const shown = await expectSettledReceipt(receiptId)
    expect(shown.batch).toMatchObject({ index: 0, count: 1 })
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.differences).toEqual([])
  })

  it('charges an answer whose tokens cost more than the ceiling exactly the signed maximum, never more', async () => {
    const over = await approvedPayer()
    const before = await usdcBalance(over.address)
    const r = await uptoFetch(over)(overUrl, REQUEST)
    expect(r.status).toBe(200)
    await r.text()
    await svc.flushCaptures()
    const [call] = await svc.sql<{ amount_atomic: bigint; usage: { capped?: boolean } | null }[]>`
      SELECT c.amount_atomic, c.usage FROM calls c JOIN claims k ON k.proof_key = call_proof_key(c.proof_key, c.proof)
      WHERE k.kind = 'upto' AND k.payer = ${over.address}`
    expect(call!.amount_atomic).toBe(MAX_PRICE_ATOMIC)
    expect(call!.usage).toMatchObject({ capped: true, source: 'measured' })
    await svc.jobs.runNow(UPTO_SETTLEMENT_JOB)
    expect(before - (await usdcBalance(over.address))).toBe(MAX_PRICE_ATOMIC)
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.differences).toEqual([])
  })

  // The replay test's call, left unsettled for the backlog test.
  let unsettledReceipt: string | null = null

  it('refuses the same upto payment again', async () => {
    // Capture the header the published client sends, then send it a second time by hand.
    let header: string | null = null
    const spy: typeof fetch = async (input, init) => {
      const req = new Request(input as string | URL | Request, init)
      header ??= req.headers.get('payment-signature')
      return fetch(req)
    }
    const first = await uptoFetch(payer, spy)(meteredUrl, REQUEST)
    expect(first.status).toBe(200)
    await first.text()
    unsettledReceipt = first.headers.get('x-receipt-id')
    expect(header).not.toBeNull()
    const again = await fetch(meteredUrl, {
      ...REQUEST,
      headers: { ...REQUEST.headers, 'payment-signature': header! },
    })
    expect(again.status).toBe(402)
    expect((await again.json()).error).toBe('proof_already_used')
  })

  it('answers 503 settlement_backlog to a new permit while the settlement backlog is past its limit; both settle in one transaction', async () => {
    // The replay test left one permit unsettled; a second engages the throttle (limit 2).
    const paid = await uptoFetch(payer)(meteredUrl, REQUEST)
    expect(paid.status).toBe(200)
    await paid.text()
    await svc.flushCaptures()
    await svc.refreshSettlementThrottle()
    const [before] = await svc.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM claims`
    const refused = await uptoFetch(payer)(meteredUrl, REQUEST)
    expect(refused.status).toBe(503)
    expect(refused.headers.get('retry-after')).not.toBeNull()
    expect((await refused.json()).error.code).toBe('settlement_backlog')
    const [after] = await svc.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM claims`
    expect(after!.n).toBe(before!.n)
    // Settled, the backlog is gone and permits are taken again. The two permits went in one batcher
    // transaction: each receipt shows it, its block, and a distinct place of the two.
    await svc.jobs.runNow(UPTO_SETTLEMENT_JOB)
    const a = await expectSettledReceipt(unsettledReceipt)
    const b = await expectSettledReceipt(paid.headers.get('x-receipt-id'))
    expect(b.transaction).toBe(a.transaction)
    expect(b.block_number).toBe(a.block_number)
    expect([a.batch.index, b.batch.index].sort()).toEqual([0, 1])
    expect(a.batch.count).toBe(2)
    await svc.refreshSettlementThrottle()
    const again = await uptoFetch(payer)(meteredUrl, REQUEST)
    expect(again.status).toBe(200)
    await again.text()
  })
})
