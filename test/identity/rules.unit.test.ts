// Identity rules: validated at the boundary with messages naming what is wrong; the first match decides;
// prices are integer base units (a multiplier rounds up, never to free).
import * as v from 'valibot'
import { describe, expect, it } from 'vitest'
import { decide, IdentityRulesInput, toRule } from '../../src/identity/rules.ts'
import type { Identity } from '../../src/identity/verify-request.ts'
import { scaleByBps } from '../../src/money.ts'

const verified = (signer: string, keyid = 'k1'): Identity => ({
  status: 'verified',
  signer,
  keyid,
  agent: 'https://bot.example',
  alg: 'ed25519',
  purpose: null,
  nonce: { key: `https://bot.example|${keyid}|n`, expiresAtMs: 0 },
})
const unsigned: Identity = { status: 'unsigned' }
const failed: Identity = { status: 'failed', reason: 'replayed_nonce' }

function rules(input: unknown) {
  const parsed = v.safeParse(IdentityRulesInput, input)
  if (!parsed.success) throw new Error(parsed.issues.map((i) => i.message).join('; '))
  return parsed.output.map(toRule)
}
function refusal(input: unknown): string {
  const parsed = v.safeParse(IdentityRulesInput, input)
  return parsed.success ? 'accepted' : parsed.issues.map((i) => i.message).join('; ')
}

describe('identity rules', () => {
  const set = rules([
    { match: 'signer', signer: 'acme', action: 'free' },
    { match: 'keyid', keyid: 'vip', action: 'price', price: '0.5' },
    { match: 'any_verified', action: 'multiplier', multiplier: 0.5 },
    { match: 'invalid_signature', action: 'block' },
    { match: 'unsigned', action: 'multiplier', multiplier: '2' },
  ])

  it('the first matching rule decides, in base units', () => {
    expect(decide(set, verified('acme'), 10_000n)).toEqual({
      kind: 'priced',
      atomic: 0n,
      rule: 0,
      action: 'free',
    })
    expect(decide(set, verified('other', 'vip'), 10_000n)).toMatchObject({ atomic: 500_000n, rule: 1 })
    expect(decide(set, verified('other'), 10_000n)).toMatchObject({
      atomic: 5_000n,
      rule: 2,
      action: 'multiplier',
    })
    expect(decide(set, unsigned, 10_000n)).toMatchObject({ atomic: 20_000n, rule: 4 })
  })

  it('a failed signature is unsigned unless a rule blocks it', () => {
    expect(decide(set, failed, 10_000n)).toEqual({ kind: 'block', rule: 3 })
    const lenient = rules([{ match: 'unsigned', action: 'price', price: 0.02 }])
    expect(decide(lenient, failed, 10_000n)).toMatchObject({ kind: 'priced', atomic: 20_000n })
  })

  it('no matching rule is the endpoint price', () => {
    expect(decide([], verified('acme'), 7n)).toEqual({
      kind: 'priced',
      atomic: 7n,
      rule: -1,
      action: 'endpoint_price',
    })
  })

  it('a multiplier rounds up to the base unit', () => {
    expect(scaleByBps(3n, 5_000)).toBe(2n)
    expect(scaleByBps(1n, 1)).toBe(1n)
    expect(scaleByBps(10_000n, 12_345)).toBe(12_345n)
  })

  it('bad rules are refused with a message naming the problem', () => {
    expect(refusal([{ match: 'signer', action: 'free' }])).toMatch(/signer is required/)
    expect(refusal([{ match: 'unsigned', action: 'multiplier', multiplier: 0 }])).toMatch(
      /multiplier is required/,
    )
    expect(refusal([{ match: 'unsigned', action: 'multiplier', multiplier: '1.23456' }])).toMatch(
      /4 decimals/,
    )
    expect(refusal([{ match: 'unsigned', action: 'price', price: -1 }])).toMatch(/price is required/)
    expect(refusal([{ match: 'invalid_signature', action: 'free' }])).toMatch(/takes action "block"/)
    expect(refusal([{ match: 'everyone', action: 'free' }])).toMatch(/must be "signer"/)
    expect(refusal(Array.from({ length: 17 }, () => ({ match: 'unsigned', action: 'free' })))).toMatch(
      /at most 16/,
    )
    expect(refusal([{ match: 'unsigned', action: 'free', extra: 1 }])).not.toBe('accepted')
  })
})
