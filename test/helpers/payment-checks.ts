// Holds the metered calls of a test file to the Payment protocol (src/data-plane/payment-protocol.ts): claimed
// at most once, then exactly one of capture, release or doubt before the call answers. A file calls it once
// at its top; each test then fails on a step out of order, and the file on one that came after its tests.
import { afterAll, afterEach, beforeAll, expect } from 'vitest'
import { paymentChecks } from '../../src/data-plane/payment-protocol.ts'

export function checkPaymentProtocol(): void {
  beforeAll(() => {
    paymentChecks.on = true
    paymentChecks.violations.length = 0
  })
  afterEach(() => {
    const seen = paymentChecks.violations.splice(0)
    expect(seen, 'Payment protocol').toEqual([])
  })
  afterAll(() => {
    paymentChecks.on = false
    const seen = paymentChecks.violations.splice(0)
    expect(seen, 'Payment protocol').toEqual([])
  })
}
