// A WebSocket session paid by a batch-settlement channel as it goes, with the published @x402/evm client
// (unpatched) and the `ws` client: the upgrade carries the channel's deposit and first voucher, each
// in-band request is answered with the client's next voucher, and the session is charged exactly the usage
// events the upstream sent, to the base unit; after the claim job the chain, the channel and the books agree.
import { x402Client } from '@x402/core/client'
import { BatchSettlementEvmScheme } from '@x402/evm/batch-settlement/client'
import { createPublicClient, http } from 'viem'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { readChannel } from '../../src/chain/batch-channel.ts'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import { chainClients, fundedAccount } from '../helpers/accounts.ts'
import {
  CACHED_TOKENS,
  INPUT_TOKENS,
  type RealtimeUpstream,
  startRealtimeUpstream,
} from '../helpers/realtime-upstream.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { openWs } from '../helpers/ws-client.ts'

const WORDS = 110
const publicClient = createPublicClient({ transport: http(chainClients().rpcUrl) })
const b64 = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64')
const unb64 = (s: string) => JSON.parse(Buffer.from(s, 'base64').toString('utf8'))

let svc: TestService
let upstream: RealtimeUpstream

/** An endpoint selling Realtime tokens by channel, and a session on it opened by the published client. */
async function openVoucherSession() {
  const owner = await registerMerchant(svc)
  const created = await svc.api('/api/v1/endpoints', {
    key: owner.key,
    body: {
      upstream_url: `${upstream.url}/v1/realtime`,
      batch_settlement: true,
      // 1,000 base units an output token: a voucher's 50,000 buys 50 tokens.
      pricing: {
        model: 'usage',
        unit: 'tokens',
        max_price: 0.05,
        input_price_per_million: 2,
        cached_input_price_per_million: 1,
        output_price_per_million: 1000,
      },
      websocket: { top_up_wait_ms: 5000 },
    },
  })
  expect(created.status).toBe(201)
  const id = (created.body as { id: string }).id
  const caip2 = `eip155:${await publicClient.getChainId()}` as const
  const who = await fundedAccount(100_000_000n)
  const signer = {
    address: who.address,
    signTypedData: (m: Parameters<typeof who.account.signTypedData>[0]) => who.account.signTypedData(m),
    readContract: (args: Parameters<typeof publicClient.readContract>[0]) => publicClient.readContract(args),
  }
  const scheme = new BatchSettlementEvmScheme(signer as any, { depositPolicy: { depositMultiplier: 10 } })
  const client = x402Client.fromConfig({
    schemes: [{ network: caip2, client: scheme }],
    spendControls: { allowedAssets: [{ network: caip2, asset: chainClients().usdc }] },
  })
  // The upgrade's 402 is a paid call's: the client pays it with a deposit and its first voucher.
  const unpaid = await fetch(`${svc.url}/m/${id}`)
  expect(unpaid.status).toBe(402)
  const opening = await client.createPaymentPayload(unb64(unpaid.headers.get('payment-required')!))
  const s = await openWs(`${svc.url}/m/${id}`, { 'payment-signature': b64(opening) })
  await client.handlePaymentResponse({
    paymentPayload: opening,
    requirements: opening.accepted,
    settleResponse: unb64(String(s.headers['payment-response'])),
  })
  return { id, who, client, opening, s }
}

/** After the claim job: the session's call rows, the channel's charged amount and what the chain claimed. */
async function settled(id: string, payer: string) {
  await svc.flushCaptures()
  await svc.jobs.runNow('batch-claims')
  const calls = await svc.sql<{ amount_atomic: bigint; upstream_status: number; usage: any }[]>`
    SELECT amount_atomic, upstream_status, usage FROM calls WHERE endpoint_id = ${id}`
  const [channel] = await svc.sql<{ channel_id: `0x${string}`; charged_atomic: bigint }[]>`
    SELECT channel_id, charged_atomic FROM batch_channels WHERE payer = ${payer}`
  const claimed = (await readChannel(publicClient, channel!.channel_id)).totalClaimed
  const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
  return { calls, charged: channel!.charged_atomic, claimed, differences: report.differences }
}

