// x402 `upto` settled before the answer, on the default (an endpoint that makes no x402_settlement choice),
// with the published client unchanged (x402Client + UptoEvmScheme + @x402/fetch): the answer is held whole,
// the charge measured at its end is settled from this process's settler slot (a delegate of the batcher)
// and the head goes out with a PAYMENT-RESPONSE the client reads as settled, naming the mined transaction
// that moved exactly the charge (the rest of the signed maximum never moves). Two calls racing are both
// settled before their answers; an endpoint set to "after" keeps the pending receipt; an answer over
// settlement.before_answer.held_answer_max_bytes streams with the pending receipt and is settled after.
// The leader's job then finds nothing to send again, and reconcile is clean. A settlement not mined within
// wait_ms answers settlement_pending with its hash; the leader's job leaves that transaction alone while the
// node holds it (nothing signed again) and books it once mined: the charge moves once.
import { createServer, type Server } from 'node:http'
import { x402HTTPClient } from '@x402/core/client'
import { decodePaymentResponseHeader } from '@x402/core/http'
import { wrapFetchWithPayment } from '@x402/fetch'
import { type Hash, parseAbi, parseEventLogs } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { settlerSlotKey } from '../../src/chain/settler-keys.ts'
import { installUptoContracts, uptoBatcherAddress } from '../../src/chain/upto-settle.ts'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import { UPTO_SETTLEMENT_JOB } from '../../src/schemes/upto/settle-after.ts'
import { chainClients, type Funded, fundedAccount, usdcBalance } from '../helpers/accounts.ts'
import { mine, setAutomine } from '../helpers/anvil.ts'
import { checkPaymentProtocol } from '../helpers/payment-checks.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { approvedPayer, publishedUptoClient } from '../helpers/upto-payer.ts'
import { listenLocal, writeUsageStream } from '../helpers/usage-stream.ts'

checkPaymentProtocol()

const { rpcUrl, publicClient } = chainClients()
const MAX_PRICE_ATOMIC = 500_000n
const USAGE = { prompt_tokens: 1_234, completion_tokens: 5_678 }
// 3 and 15 USDC per million tokens: 3 and 15 base units a token.
const CHARGE = BigInt(USAGE.prompt_tokens * 3 + USAGE.completion_tokens * 15) // 88,872 base units
/** Answers above this many bytes are not held (the endpoint under /big sends ~20 kB). */
const HELD_MAX_BYTES = 8_192

/** An OpenAI-compatible upstream streaming chunks (500 of them under /big), then the usage it was asked for. */
function startLlmUpstream() {
  const server: Server = createServer((req, res) => {
    const chunks = req.url?.includes('/big') ? 500 : 50
    req.resume()
    req.on('end', () => {
      if (req.url?.includes('/sized')) {
        // A JSON answer with its content-length (not streamed): the proxy relays it sized.
        const usage = { ...USAGE, total_tokens: USAGE.prompt_tokens + USAGE.completion_tokens }
        const json = JSON.stringify({
          id: 'c1',
          object: 'chat.completion',
          choices: [{ index: 0, message: { role: 'assistant', content: 'hello' } }],
          usage,
        })
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(json) })
        return res.end(json)
      }
      writeUsageStream(res, chunks, USAGE)
    })
  })
  return listenLocal(server)
}

let svc: TestService
let upstream: Awaited<ReturnType<typeof startLlmUpstream>>
/** No choice made: the default, settled before the answer. */
let defaultUrl: string
let bigUrl: string
let sizedUrl: string
/** x402_settlement "after". */
let afterUrl: string

beforeAll(async () => {
  const treasury = await fundedAccount(0n)
  await installUptoContracts(rpcUrl, treasury.address)
  svc = await startTestService({
    treasury,
    overrides: {
      proxy: { allow_private_upstreams: true },
      // wait_ms 1 s: the unmined test waits it out, and past window_ms + 2 × wait_ms (the job's young hashes).
      settlement: {
        interval_ms: 3_600_000,
        before_answer: { held_answer_max_bytes: HELD_MAX_BYTES, wait_ms: 1_000 },
      },
      payouts: { interval_ms: 3_600_000 },
    },
  })
  upstream = await startLlmUpstream()
  const merchant = await registerMerchant(svc)
  const endpoint = async (extra: object) => {
    const ep = await svc.api('/api/v1/endpoints', {
      key: merchant.key,
      body: {
        upstream_url: `${upstream.url}/v1`,
        pricing: {
          model: 'usage',
          unit: 'tokens',
          max_price: Number(MAX_PRICE_ATOMIC) / 1e6,
          input_price_per_million: 3,
          output_price_per_million: 15,
        },
        ...extra,
      },
    })
    expect(ep.status, ep.text).toBe(201)
    return ep.body as { metered_url: string; x402_settlement: string }
  }
  const byDefault = await endpoint({})
  expect(byDefault.x402_settlement).toBe('before_answer')
  defaultUrl = `${byDefault.metered_url}/chat/completions`
  bigUrl = `${byDefault.metered_url}/big`
  sizedUrl = `${byDefault.metered_url}/sized/chat/completions`
  afterUrl = `${(await endpoint({ x402_settlement: 'after' })).metered_url}/chat/completions`
})
afterAll(async () => {
  await svc?.stop()
  await upstream?.close()
})

