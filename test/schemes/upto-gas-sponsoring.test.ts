// x402 `upto` for a payer that never approved Permit2, with the published client unchanged (x402Client +
// UptoEvmScheme given an RPC to read its allowance, + @x402/fetch): the 402 declares eip2612GasSponsoring,
// the client signs the token's EIP-2612 approval of Permit2 beside its permit, and the settlement submits it
// first (the batcher's settleWithPermits), so the payer pays without a transaction or gas of its own. Settled
// after the call (the settlement job) and before the answer (the settler slot, the default). The approval
// sets the allowance to that permit's maximum, so a second permit of the payer is refused while the first is
// unsettled (a call served on it could not be settled); once settled, the payer pays again with the next
// EIP-2612 nonce. A forged or stale approval is refused, nothing claimed. Reconcile is clean after each.
import { createServer, type Server } from 'node:http'
import { x402Client, x402HTTPClient } from '@x402/core/client'
import { decodePaymentResponseHeader } from '@x402/core/http'
import { UptoEvmScheme } from '@x402/evm/upto/client'
import { wrapFetchWithPayment } from '@x402/fetch'
import { parseAbi } from 'viem'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { PERMIT2_ADDRESS } from '../../src/chain/upto-permit.ts'
import { installUptoContracts } from '../../src/chain/upto-settle.ts'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import { UPTO_SETTLEMENT_JOB } from '../../src/schemes/upto/settle-after.ts'
import { chainClients, type Funded, fundedAccount, usdcBalance } from '../helpers/accounts.ts'
import { type RpcProxy, startRpcProxy } from '../helpers/rpc-proxy.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { listenLocal, writeUsageStream } from '../helpers/usage-stream.ts'

const { rpcUrl, publicClient, usdc } = chainClients()
const MAX_PRICE_ATOMIC = 500_000n
const USAGE = { prompt_tokens: 1_234, completion_tokens: 5_678 }
const CHARGE = BigInt(USAGE.prompt_tokens * 3 + USAGE.completion_tokens * 15) // 88,872 base units
const tokenAbi = parseAbi([
  'function allowance(address owner, address spender) view returns (uint256)',
  'function nonces(address owner) view returns (uint256)',
])

function startLlmUpstream() {
  const server: Server = createServer((req, res) => {
    req.resume()
    req.on('end', () => writeUsageStream(res, 20, USAGE))
  })
  return listenLocal(server)
}

let svc: TestService
let upstream: Awaited<ReturnType<typeof startLlmUpstream>>
let afterUrl: string
let beforeUrl: string

beforeAll(async () => {
  const treasury = await fundedAccount(0n)
  await installUptoContracts(rpcUrl, treasury.address)
  svc = await startTestService({
    treasury,
    overrides: {
      proxy: { allow_private_upstreams: true },
      settlement: { interval_ms: 3_600_000 },
      payouts: { interval_ms: 3_600_000 },
    },
  })
  upstream = await startLlmUpstream()
  const merchant = await registerMerchant(svc)
  const pricing = {
    model: 'usage',
    unit: 'tokens',
    max_price: Number(MAX_PRICE_ATOMIC) / 1e6,
    input_price_per_million: 3,
    output_price_per_million: 15,
  }
  const create = async (settlement: 'after' | 'before_answer') => {
    const ep = await svc.api('/api/v1/endpoints', {
      key: merchant.key,
      body: { upstream_url: `${upstream.url}/v1`, x402_settlement: settlement, pricing },
    })
    expect(ep.status, ep.text).toBe(201)
    return `${ep.body.metered_url}/chat/completions`
  }
  afterUrl = await create('after')
  beforeUrl = await create('before_answer')
})
afterAll(async () => {
  await svc?.stop()
  await upstream?.close()
})

const REQUEST = {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ model: 'm', stream: true, stream_options: { include_usage: true }, messages: [] }),
}

/** The published upto client as a payer without an approval configures it: with an RPC to read it. */
function sponsoredClient(payer: Funded): x402Client {
  const network = `eip155:${svc.chain.chainId}` as const
  return x402Client.fromConfig({
    schemes: [{ network, client: new UptoEvmScheme(payer.account, { rpcUrl }) }],
    spendControls: { allowedAssets: [{ network, asset: svc.chain.usdc.address }] },
  })
}

const allowance = (owner: Funded) =>
  publicClient.readContract({
    address: usdc,
    abi: tokenAbi,
    functionName: 'allowance',
    args: [owner.address, PERMIT2_ADDRESS],
  })
