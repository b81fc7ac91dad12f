// WebSocket sessions opened by a pass, end to end with the published clients unchanged: the pass bought at
// /pass/<id> by @x402/fetch + @x402/evm, the upgrade signed in with @x402/extensions' sign-in-with-x helper
// (createSIWxPayload on the 402's challenge), a real `ws` client against the demo-realtime upstream. A
// session draws one use (the HTTP call's draw), relays both ways and is charged nothing; a used-up pass gets
// the 402 with the pass offer; the pass ending closes the session with 4402; a sign-in message serves once,
// on any instance. Anvil with chain id 84532 as base-sepolia, as the pass tests.
import { decodePaymentRequiredHeader } from '@x402/core/http'
import { createSIWxPayload, encodeSIWxHeader, type SIWxExtension } from '@x402/extensions/sign-in-with-x'
import type { Hex } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import type { Service } from '../../src/service.ts'
import { usingServer } from '../helpers/database.ts'
import { type RealtimeUpstream, startRealtimeUpstream } from '../helpers/realtime-upstream.ts'
import { callApi } from '../helpers/service.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { openWs, upgradeAnswer } from '../helpers/ws-client.ts'
import { exactPayer } from '../helpers/x402-v2.ts'
import {
  registerMerchantKey,
  startBaseSepoliaChain,
  startBaseSepoliaPair,
  startBaseSepoliaService,
} from '../x402/harness.ts'

const NETWORK = 'eip155:84532'

let chain: DevChain
let svc: Service
let upstream: RealtimeUpstream
let ownerKey: string

/**
 * A SIGN-IN-WITH-X header signed by the published helper for the challenge of a refused upgrade at `url`,
 * bound to the metered URL the challenge names (the public one).
 */
async function signedHeader(url: string, key: Hex, meteredUrl = url): Promise<string> {
  const refused = await upgradeAnswer(url)
  expect(refused.status).toBe(402)
  const required = decodePaymentRequiredHeader(refused.headers['payment-required'] as string)
  const siwx = required.extensions?.['sign-in-with-x'] as SIWxExtension
  const info = { ...siwx.info, chainId: NETWORK, type: 'eip191' }
  return encodeSIWxHeader(await createSIWxPayload(info as never, privateKeyToAccount(key), meteredUrl))
}

async function passEndpoint(base: string, apiKey: string, pass: Record<string, unknown>) {
  const ep = await callApi(base, '/api/v1/endpoints', {
    key: apiKey,
    body: { upstream_url: `${upstream.url}/v1/realtime`, price: 0.01, pass, websocket: {} },
  })
  expect(ep.status, JSON.stringify(ep.body)).toBe(201)
  return { id: ep.body.id as string, meteredUrl: ep.body.metered_url as string }
}

async function passRow(endpointId: string) {
  const [row] = await svc.sql<{ id: string; uses_left: number | null; draws: number }[]>`
    SELECT p.id, p.uses_left, (SELECT count(*) FROM pass_draws d WHERE d.pass_id = p.id)::int AS draws
    FROM passes p WHERE p.endpoint_id = ${endpointId}`
  return row!
}

beforeAll(async () => {
  chain = await startBaseSepoliaChain()
  upstream = await startRealtimeUpstream()
  svc = await startBaseSepoliaService(chain, chain.rpcUrl, {
    proxy: { allow_private_upstreams: true },
    settlement: { interval_ms: 200 },
  } as never)
  ownerKey = await registerMerchantKey(svc.url, chain.payers[4]!.address, 'Realtime Pass Co')
})
afterAll(async () => {
  await svc?.stop()
  await upstream?.close()
  await chain?.stop()
})

