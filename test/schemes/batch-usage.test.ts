// batch-settlement channels on a usage-priced endpoint, with the published @x402/evm client unchanged: each
// voucher covers the ceiling, the call is charged what tollgate measured, and the client's next voucher is
// put right by the scheme's "out of sync" 402 (the charged cumulative and the voucher that covers it). 100
// calls of different sizes: the channel settles on chain for exactly their sum. The receipt URL of a call
// shows the claim transaction that settled it, that transaction's block and its channel's place in it.
import { createPublicClient, http, parseEventLogs } from 'viem'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { batchSettlementAbi, readChannel } from '../../src/chain/batch-channel.ts'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import { paymentRequired } from '../../src/observability/metrics.ts'
import { chainClients, type Funded, fundedAccount } from '../helpers/accounts.ts'
import { batchPayer } from '../helpers/batch-payer.ts'
import { type OpenAiUpstream, startOpenAiUpstream } from '../helpers/openai-upstream.ts'
import { expectSettledAt } from '../helpers/receipts.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'

const CALLS = 100
const CEILING = 10_000n

let svc: TestService
let upstream: OpenAiUpstream
let payer: Funded
const publicClient = createPublicClient({ transport: http(chainClients().rpcUrl) })

beforeAll(async () => {
  svc = await startTestService({ adminToken: 'admin-token-for-tests-0123456789' })
  upstream = await startOpenAiUpstream()
  payer = await fundedAccount(1_000_000_000n)
})
afterAll(async () => {
  await svc?.stop()
  await upstream?.close()
})

describe('batch-settlement on a usage-priced endpoint', () => {
  it(`charges ${CALLS} calls their measured amounts; the channel settles for exactly their sum`, async () => {
    const merchant = await registerMerchant(svc)
    const ep = await svc.api('/api/v1/endpoints', {
      key: merchant.key,
      body: {
        upstream_url: `${upstream.url}/v1/chat/completions`,
        batch_settlement: true,
        // $1 per MB: a call costs one base unit per byte of its answer.
        pricing: { model: 'usage', unit: 'response_bytes', max_price: 0.01, price_per_mb: 1 },
      },
    })
    expect(ep.status).toBe(201)
    const probe = await fetch(ep.body.metered_url, { method: 'POST' })
    const required = JSON.parse(Buffer.from(probe.headers.get('payment-required')!, 'base64').toString())
    // Where the amount varies, the schemes that settle for less are offered (upto too), never exact.
    const schemes = required.accepts.map((a: { scheme: string }) => a.scheme)
    expect(schemes).toContain('batch-settlement')
    expect(schemes).not.toContain('exact')
    const batchOffer = required.accepts.find((a: { scheme: string }) => a.scheme === 'batch-settlement')
    expect(batchOffer.amount).toBe(CEILING.toString())

    const caip2 = `eip155:${await publicClient.getChainId()}` as const
    // A deposit of 20 ceilings: the vouchers cover a ceiling each, the calls cost far less.
    const { fetch: pay } = batchPayer(payer, { caip2, depositMultiplier: 20 })
    const corrections = async () =>
      (await paymentRequired.get()).values.find(
        (v) => v.labels.reason === 'invalid_batch_settlement_evm_cumulative_amount_mismatch',
      )?.value ?? 0
    const correctedBefore = await corrections()
    let expected = 0n
    let lastReceipt = ''
    let lastBytes = 0
    for (let i = 0; i < CALLS; i++) {
      const r = await pay(ep.body.metered_url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'gpt', max_tokens: 1 + ((i * 7) % 40) }),
      })
      if (r.status !== 200) throw new Error(`call ${i}: ${r.status} ${await r.text()}`)
      lastReceipt = r.headers.get('x-receipt-id')!
      lastBytes = (await r.arrayBuffer()).byteLength
      expected += BigInt(lastBytes)
    }
    // Every answer's receipt is written before its charge is known: the next voucher is put right once.
    expect((await corrections()) - correctedBefore).toBe(CALLS - 1)
    await svc.flushCaptures()
    const [books] = await svc.sql<{ n: number; sum: bigint; ceilings: bigint }[]>`
      SELECT count(*)::int AS n, sum(amount_atomic)::bigint AS sum, sum(ceiling_atomic)::bigint AS ceilings
      FROM calls WHERE endpoint_id = ${ep.body.id}`
    expect(books).toMatchObject({ n: CALLS, sum: expected, ceilings: CEILING * BigInt(CALLS) })
    const receipt = await (await fetch(`${svc.url}/receipts/${lastReceipt}`)).json()
    expect(receipt).toMatchObject({
      scheme: 'batch-settlement',
      pricing_model: 'usage',
      amount_atomic: String(lastBytes),
      usage: { unit: 'response_bytes', quantities: { bytes: lastBytes }, ceiling_atomic: '10000' },
    })

    expect(receipt.settlement).toMatchObject({ status: 'pending', transaction: null, block_number: null })

    await svc.jobs.runNow('batch-claims')
    const [channel] = await svc.sql<{ channel_id: `0x${string}`; charged_atomic: bigint }[]>`
      SELECT channel_id, charged_atomic FROM batch_channels WHERE payer = ${payer.address}`
    // Settled by the claim transaction that carried this channel's voucher: its block as mined, and the
    // channel's place among the vouchers it claims, as its Claimed logs list them.
    const [claimTx] = await svc.sql<{ tx_hash: `0x${string}` }[]>`
      SELECT tx_hash FROM batch_claims WHERE status = 'done' AND entries @> ${svc.sql.json([{ channel_id: channel!.channel_id }] as never)}`
    const mined = await publicClient.getTransactionReceipt({ hash: claimTx!.tx_hash })
    const claimed = parseEventLogs({ abi: batchSettlementAbi, eventName: 'Claimed', logs: mined.logs })
    const index = claimed.findIndex(
      (l) => (l.args as { channelId: string }).channelId.toLowerCase() === channel!.channel_id.toLowerCase(),
    )
    expect(index).toBeGreaterThanOrEqual(0)
    const settledReceipt = await fetch(`${svc.url}/receipts/${lastReceipt}`)
    const { settlement } = await settledReceipt.json()
    await expectSettledAt(settlement, {
      transaction: claimTx!.tx_hash,
      block: mined.blockNumber,
      index,
      count: claimed.length,
      chain: publicClient,
    })
    expect(channel!.charged_atomic).toBe(expected)
    const onChain = await readChannel(publicClient, channel!.channel_id)
    expect(onChain.totalClaimed).toBe(expected)
    expect(onChain.balance).toBe(CEILING * 20n)
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.claims.differences).toEqual([])
  })
})