const permitNonce = (owner: Funded) =>
  publicClient.readContract({ address: usdc, abi: tokenAbi, functionName: 'nonces', args: [owner.address] })

/** The payment header the published client signs for the 402 at `url`, and the payload inside it. */
async function signedHeader(payer: Funded, url: string) {
  const client = new x402HTTPClient(sponsoredClient(payer))
  const r = await fetch(url, REQUEST)
  expect(r.status).toBe(402)
  const required = client.getPaymentRequiredResponse((name) => r.headers.get(name), await r.json())
  const payload = await client.createPaymentPayload(required)
  return { payload, header: client.encodePaymentSignatureHeader(payload) }
}

/** The call at `afterUrl` with the payment headers the client encoded. */
const paidWith = (headers: Record<string, string>) =>
  fetch(afterUrl, { ...REQUEST, headers: { ...REQUEST.headers, ...headers } })

async function expectReconciled() {
  const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
  expect(report.differences).toEqual([])
}

describe('x402 upto with eip2612GasSponsoring (a payer that never approved Permit2)', () => {
  it('declares the extension in the 402 beside upto', async () => {
    const r = await fetch(afterUrl, REQUEST)
    expect(r.status).toBe(402)
    const required = JSON.parse(Buffer.from(r.headers.get('payment-required')!, 'base64').toString())
    expect(required.extensions.eip2612GasSponsoring.info).toMatchObject({ version: '1' })
  })

  it('pays without an approval: the settlement submits it and moves exactly the charge', async () => {
    const payer = await fundedAccount(10_000_000n)
    expect(await allowance(payer)).toBe(0n)
    const before = await usdcBalance(payer.address)
    const { payload, header } = await signedHeader(payer, afterUrl)
    const info = (payload.extensions as Record<string, { info: Record<string, string> }>)
      .eip2612GasSponsoring!.info
    expect(info).toMatchObject({ from: payer.address, spender: PERMIT2_ADDRESS, nonce: '0' })
    const r = await paidWith(header)
    expect(r.status).toBe(200)
    expect(await r.text()).toContain('t19 ')
    await svc.flushCaptures()
    const [claim] = await svc.sql<{ approval: { value: string } | null }[]>`
      SELECT authorization_payload->'permit2612' AS approval FROM claims
      WHERE kind = 'upto' AND payer = ${payer.address}`
    expect(claim!.approval?.value).toBe(MAX_PRICE_ATOMIC.toString())
    await svc.jobs.runNow(UPTO_SETTLEMENT_JOB)
    expect(before - (await usdcBalance(payer.address))).toBe(CHARGE)
    // The approval was submitted (its nonce spent), set the allowance to the maximum, and the charge spent it.
    expect(await permitNonce(payer)).toBe(1n)
    expect(await allowance(payer)).toBe(MAX_PRICE_ATOMIC - CHARGE)
    const [settled] = await svc.sql<{ settled_atomic: string }[]>`
      SELECT settled_atomic::text FROM claims WHERE kind = 'upto' AND payer = ${payer.address}`
    expect(settled!.settled_atomic).toBe(CHARGE.toString())
    await expectReconciled()
  })

  it('refuses a second permit while the sponsored one is unsettled; pays with the next nonce once it is', async () => {
    const payer = await fundedAccount(10_000_000n)
    const first = await paidWith((await signedHeader(payer, afterUrl)).header)
    expect(first.status).toBe(200)
    await first.text()
    await svc.flushCaptures()
    // Unsettled: the chain still shows no allowance and nonce 0, so the client signs the same approval
    // nonce again. Its settlement would find the allowance the first one spends: refused, nothing claimed.
    const [{ n: claimsBefore }] = (await svc.sql`SELECT count(*)::int AS n FROM claims`) as [{ n: number }]
    const second = await paidWith((await signedHeader(payer, afterUrl)).header)
    expect(second.status).toBe(402)
    expect((await second.json()).error).toBe('insufficient_funds')
    const [{ n: claimsAfter }] = (await svc.sql`SELECT count(*)::int AS n FROM claims`) as [{ n: number }]
    expect(claimsAfter).toBe(claimsBefore)
    // Two at once from one process: the first accepted, the other refused before any claim.
    await svc.jobs.runNow(UPTO_SETTLEMENT_JOB)
    const [a, b] = await Promise.all([signedHeader(payer, afterUrl), signedHeader(payer, afterUrl)])
    const answers = await Promise.all([paidWith(a.header), paidWith(b.header)])
    const statuses = answers.map((x) => x.status).sort()
    expect(statuses).toEqual([200, 402])
    const refused = answers.find((x) => x.status === 402)!
    expect(['permit2_allowance_pending', 'insufficient_funds']).toContain((await refused.json()).error)
    await answers.find((x) => x.status === 200)!.text()
    await svc.flushCaptures()
    await svc.jobs.runNow(UPTO_SETTLEMENT_JOB)
    expect(await permitNonce(payer)).toBe(2n)
    expect(await usdcBalance(payer.address)).toBe(10_000_000n - 2n * CHARGE)
    await expectReconciled()
  })

  it('refuses a forged approval or a spent nonce, claiming nothing', async () => {
    const payer = await fundedAccount(10_000_000n)
    const other = await fundedAccount(0n)
    const { payload } = await signedHeader(payer, afterUrl)
    const forged = await signedHeader(other, afterUrl)
    const ext = payload.extensions as Record<string, { info: Record<string, string> }>
    const otherInfo = (forged.payload.extensions as Record<string, { info: Record<string, string> }>)
      .eip2612GasSponsoring!.info
    const client = new x402HTTPClient(sponsoredClient(payer))
    const send = (info: Record<string, string>) =>
      paidWith(
        client.encodePaymentSignatureHeader({
          ...payload,
          extensions: { ...ext, eip2612GasSponsoring: { ...ext.eip2612GasSponsoring!, info } },
        }),
      )
    const [{ n: claimsBefore }] = (await svc.sql`SELECT count(*)::int AS n FROM claims`) as [{ n: number }]
    // Another key's signature over this payer's approval.
    const badSig = await send({ ...ext.eip2612GasSponsoring!.info, signature: otherInfo.signature! })
    expect(badSig.status).toBe(402)
    expect((await badSig.json()).error).toBe('invalid_eip2612_signature')
    // Another payer's approval altogether.
    const wrongFrom = await send(otherInfo)
    expect((await wrongFrom.json()).error).toBe('eip2612_from_mismatch')
    // A value other than the permit's maximum (the proxy would refuse it).
    const wrongValue = await send({ ...ext.eip2612GasSponsoring!.info, amount: '1' })
    expect((await wrongValue.json()).error).toBe('permit2_2612_amount_mismatch')
    // Malformed: invalid proof, not a throw.
    const malformed = await send({ ...ext.eip2612GasSponsoring!.info, nonce: 'x' })
    expect(malformed.status).toBe(402)
    expect((await malformed.json()).error).toBe('invalid_proof')
    const [{ n: claimsAfter }] = (await svc.sql`SELECT count(*)::int AS n FROM claims`) as [{ n: number }]
    expect(claimsAfter).toBe(claimsBefore)
    // A nonce the token no longer expects: pay once (nonce 0 spent at settlement), then replay an approval
    // signed for nonce 0 on a fresh permit.
    const paid = await paidWith((await signedHeader(payer, afterUrl)).header)
    expect(paid.status).toBe(200)
    await paid.text()
    await svc.flushCaptures()
    await svc.jobs.runNow(UPTO_SETTLEMENT_JOB)
    const fresh = await signedHeader(payer, afterUrl)
    const freshExt = fresh.payload.extensions as Record<string, { info: Record<string, string> }>
    expect(freshExt.eip2612GasSponsoring!.info.nonce).toBe('1')
    const stale = await paidWith(
      client.encodePaymentSignatureHeader({
        ...fresh.payload,
        extensions: {
          ...freshExt,
          eip2612GasSponsoring: { ...freshExt.eip2612GasSponsoring!, info: ext.eip2612GasSponsoring!.info },
        },
      }),
    )
    expect(stale.status).toBe(402)
    // Signed over nonce 0: its signature no longer matches nonce 1, and nonce 0 is spent.
    expect(['eip2612_nonce_mismatch', 'invalid_eip2612_signature']).toContain((await stale.json()).error)
    await expectReconciled()
  })

  it('settles before the answer through the settler slot: the client reads it as paid', async () => {
    const payer = await fundedAccount(10_000_000n)
    const before = await usdcBalance(payer.address)
    const r = await wrapFetchWithPayment(fetch, sponsoredClient(payer))(beforeUrl, REQUEST)
    expect(r.status).toBe(200)
    await r.text()
    const receipt = decodePaymentResponseHeader(r.headers.get('payment-response')!)
    expect(receipt.success).toBe(true)
    const mined = await publicClient.getTransactionReceipt({ hash: receipt.transaction as `0x${string}` })
    expect(mined.status).toBe('success')
    expect(before - (await usdcBalance(payer.address))).toBe(CHARGE)
    expect(await permitNonce(payer)).toBe(1n)
    // The next call, right after: the first is settled, so the client signs the next nonce and pays.
    const next = await wrapFetchWithPayment(fetch, sponsoredClient(payer))(beforeUrl, REQUEST)
    expect(next.status, await next.clone().text()).toBe(200)
    await next.text()
    expect(decodePaymentResponseHeader(next.headers.get('payment-response')!).success).toBe(true)
    expect(await permitNonce(payer)).toBe(2n)
    expect(before - (await usdcBalance(payer.address))).toBe(2n * CHARGE)
    await svc.flushCaptures()
    await expectReconciled()
  })
})