describe('a WebSocket session paid by channel vouchers', () => {
  beforeAll(async () => {
    svc = await startTestService()
    upstream = await startRealtimeUpstream()
  })
  afterAll(async () => {
    await svc?.stop()
    await upstream?.close()
  })

  it('is charged exactly the usage events sent, one voucher at a time; books = chain after the claim', async () => {
    const { id, who, client, opening, s } = await openVoucherSession()
    // Each request for credit is answered with the client's next voucher, once per credit level (a
    // credit_low and the credit_exhausted after it ask for the same), one at a time.
    const vouchers: string[] = [(opening.payload as any).voucher.maxClaimableAmount]
    const levels: string[] = []
    let chain = Promise.resolve()
    const topUp = async (ask: any) => {
      const level = ask.metadata.tollgate.credit_atomic
      if (levels.includes(level)) return
      levels.push(level)
      const next = await client.createPaymentPayload(ask.error.paymentRequired)
      vouchers.push((next.payload as any).voucher.maxClaimableAmount)
      const answered = new Promise<any>((resolve) => {
        const on = (d: Buffer) => {
          const r = JSON.parse(d.toString())
          if (r.id !== levels.length) return
          s.ws.off('message', on)
          resolve(r)
        }
        s.ws.on('message', on)
      })
      s.ws.send(JSON.stringify({ id: levels.length, method: 'tollgate.top_up', payment: next }))
      const r = await answered
      if (r.paymentResponse)
        await client.handlePaymentResponse({
          paymentPayload: next,
          requirements: next.accepted,
          settleResponse: r.paymentResponse,
        })
    }
    s.ws.on('message', (data) => {
      const m = JSON.parse(data.toString())
      if (m.error?.code === 402 && m.id === undefined) chain = chain.then(() => topUp(m))
    })

    s.ws.send(JSON.stringify({ type: 'response.create', response: { words: WORDS } }))
    await waitFor(() => s.count('response.done') === 1, { what: 'the whole answer', timeoutMs: 30_000 })
    expect(s.count('response.text.delta')).toBe(WORDS)
    // Each voucher builds on the one before by the ceiling: three for 110 tokens (at the end more than a
    // fifth of 150,000 is left: not asked again).
    expect(vouchers).toEqual(['50000', '100000', '150000'])
    const answers = s.payment().filter((m) => m.result !== undefined)
    expect(answers.map((m) => m.result.credit_atomic)).toEqual(['100000', '150000'])
    s.ws.close(1000)
    await s.closed

    // 110 output tokens at 1,000, 8 input at 2, 2 cached at 1: one call, rounded once.
    const charge = BigInt(WORDS * 1000 + (INPUT_TOKENS - CACHED_TOKENS) * 2 + CACHED_TOKENS)
    const books = await settled(id, who.address)
    expect(books.calls).toHaveLength(1)
    expect(books.calls[0]).toMatchObject({ amount_atomic: charge, upstream_status: 101 })
    expect(books.calls[0]!.usage.quantities).toMatchObject({ output_tokens: WORDS })
    expect([books.charged, books.claimed]).toEqual([charge, charge])
    expect(books.differences).toEqual([])
    expect(books.calls[0]!.usage.session).toMatchObject({ ended_by: 'client', charge_atomic: `${charge}` })
    // The channel's own statement wrote the row: its session.closed event came with it.
    const [event] = await svc.sql<{ data: any }[]>`
      SELECT data FROM events WHERE type = 'session.closed' AND data->>'endpoint_id' = ${id}`
    expect(event!.data).toMatchObject({ charge_atomic: `${charge}`, scheme: 'batch-settlement', payments: 1 })
  }, 120_000)

  it('charges a client that leaves mid-answer for what it received; books = chain', async () => {
    const { id, who, s } = await openVoucherSession()
    s.ws.send(JSON.stringify({ type: 'response.create', response: { words: 30, hold: true } }))
    await waitFor(() => s.count('response.text.delta') === 30, { what: '30 deltas' })
    s.ws.terminate()
    await s.closed
    // 30 deltas delivered and no usage yet: one output token each, at 1,000.
    const books = await settled(id, who.address)
    expect(books.calls.map((c) => c.amount_atomic)).toEqual([30_000n])
    expect(books.calls[0]!.usage).toMatchObject({
      fallback: 'client_aborted',
      quantities: { output_tokens: 30 },
    })
    expect([books.charged, books.claimed]).toEqual([30_000n, 30_000n])
    expect(books.differences).toEqual([])
  }, 120_000)
})
