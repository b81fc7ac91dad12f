// The intake throttle's verdicts: exact, upto and MPP refuse new payloads while the settlement backlog lags
// or the token cannot pay the treasury; batch-settlement (its channel claims are not in the backlog) only in
// the second case.
import { describe, expect, it } from 'vitest'
import { backlogRefusal, haltRefusal } from '../../src/schemes/verdicts.ts'

const throttle = (engaged: boolean, code: 'settlement_backlog' | 'settlement_halted') => ({
  engaged,
  code,
  retryAfterS: 5,
})

describe('intake throttle verdicts', () => {
  it('the backlog refuses the schemes it counts, not channels', () => {
    expect(backlogRefusal(throttle(true, 'settlement_backlog'))).toEqual({
      ok: 'error',
      code: 'settlement_backlog',
      retryAfterS: 5,
    })
    expect(haltRefusal(throttle(true, 'settlement_backlog'))).toBeNull()
  })

  it('a halted token refuses every x402 way to pay, channels included', () => {
    const halted = { ok: 'error', code: 'settlement_halted', retryAfterS: 5 }
    expect(backlogRefusal(throttle(true, 'settlement_halted'))).toEqual(halted)
    expect(haltRefusal(throttle(true, 'settlement_halted'))).toEqual(halted)
  })

  it('nothing engaged, or no throttle: go on', () => {
    for (const t of [throttle(false, 'settlement_halted'), undefined]) {
      expect(backlogRefusal(t)).toBeNull()
      expect(haltRefusal(t)).toBeNull()
    }
  })
})
