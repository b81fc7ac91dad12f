// The Payment protocol checked at run time: a payment is claimed at most once, a won claim ends in exactly
// one of capture, release or doubt, nothing follows the end; off, payments pass unwrapped.
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { checkedPayment, paymentChecks, paymentEnded } from '../../src/data-plane/payment-protocol.ts'
import type { CallFacts, ClaimOutcome, Payment } from '../../src/schemes/scheme.ts'

const FACTS: CallFacts = {
  endpointId: 'ep_1',
  accountId: 'acct_1',
  ownerWallet: '0x0',
  method: 'GET',
  pricingModel: 'fixed',
}

function payment(claim: ClaimOutcome | Promise<ClaimOutcome> = 'won'): Payment & { steps: string[] } {
  const steps: string[] = []
  return {
    steps,
    scheme: 'fake',
    proofKey: 'fake:1',
    payer: '0x0000000000000000000000000000000000000001',
    coversAtomic: 10n,
    transaction: null,
    claim: () => {
      steps.push('claim')
      return claim
    },
    drop: () => steps.push('drop') && undefined,
    capture: () => steps.push('capture') && undefined,
    release: () => steps.push('release') && undefined,
    doubt: () => steps.push('doubt') && undefined,
    receipt: () => null,
  }
}

describe('the Payment protocol check', () => {
  beforeEach(() => {
    paymentChecks.on = true
  })
  afterEach(() => {
    paymentChecks.on = false
    paymentChecks.violations.length = 0
  })

  it('claim, capture, end: kept, and every step reaches the payment', () => {
    const inner = payment()
    const p = checkedPayment(inner)
    expect(p.claim()).toBe('won')
    p.capture({ ...FACTS, callId: 'call_1', status: 200, chargeAtomic: 10n, usage: null, receiptId: null })
    paymentEnded(p)
    expect(paymentChecks.violations).toEqual([])
    expect(inner.steps).toEqual(['claim', 'capture'])
  })

  it('a claim not won ends with nothing more; a dropped payment is never claimed', () => {
    const used = checkedPayment(payment('used'))
    used.claim()
    paymentEnded(used)
    const dropped = checkedPayment(payment())
    dropped.drop()
    paymentEnded(dropped)
    expect(paymentChecks.violations).toEqual([])
    dropped.claim()
    expect(paymentChecks.violations).toEqual([
      'fake fake:1: claim() on a payment dropped (expected verified)',
    ])
  })

  it('a second claim, a second ending and an ending without a claim are each named', () => {
    const p = checkedPayment(payment())
    p.release()
    p.claim()
    p.claim()
    p.release()
    p.doubt(FACTS)
    expect(paymentChecks.violations).toEqual([
      'fake fake:1: release() on a payment verified (expected claimed)',
      'fake fake:1: claim() on a payment claimed (expected verified)',
      'fake fake:1: doubt() on a payment released (expected claimed)',
    ])
  })

  it('a won claim the call leaves without capture, release or doubt is named when it answers', async () => {
    const p = checkedPayment(payment(Promise.resolve('won')))
    await p.claim()
    paymentEnded(p)
    expect(paymentChecks.violations).toEqual([
      'fake fake:1: call ended with the payment claimed, neither captured, released nor doubted',
    ])
  })

  it('off: the payment itself, unwrapped', () => {
    paymentChecks.on = false
    const inner = payment()
    expect(checkedPayment(inner)).toBe(inner)
  })
})