describe('WebSocket sessions opened by a pass', () => {
  it('websocket on a fixed price needs a pass, and takes no price per message there', async () => {
    const bare = await callApi(svc.url, '/api/v1/endpoints', {
      key: ownerKey,
      body: { upstream_url: `${upstream.url}/v1/realtime`, price: 0.01, websocket: {} },
    })
    expect([bare.status, bare.body.error.param]).toEqual([400, 'websocket'])
    const priced = await callApi(svc.url, '/api/v1/endpoints', {
      key: ownerKey,
      body: {
        upstream_url: `${upstream.url}/v1/realtime`,
        price: 0.01,
        pass: { price: 0.05, calls: 2 },
        websocket: { price_per_message: 0.001 },
      },
    })
    expect([priced.status, priced.body.error.param]).toEqual([400, 'websocket.price_per_message'])
    const ep = await passEndpoint(svc.url, ownerKey, { price: 0.05, calls: 2 })
    // The pass is what opens its sessions: it is not stopped while they are allowed.
    const stop = await callApi(svc.url, `/api/v1/endpoints/${ep.id}`, {
      key: ownerKey,
      method: 'PATCH',
      body: { pass: null },
    })
    expect([stop.status, stop.body.error.param]).toEqual([400, 'pricing'])
  })

  it('a session signed in draws one use, relays both ways, charges nothing; a used-up pass gets the 402', async () => {
    const ep = await passEndpoint(svc.url, ownerKey, { price: 0.05, calls: 2 })
    const key = chain.payers[1]!.privateKey as Hex
    // No pass yet: the 402 with the pass offer and the sign-in challenge, as for a call.
    const unpaid = await upgradeAnswer(ep.meteredUrl)
    expect(unpaid.status).toBe(402)
    expect(JSON.parse(unpaid.body).extensions['tollgate-pass'].info).toMatchObject({ calls: 2 })
    const early = await upgradeAnswer(ep.meteredUrl, {
      'sign-in-with-x': await signedHeader(ep.meteredUrl, key),
    })
    expect([early.status, JSON.parse(early.body).error]).toEqual([402, 'no_live_pass'])

    const bought = await exactPayer(key).fetch(`${svc.url}/pass/${ep.id}`, { method: 'POST' })
    expect(bought.status, await bought.clone().text()).toBe(201)
    const calls = await svc.sql<
      { n: number }[]
    >`SELECT count(*)::int AS n FROM calls WHERE endpoint_id = ${ep.id}`

    const header = await signedHeader(ep.meteredUrl, key)
    const s = await openWs(ep.meteredUrl, { 'sign-in-with-x': header }, ['realtime'])
    expect(s.headers['x-pass-uses-left']).toBe('1')
    const receiptId = s.headers['x-receipt-id'] as string
    expect(receiptId).toMatch(/^rcpt_/)
    expect(await passRow(ep.id)).toMatchObject({ uses_left: 1, draws: 1 })
    expect(upstream.upgrades.at(-1)!['sign-in-with-x']).toBeUndefined()
    s.ws.send(JSON.stringify({ type: 'response.create', response: { words: 20 } }))
    await waitFor(() => s.count('response.done') === 1, { what: 'the response.done' })
    s.ws.send('hello')
    await waitFor(() => s.messages.includes('hello'), { what: 'the echo' })
    // No credit to top up, no in-band ask for payment.
    expect(s.payment()).toEqual([])
    s.ws.close(1000, 'bye')
    expect((await s.closed).code).toBe(1000)
    // Recorded as a signed-in call's use: its receipt written on the draw; no call row, no money.
    await waitFor(
      async () =>
        (await svc.sql`SELECT 1 FROM pass_draws WHERE receipt_id = ${receiptId} AND upstream_status = 101`)
          .length === 1,
      { what: 'the receipt on the draw' },
    )
    const after = await svc.sql<
      { n: number }[]
    >`SELECT count(*)::int AS n FROM calls WHERE endpoint_id = ${ep.id}`
    expect(after[0]!.n).toBe(calls[0]!.n)
    const receipt = await fetch(`${svc.url}/receipts/${receiptId}`)
    expect(receipt.status).toBe(200)
    expect(await receipt.json()).toMatchObject({ scheme: 'pass', amount_atomic: '0' })

    // The same message again: refused, nothing drawn.
    const replay = await upgradeAnswer(ep.meteredUrl, { 'sign-in-with-x': header })
    expect([replay.status, JSON.parse(replay.body).error]).toEqual([402, 'invalid_siwx_nonce'])
    // A second session draws the second use; the pass is then used up.
    const second = await openWs(ep.meteredUrl, { 'sign-in-with-x': await signedHeader(ep.meteredUrl, key) })
    expect(second.headers['x-pass-uses-left']).toBe('0')
    second.ws.close(1000)
    await second.closed
    expect(await passRow(ep.id)).toMatchObject({ uses_left: 0, draws: 2 })
    const spent = await upgradeAnswer(ep.meteredUrl, {
      'sign-in-with-x': await signedHeader(ep.meteredUrl, key),
    })
    expect(spent.status).toBe(402)
    const body = JSON.parse(spent.body)
    expect(body.error).toBe('no_live_pass')
    expect(body.extensions['tollgate-pass'].info.purchase_url).toBe(`${svc.url}/pass/${ep.id}`)
    expect(await passRow(ep.id)).toMatchObject({ uses_left: 0, draws: 2 })
  })

  it('the pass ending closes the session with 4402', async () => {
    const ep = await passEndpoint(svc.url, ownerKey, { price: 0.05, duration_s: 3600 })
    const key = chain.payers[2]!.privateKey as Hex
    const bought = await exactPayer(key).fetch(`${svc.url}/pass/${ep.id}`, { method: 'POST' })
    expect(bought.status, await bought.clone().text()).toBe(201)
    await svc.sql`UPDATE passes SET expires_at = now() + interval '2 seconds' WHERE endpoint_id = ${ep.id}`
    const s = await openWs(ep.meteredUrl, { 'sign-in-with-x': await signedHeader(ep.meteredUrl, key) })
    expect(s.headers['x-pass-uses-left']).toBe('unlimited')
    s.ws.send('still here')
    await waitFor(() => s.messages.includes('still here'), { what: 'the echo' })
    const started = Date.now()
    expect(await s.closed).toEqual({ code: 4402, reason: 'payment required: the pass expired' })
    expect(Date.now() - started).toBeLessThan(3_000)
    const refused = await upgradeAnswer(ep.meteredUrl, {
      'sign-in-with-x': await signedHeader(ep.meteredUrl, key),
    })
    expect([refused.status, JSON.parse(refused.body).error]).toEqual([402, 'no_live_pass'])
  })

  it('gives the use back when the upstream cannot be reached', async () => {
    const ep = await passEndpoint(svc.url, ownerKey, { price: 0.05, calls: 1 })
    const key = chain.payers[1]!.privateKey as Hex
    const bought = await exactPayer(key).fetch(`${svc.url}/pass/${ep.id}`, { method: 'POST' })
    expect(bought.status, await bought.clone().text()).toBe(201)
    // Port 9 (discard) on loopback: nothing listens, the upstream socket is refused.
    const moved = await callApi(svc.url, `/api/v1/endpoints/${ep.id}`, {
      key: ownerKey,
      method: 'PATCH',
      body: { upstream_url: 'http://127.0.0.1:9/v1/realtime' },
    })
    expect(moved.status, JSON.stringify(moved.body)).toBe(200)
    await waitFor(
      async () =>
        (await upgradeAnswer(ep.meteredUrl, { 'sign-in-with-x': await signedHeader(ep.meteredUrl, key) }))
          .status === 502,
      { what: 'the upgrade refused by the upstream' },
    )
    await waitFor(async () => (await passRow(ep.id)).uses_left === 1, { what: 'the use given back' })
  })
})

