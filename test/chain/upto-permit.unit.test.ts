// The hand-built Permit2 upto digest equals viem's generic EIP-712 hash of the same typed data, for random
// permits on several chains (the contracts' acceptance of the published client's signatures is tested on
// anvil in upto-permit.test.ts): a field out of place or a wrong type string would differ here.
import { randomBytes } from 'node:crypto'
import { type Address, bytesToHex, getAddress } from 'viem'
import { describe, expect, it } from 'vitest'
import {
  UPTO_PROXY_ADDRESS,
  type UptoPermit,
  uptoPermitDigest,
  uptoPermitDigestBytes,
} from '../../src/chain/upto-permit.ts'

const address = (): Address => getAddress(`0x${randomBytes(20).toString('hex')}`)
const uint = (bytes: number) => BigInt(`0x${randomBytes(bytes).toString('hex')}`)

describe('upto permit digest', () => {
  it('is what viem hashTypedData gives, for random permits and chains', () => {
    for (let i = 0; i < 200; i++) {
      const p: UptoPermit = {
        from: address(),
        token: address(),
        amount: uint(1 + (i % 32)),
        spender: i % 2 ? UPTO_PROXY_ADDRESS : address(),
        nonce: uint(32),
        deadline: uint(1 + (i % 8)),
        to: address(),
        facilitator: address(),
        validAfter: i % 3 ? 0n : uint(4),
      }
      const chainId = [1, 8453, 84532, 31337][i % 4]!
      expect(bytesToHex(uptoPermitDigestBytes(chainId, p))).toBe(uptoPermitDigest(chainId, p))
    }
  })

  it('throws on a malformed field rather than hashing something else', () => {
    const p = {
      from: '0x12',
      token: address(),
      amount: 1n,
      spender: address(),
      nonce: 1n,
      deadline: 1n,
      to: address(),
      facilitator: address(),
      validAfter: 0n,
    } as never
    expect(() => uptoPermitDigestBytes(1, { ...(p as UptoPermit), token: '0x12' as Address })).toThrow()
    expect(() => uptoPermitDigestBytes(1, { ...(p as UptoPermit), token: address(), amount: -1n })).toThrow()
  })
})
