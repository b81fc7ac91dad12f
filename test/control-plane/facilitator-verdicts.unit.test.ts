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

const A = { id: 'acct_a', wallet_address: '0x00000000000000000000000000000000000000bb' }
const B = { id: 'acct_b', wallet_address: '0x00000000000000000000000000000000000000bb' }

describe('FacilitatorVerdicts', () => {
  // The raw body as it arrived (keyOf hashes the bytes, not the parsed body serialized again).
  const bytes = (o: unknown) => Buffer.from(JSON.stringify(o))
  const sent = { x402Version: 2, paymentPayload: { a: 1 }, paymentRequirements: { b: 2 } }
  const body = bytes(sent)
  const balance = { atomic: 5000n, block: 7n }

  it('serves the same account, wallet and body once', () => {
    const verdicts = new FacilitatorVerdicts()
    const key = FacilitatorVerdicts.keyOf(A, body)
    verdicts.hold(key, { checked: checked(1_000n), balance })
    expect(verdicts.take(FacilitatorVerdicts.keyOf(B, body), 100n)).toBeNull()
    expect(verdicts.take(FacilitatorVerdicts.keyOf(A, bytes({ ...sent, x402Version: 1 })), 100n)).toBeNull()
    // The same payload sent with other bytes only misses (it is then checked in full).
    expect(
      verdicts.take(FacilitatorVerdicts.keyOf(A, Buffer.from(JSON.stringify(sent, null, 1))), 100n),
    ).toBeNull()
    const moved = { ...A, wallet_address: '0x00000000000000000000000000000000000000cc' }
    expect(verdicts.take(FacilitatorVerdicts.keyOf(moved, body), 100n)).toBeNull()
    expect(verdicts.take(key, 100n)?.balance).toEqual(balance)
    expect(verdicts.take(key, 100n)).toBeNull()
  })

  it('does not serve an authorization that no longer leaves settlement 6 s', () => {
    const verdicts = new FacilitatorVerdicts()
    const key = FacilitatorVerdicts.keyOf(A, body)
    verdicts.hold(key, { checked: checked(105n), balance })
    expect(verdicts.take(key, 100n)).toBeNull()
  })
})
