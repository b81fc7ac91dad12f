// The session meter: Realtime usage events summed and priced once (rounded up once), per-message prices,
// bytes and duration, and the estimate for an answer cut before its usage came.
import { describe, expect, it } from 'vitest'
import type { UsagePricing } from '../../src/pricing/model.ts'
import { SessionMeter, splitCharge } from '../../src/pricing/session.ts'

const TOKENS: UsagePricing = {
  model: 'usage',
  unit: 'tokens',
  maxAtomic: 50_000n,
  perMbAtomic: null,
  perSecondAtomic: null,
  inputPerMillionAtomic: 2_000_000n,
  outputPerMillionAtomic: 10_000_000n,
  cachedInputPerMillionAtomic: 1_000_000n,
  onMissingUsage: 'max_price',
}
const done = (input: number, cached: number, output: number) =>
  Buffer.from(
    JSON.stringify({
      type: 'response.done',
      response: {
        usage: { input_tokens: input, output_tokens: output, input_token_details: { cached_tokens: cached } },
      },
    }),
  )
const delta = Buffer.from('{"type":"response.text.delta","delta":"hi"}')

describe('session meter', () => {
  it('sums usage events and rounds up once, not once per answer', () => {
    // $0.30 per million cached tokens: 0.3 of a base unit a token. Three answers of one cached token each
    // cost 0.9 → 1 base unit, where rounding each answer up would charge 3.
    const pricing = { ...TOKENS, cachedInputPerMillionAtomic: 300_000n }
    const m = new SessionMeter(pricing, { maxMessageBytes: 1024, perMessageAtomic: 0n, topUpWaitMs: 0 }, 0)
    for (let i = 0; i < 3; i++) m.delivered(done(1, 1, 0), false)
    expect(m.chargeAtomic(0)).toBe(1n)
    const record = m.finish(10, 50_000n, false)
    expect(record).toMatchObject({ chargeAtomic: 1n, source: 'measured', capped: false })
    expect(record.quantities).toMatchObject({ input_tokens: 0, cached_input_tokens: 3, output_tokens: 0 })
  })

  it('counts unreported deltas as output tokens when the session is cut mid-answer, not when the upstream broke off', () => {
    const cut = new SessionMeter(TOKENS, { maxMessageBytes: 1024, perMessageAtomic: 0n, topUpWaitMs: 0 }, 0)
    cut.delivered(done(10, 2, 100), false)
    for (let i = 0; i < 7; i++) cut.delivered(delta, false)
    // (8 input × 2 + 2 cached × 1 + 107 output × 10) base units: the 7 deltas count as output tokens.
    expect(cut.finish(1, 50_000n, true)).toMatchObject({ chargeAtomic: 1_088n, fallback: 'client_aborted' })
    const broken = new SessionMeter(
      TOKENS,
      { maxMessageBytes: 1024, perMessageAtomic: 0n, topUpWaitMs: 0 },
      0,
    )
    broken.delivered(done(10, 2, 100), false)
    for (let i = 0; i < 7; i++) broken.delivered(delta, false)
    expect(broken.finish(1, 50_000n, false)).toMatchObject({ chargeAtomic: 1_018n, fallback: null })
  })

  it('never charges more than the payment covers, and ignores a malformed usage object', () => {
    const m = new SessionMeter(TOKENS, { maxMessageBytes: 1024, perMessageAtomic: 0n, topUpWaitMs: 0 }, 0)
    m.delivered(
      Buffer.from('{"type":"response.done","response":{"usage":{"input_tokens":-1,"output_tokens":5}}}'),
      false,
    )
    expect(m.chargeAtomic(0)).toBe(0n)
    m.delivered(done(0, 0, 10_000), false)
    expect(m.finish(1, 50_000n, false)).toMatchObject({ chargeAtomic: 50_000n, capped: true })
  })

  it('adds the per-message price, and prices bytes and duration by their unit', () => {
    const terms = { maxMessageBytes: 1024, perMessageAtomic: 7n, topUpWaitMs: 0 }
    const bytes = new SessionMeter({ ...TOKENS, unit: 'response_bytes', perMbAtomic: 1_000_000n }, terms, 0)
    bytes.delivered(Buffer.alloc(1_500), true)
    bytes.delivered(Buffer.alloc(1), true)
    // 2 messages × 7 + 1,501 bytes at $1 per MB (1 base unit per byte).
    expect(bytes.chargeAtomic(0)).toBe(14n + 1_501n)
    const time = new SessionMeter({ ...TOKENS, unit: 'duration_ms', perSecondAtomic: 1_000n }, terms, 0)
    expect(time.chargeAtomic(2_500)).toBe(2_500n)
  })

  it("splits a session's charge over its payments in the order they were paid, adding up to it", () => {
    expect(splitCharge(70_000n, [50_000n, 50_000n])).toEqual([50_000n, 20_000n])
    expect(splitCharge(30_000n, [50_000n, 50_000n])).toEqual([30_000n, 0n])
    expect(splitCharge(100_000n, [50_000n, 50_000n])).toEqual([50_000n, 50_000n])
    expect(splitCharge(0n, [50_000n])).toEqual([0n])
  })
})