const uptoClient = (p: Funded) => publishedUptoClient(svc, p)

const REQUEST = {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ model: 'm', stream: true, stream_options: { include_usage: true }, messages: [] }),
}

const UPTO_SETTLED = parseAbi([
  'event UptoSettled(address indexed owner, uint256 indexed nonce, uint256 amount)',
  'event Transfer(address indexed from, address indexed to, uint256 value)',
])

/** Pays one call with the published client; returns what it read and the receipt header. */
async function pay(p: Funded, url: string) {
  const client = uptoClient(p)
  const r = await wrapFetchWithPayment(fetch, client)(url, REQUEST)
  expect(r.status).toBe(200)
  const result = await new x402HTTPClient(client).processResponse(r.clone())
  const body = await r.text()
  const receipt = decodePaymentResponseHeader(r.headers.get('payment-response')!)
  return { r, body, result, receipt }
}

/** What the mined transaction moved from the payer, by the token's Transfer logs, and whether the batcher logged it. */
async function movedBy(hash: Hash, payer: string) {
  const mined = await publicClient.getTransactionReceipt({ hash })
  expect(mined.status).toBe('success')
  const logs = parseEventLogs({ abi: UPTO_SETTLED, logs: mined.logs })
  let transferred = 0n
  let logged: bigint | null = null
  for (const l of logs) {
    if (l.eventName === 'Transfer' && l.args.from.toLowerCase() === payer.toLowerCase())
      transferred += l.args.value
    if (l.eventName === 'UptoSettled' && l.args.owner.toLowerCase() === payer.toLowerCase())
      logged = l.args.amount
  }
  const tx = await publicClient.getTransaction({ hash })
  return { transferred, logged, from: tx.from, to: tx.to }
}

function slot0Address(): string {
  const key = settlerSlotKey({ settlerKey: null, treasuryKey: svc.treasury.privateKey }, 0)!
  return privateKeyToAccount(key).address.toLowerCase()
}

async function claimOf(payer: string) {
  return svc.sql<{ settlement_tx: string | null; settled_atomic: string | null; amount_atomic: string }[]>`
    SELECT k.settlement_tx, k.settled_atomic::text, c.amount_atomic::text
    FROM claims k JOIN calls c ON c.id = k.call_id WHERE k.kind = 'upto' AND k.payer = ${payer}`
}

