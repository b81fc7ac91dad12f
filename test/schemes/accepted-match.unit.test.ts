// `accepted` of an x402 v2 payload against the advertised requirement (as @x402/core matches it), and the
// per-reason PAYMENT-REQUIRED header built once per reason.
import { describe, expect, it } from 'vitest'
import { matchAccepted } from '../../src/schemes/exact/accepted-match.ts'
import { exactScheme } from '../../src/schemes/exact/index.ts'
import type { Offer, Quote, SchemeDeps } from '../../src/schemes/scheme.ts'
import { buildChallenge, v2Header } from '../../src/wire/challenge.ts'

const chain = {
  network: 'base-sepolia',
  chainId: 84532,
  x402Network: 'base-sepolia',
  caip2: 'eip155:84532',
  treasury: '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266',
  usdcAddress: '0x036CbD53842c5426634e7929541eC2318f3dCF7e',
  usdcName: 'USD Coin',
  usdcVersion: '2',
}
// The exact scheme's own offer: only its chain terms are read to build it.
const exact = await exactScheme({
  chainInfo: chain,
  settings: { ownerShareBps: 9500, retryWindowMs: 1 },
} as unknown as SchemeDeps)
const offer = exact.offer({
  amountAtomic: 10_000n,
  varies: false,
  maxTimeoutSeconds: 300,
  enabled: new Set(),
})
const challenge = buildChallenge({
  resourceUrl: 'http://127.0.0.1/m/ep_1',
  description: 'd',
  idField: 'endpoint_id',
  id: 'ep_1',
  offers: [offer as Offer],
})
const endpoint: Quote = {
  amountAtomic: 10_000n,
  floorAtomic: 5_000n,
  floorUntilMs: 1_000,
  varies: false,
  challenge,
}
const payload = (accepted: Record<string, unknown>, value = String(accepted.amount)) => ({
  x402Version: 2,
  accepted,
  payload: { authorization: { value } },
})
const ours = { ...challenge.accepts[0]! }

describe('matchAccepted', () => {
  it('takes the advertised requirement, and extra keys inside extra', () => {
    expect(matchAccepted(endpoint, payload(ours), 2_000)).toBeNull()
    expect(matchAccepted(endpoint, payload({ ...ours, extra: { ...ours.extra, more: 1 } }), 2_000)).toBeNull()
  })

  it('refuses any other core field, a missing or added one, or extra without ours', () => {
    for (const altered of [
      { ...ours, payTo: ours.payTo.toLowerCase() },
      { ...ours, network: 'base-sepolia' },
      { ...ours, scheme: 'upto' },
      { ...ours, maxTimeoutSeconds: 60 },
      { ...ours, memo: 'x' },
      { ...ours, extra: { name: 'USDC', version: '2' } },
      Object.fromEntries(Object.entries(ours).filter(([k]) => k !== 'asset')),
    ])
      expect(matchAccepted(endpoint, payload(altered), 2_000)).toBe('requirements_mismatch')
    expect(matchAccepted(endpoint, { x402Version: 2 }, 2_000)).toBe('requirements_mismatch')
  })

  it('takes exactly the price, or the quoted floor while it holds; the value must be that amount', () => {
    expect(matchAccepted(endpoint, payload({ ...ours, amount: '5000' }), 500)).toBeNull()
    expect(matchAccepted(endpoint, payload({ ...ours, amount: '5000' }), 2_000)).toBe('requirements_mismatch')
    expect(matchAccepted(endpoint, payload({ ...ours, amount: '20000' }), 500)).toBe('requirements_mismatch')
    expect(matchAccepted(endpoint, payload(ours, '20000'), 500)).toBe('wrong_amount')
    expect(matchAccepted(endpoint, payload(ours, '9999'), 500)).toBe('underpaid')
  })
})

describe('v2Header', () => {
  it('carries the reason, once per reason', () => {
    const decoded = JSON.parse(Buffer.from(v2Header(challenge, 'underpaid'), 'base64').toString())
    expect(decoded).toEqual({
      x402Version: 2,
      error: 'underpaid',
      resource: { url: 'http://127.0.0.1/m/ep_1', description: 'd', mimeType: 'application/json' },
      accepts: [ours],
      // Every v2 402 declares the payment-identifier extension (optional for the client).
      extensions: { 'payment-identifier': expect.objectContaining({ info: { required: false } }) },
    })
    expect(v2Header(challenge, 'underpaid')).toBe(v2Header(challenge, 'underpaid'))
    expect(challenge.v2Headers.size).toBe(1)
  })
})