describe.runIf(usingServer)('a pass session on two instances of one PostgreSQL', () => {
  const PUBLIC = 'http://tollgate.test'
  /** Where an instance listens (its url is the public one). */
  const local = (s: Service) => `http://127.0.0.1:${s.port}`
  let a: Service
  let b: Service

  beforeAll(async () => {
    // One public URL for both, as behind one load balancer: a sign-in names it, not the instance.
    ;[a, b] = await startBaseSepoliaPair(chain, {
      server: { public_url: PUBLIC },
      proxy: { allow_private_upstreams: true },
    })
  })
  afterAll(async () => {
    await a?.stop()
    await b?.stop()
  })

  it('a sign-in that opened a session on one is refused on the other; a fresh one draws', async () => {
    const merchantKey = await registerMerchantKey(local(a), chain.payers[4]!.address, 'Two Realtime Co')
    const ep = await passEndpoint(local(a), merchantKey, { price: 0.05, calls: 3 })
    const key = chain.payers[3]!.privateKey as Hex
    const bought = await exactPayer(key).fetch(`${local(b)}/pass/${ep.id}`, { method: 'POST' })
    expect(bought.status, await bought.clone().text()).toBe(201)
    expect(ep.meteredUrl).toBe(`${PUBLIC}/m/${ep.id}`)
    const onA = `${local(a)}/m/${ep.id}`
    const onB = `${local(b)}/m/${ep.id}`
    const header = await signedHeader(onA, key, ep.meteredUrl)
    const s = await openWs(onA, { 'sign-in-with-x': header })
    const replay = await upgradeAnswer(onB, { 'sign-in-with-x': header })
    expect([replay.status, JSON.parse(replay.body).error]).toEqual([402, 'invalid_siwx_nonce'])
    const other = await openWs(onB, { 'sign-in-with-x': await signedHeader(onB, key, ep.meteredUrl) })
    expect(other.headers['x-pass-uses-left']).toBe('1')
    s.ws.close(1000)
    other.ws.close(1000)
    await Promise.all([s.closed, other.closed])
    const [row] = await a.sql<{ uses_left: number; draws: number }[]>`
      SELECT p.uses_left, (SELECT count(*) FROM pass_draws d WHERE d.pass_id = p.id)::int AS draws
      FROM passes p WHERE p.endpoint_id = ${ep.id}`
    expect(row).toEqual({ uses_left: 1, draws: 2 })
  })
})