describe('x402 upto on the default endpoint: settled before the answer', () => {
  it('the published client reads settled, naming the mined transaction that moved exactly the charge', async () => {
    const payer = await approvedPayer()
    const before = await usdcBalance(payer.address)
    const { body, result, receipt } = await pay(payer, defaultUrl)
    expect(body).toContain('t49 ')
    expect(body).toContain('[DONE]')
    expect(result.paymentStatus).toBe('settled')
    expect(receipt).toMatchObject({ success: true, payer: payer.address, amount: CHARGE.toString() })
    expect(receipt.errorReason).toBeUndefined()
    expect(receipt.transaction).toMatch(/^0x[0-9a-f]{64}$/)
    // On chain before the answer: exactly the charge, from the settler slot, through the batcher.
    const moved = await movedBy(receipt.transaction as Hash, payer.address)
    expect(moved).toMatchObject({ transferred: CHARGE, logged: CHARGE })
    expect(moved.from.toLowerCase()).toBe(slot0Address())
    expect(moved.to?.toLowerCase()).toBe(uptoBatcherAddress(svc.treasury.address).toLowerCase())
    // The rest of the signed maximum never moved.
    expect(before - (await usdcBalance(payer.address))).toBe(CHARGE)
    // Booked once (the settler's transition); the leader's job finds nothing to send.
    await svc.flushCaptures()
    await svc.jobs.runNow(UPTO_SETTLEMENT_JOB)
    await new Promise((r) => setTimeout(r, 400))
    const claims = await claimOf(payer.address)
    expect(claims).toEqual([
      {
        settlement_tx: receipt.transaction,
        settled_atomic: CHARGE.toString(),
        amount_atomic: CHARGE.toString(),
      },
    ])
    expect(before - (await usdcBalance(payer.address))).toBe(CHARGE)
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.differences).toEqual([])
  })

  it('a sized (content-length) JSON answer is held and settled the same way, delivered whole', async () => {
    const payer = await approvedPayer()
    const before = await usdcBalance(payer.address)
    const client = uptoClient(payer)
    const r = await wrapFetchWithPayment(fetch, client)(sizedUrl, {
      ...REQUEST,
      body: JSON.stringify({ model: 'm', messages: [] }),
    })
    expect(r.status).toBe(200)
    expect((await new x402HTTPClient(client).processResponse(r.clone())).paymentStatus).toBe('settled')
    expect((await r.json()).choices[0].message.content).toBe('hello')
    const receipt = decodePaymentResponseHeader(r.headers.get('payment-response')!)
    expect(receipt).toMatchObject({ success: true, amount: CHARGE.toString() })
    expect(await movedBy(receipt.transaction as Hash, payer.address)).toMatchObject({ transferred: CHARGE })
    expect(before - (await usdcBalance(payer.address))).toBe(CHARGE)
  })

  it('two calls racing are both settled before their answers, each for its charge', async () => {
    const [a, b] = await Promise.all([approvedPayer(), approvedPayer()])
    const [ba, bb] = [await usdcBalance(a.address), await usdcBalance(b.address)]
    const [pa, pb] = await Promise.all([pay(a, defaultUrl), pay(b, defaultUrl)])
    for (const [p, paid, before] of [
      [a, pa, ba],
      [b, pb, bb],
    ] as const) {
      expect(paid.result.paymentStatus).toBe('settled')
      const moved = await movedBy(paid.receipt.transaction as Hash, p.address)
      expect(moved).toMatchObject({ transferred: CHARGE, logged: CHARGE })
      expect(before - (await usdcBalance(p.address))).toBe(CHARGE)
    }
    await svc.jobs.runNow(UPTO_SETTLEMENT_JOB)
    expect(ba - (await usdcBalance(a.address))).toBe(CHARGE)
    expect(bb - (await usdcBalance(b.address))).toBe(CHARGE)
  })

  it('an endpoint set to "after" keeps the pending receipt; the job settles it', async () => {
    const payer = await approvedPayer()
    const before = await usdcBalance(payer.address)
    const { result, receipt } = await pay(payer, afterUrl)
    expect(result.paymentStatus).toBe('settle_failed')
    expect(receipt).toMatchObject({ success: false, errorReason: 'settlement_pending', transaction: '' })
    expect(await usdcBalance(payer.address)).toBe(before)
    await svc.flushCaptures()
    await svc.jobs.runNow(UPTO_SETTLEMENT_JOB)
    expect(before - (await usdcBalance(payer.address))).toBe(CHARGE)
  })

  it('an answer over held_answer_max_bytes streams with the pending receipt and is settled after', async () => {
    const payer = await approvedPayer()
    const before = await usdcBalance(payer.address)
    const { body, result, receipt } = await pay(payer, bigUrl)
    expect(body.length).toBeGreaterThan(HELD_MAX_BYTES)
    expect(body).toContain('t499 ')
    expect(result.paymentStatus).toBe('settle_failed')
    expect(receipt).toMatchObject({ success: false, errorReason: 'settlement_pending', transaction: '' })
    // Settled after the answer (from the settler, or the job): exactly the charge, once.
    await svc.flushCaptures()
    await svc.jobs.runNow(UPTO_SETTLEMENT_JOB)
    await new Promise((r) => setTimeout(r, 400))
    const [claim] = await claimOf(payer.address)
    expect(claim!.settled_atomic).toBe(CHARGE.toString())
    expect(before - (await usdcBalance(payer.address))).toBe(CHARGE)
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.differences).toEqual([])
  })

  it('not mined within wait_ms: pending with the hash; the leader job recognises the sent transaction', async () => {
    const payer = await approvedPayer()
    const before = await usdcBalance(payer.address)
    let hash: Hash
    await setAutomine(rpcUrl, false)
    try {
      const { body, result, receipt } = await pay(payer, defaultUrl)
      expect(body).toContain('[DONE]')
      expect(result.paymentStatus).toBe('settle_failed')
      expect(receipt).toMatchObject({
        success: false,
        errorReason: 'settlement_pending',
        amount: CHARGE.toString(),
      })
      expect(receipt.transaction).toMatch(/^0x[0-9a-f]{64}$/)
      hash = receipt.transaction as Hash
      // Past the young window: the node holds the transaction, so the job signs nothing again.
      await new Promise((r) => setTimeout(r, 2_200))
      await svc.jobs.runNow(UPTO_SETTLEMENT_JOB)
      const [claim] = await claimOf(payer.address)
      expect(claim).toMatchObject({ settlement_tx: hash, settled_atomic: null })
      expect(await usdcBalance(payer.address)).toBe(before)
    } finally {
      await setAutomine(rpcUrl, true)
    }
    await mine(rpcUrl)
    await svc.jobs.runNow(UPTO_SETTLEMENT_JOB)
    const [claim] = await claimOf(payer.address)
    expect(claim).toMatchObject({ settlement_tx: hash, settled_atomic: CHARGE.toString() })
    expect(await movedBy(hash, payer.address)).toMatchObject({ transferred: CHARGE, logged: CHARGE })
    expect(before - (await usdcBalance(payer.address))).toBe(CHARGE)
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.differences).toEqual([])
  })
})
