// The verdict /verify holds for the /settle of the same body: by account and body, used once, and only while
// the authorization still leaves settlement its 6 s.
import { describe, expect, it } from 'vitest'
import { type ExactChecked, FacilitatorVerdicts } from '../../src/control-plane/facilitator-verdicts.ts'

function checked(validBefore: bigint): ExactChecked {
  return {
    ok: true,
    kind: 'eip3009',
    proofKey: 'auth:84532:usdc:0xaa:0x01',
    payer: '0x00000000000000000000000000000000000000aa',
    valueAtomic: 1000n,
    custody: 'treasury',
    payTo: '0x00000000000000000000000000000000000000bb',
    network: 'eip155:84532',
    paymentIdentifier: null,
    nonce: '0x01',
    authorization: {
      signature: '0x00',
      from: '0x00000000000000000000000000000000000000aa',
      to: '0x00000000000000000000000000000000000000bb',
      value: '1000',
      validAfter: '0',
      validBefore: validBefore.toString(),
      nonce: '0x01',
    },
  }
}

describe('FacilitatorVerdicts', () => {
  const body = { x402Version: 2, paymentPayload: { a: 1 }, paymentRequirements: { b: 2 } }
  const balance = { atomic: 5000n, block: 7n }

  it('serves the same account and body once', () => {
    const verdicts = new FacilitatorVerdicts()
    const key = FacilitatorVerdicts.keyOf('acct_a', body)
    verdicts.hold(key, { checked: checked(1_000n), balance })
    expect(verdicts.take(FacilitatorVerdicts.keyOf('acct_b', body), 100n)).toBeNull()
    expect(verdicts.take(FacilitatorVerdicts.keyOf('acct_a', { ...body, x402Version: 1 }), 100n)).toBeNull()
    expect(verdicts.take(key, 100n)?.balance).toEqual(balance)
    expect(verdicts.take(key, 100n)).toBeNull()
  })

  it('does not serve an authorization that no longer leaves settlement 6 s', () => {
    const verdicts = new FacilitatorVerdicts()
    const key = FacilitatorVerdicts.keyOf('acct_a', body)
    verdicts.hold(key, { checked: checked(105n), balance })
    expect(verdicts.take(key, 100n)).toBeNull()
  })
})
