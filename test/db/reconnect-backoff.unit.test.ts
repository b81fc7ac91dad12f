// The pause before reopening a database connection: the driver's curve, capped so that a restart of a few
// seconds never leaves queries waiting 7–20 s after the server is back.
import { describe, expect, it } from 'vitest'
import { RECONNECT_MAX_S, reconnectBackoffS } from '../../src/db/sql.ts'

describe('reconnect back-off', () => {
  it('never exceeds its cap, however many connects failed', () => {
    for (let retries = 0; retries <= 50; retries++) {
      expect(reconnectBackoffS(retries, 1)).toBeLessThanOrEqual(RECONNECT_MAX_S)
      expect(reconnectBackoffS(retries, 0)).toBeGreaterThan(0)
    }
    // Where the driver's own default would already wait 7–20 s.
    expect(reconnectBackoffS(7, 1)).toBe(RECONNECT_MAX_S)
    expect(RECONNECT_MAX_S).toBeLessThanOrEqual(0.25)
  })

  it("keeps the driver's curve and jitter below the cap", () => {
    expect(reconnectBackoffS(1, 0)).toBeCloseTo(0.5 * 0.03)
    expect(reconnectBackoffS(2, 1)).toBeCloseTo(0.09)
    expect(reconnectBackoffS(10, 0)).toBeCloseTo(RECONNECT_MAX_S / 2)
  })
})