describe('a sponsored permit whose approval nonce is settled between its chain read and its claim', () => {
  let gate: RpcProxy
  let gated: TestService
  afterAll(async () => {
    await gated?.stop()
    await gate?.close()
  })

  // The chaos round's finding (migration 0082): the first permit's settlement used EIP-2612 nonce 0 after the
  // second permit's verification read nonce 0 from the chain and before its claim. Claimed, the second
  // approval could never be submitted, and the settlement would lean on what the first approval left.
  it('is refused and claims nothing; signed again on the next nonce, it pays', async () => {
    gate = await startRpcProxy(rpcUrl)
    const treasury = await fundedAccount(0n)
    await installUptoContracts(rpcUrl, treasury.address)
    gated = await startTestService({
      treasury,
      rpcUrl: gate.url,
      overrides: {
        proxy: { allow_private_upstreams: true },
        settlement: { interval_ms: 3_600_000 },
        payouts: { interval_ms: 3_600_000 },
      },
    })
    const ep = await gated.api('/api/v1/endpoints', {
      key: (await registerMerchant(gated)).key,
      body: {
        upstream_url: `${upstream.url}/v1`,
        x402_settlement: 'after',
        pricing: {
          model: 'usage',
          unit: 'tokens',
          max_price: Number(MAX_PRICE_ATOMIC) / 1e6,
          input_price_per_million: 3,
          output_price_per_million: 15,
        },
      },
    })
    expect(ep.status, ep.text).toBe(201)
    const url = `${ep.body.metered_url}/chat/completions`
    const payer = await fundedAccount(10_000_000n)
    const pay = (headers: Record<string, string>) =>
      fetch(url, { ...REQUEST, headers: { ...REQUEST.headers, ...headers } })
    const first = await pay((await signedHeader(payer, url)).header)
    expect(first.status).toBe(200)
    await first.text()
    await gated.flushCaptures()
    // Signed while the first is unsettled: the chain says nonce 0, so the approval is for nonce 0 again.
    const second = await signedHeader(payer, url)
    const ext = second.payload.extensions as Record<string, { info: Record<string, string> }>
    expect(ext.eip2612GasSponsoring!.info.nonce).toBe('0')
    // The token's nonce read of the second's verification (the selector of nonces(address)) is answered
    // 0, and only then is the first settled and booked: the claim comes after both.
    let settledBetween = false
    gate.afterAnswer = async (body) => {
      if (settledBetween || !body.includes('0x7ecebe00')) return
      settledBetween = true
      await gated.jobs.runNow(UPTO_SETTLEMENT_JOB)
    }
    const [{ n: claimsBefore }] = (await gated.sql`SELECT count(*)::int AS n FROM claims`) as [{ n: number }]
    let refused: Response
    try {
      refused = await pay(second.header)
    } finally {
      gate.afterAnswer = null
    }
    expect(settledBetween).toBe(true)
    expect(await permitNonce(payer)).toBe(1n)
    expect(refused.status).toBe(402)
    expect((await refused.json()).error).toBe('insufficient_funds')
    const [{ n: claimsAfter }] = (await gated.sql`SELECT count(*)::int AS n FROM claims`) as [{ n: number }]
    expect(claimsAfter).toBe(claimsBefore)
    // The client asks again: it reads nonce 1 now, and pays.
    const again = await signedHeader(payer, url)
    const againExt = again.payload.extensions as Record<string, { info: Record<string, string> }>
    expect(againExt.eip2612GasSponsoring!.info.nonce).toBe('1')
    const paid = await pay(again.header)
    expect(paid.status, await paid.clone().text()).toBe(200)
    await paid.text()
    await gated.flushCaptures()
    await gated.jobs.runNow(UPTO_SETTLEMENT_JOB)
    expect(await permitNonce(payer)).toBe(2n)
    expect(await usdcBalance(payer.address)).toBe(10_000_000n - 2n * CHARGE)
    const report = await reconcile({ sql: gated.sql, chain: gated.chain, config: gated.config })
    expect(report.differences).toEqual([])
  })
})
