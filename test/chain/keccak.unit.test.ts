// The native keccak256 (src/chain/keccak.ts) must hash exactly as viem's: a transaction hash recorded before
// its broadcast, and every authorization digest, depend on it.
import { keccak256, toBytes } from 'viem'
import { describe, expect, it } from 'vitest'
import { keccakBackend, keccakBytes, keccakHex } from '../../src/chain/keccak.ts'

describe('keccak256', () => {
  it('loads the native binding on this machine (the bench reports which one answers)', () => {
    expect(keccakBackend).toBe('native')
  })

  // Buffer (native) and Uint8Array (viem) are compared as hex: the bytes are what matter.
  const hex = (b: Uint8Array) => Buffer.from(b).toString('hex')

  it('agrees with viem on strings, bytes, hex and a view into a larger buffer', () => {
    for (const text of ['', 'abc', 'TransferWithAuthorization(address from)', 'x'.repeat(1_000)]) {
      expect(hex(keccakBytes(text))).toBe(hex(keccak256(toBytes(text), 'bytes')))
    }
    const big = new Uint8Array(500).map((_, i) => (i * 31) & 0xff)
    // A subarray shares its parent's memory at an offset: the hash must cover only its own bytes.
    const view = big.subarray(37, 37 + 200)
    expect(hex(keccakBytes(view))).toBe(hex(keccak256(view.slice(), 'bytes')))
    const whole = `0x${hex(big)}` as const
    expect(keccakHex(whole)).toBe(keccak256(whole))
    expect(keccakHex('0x')).toBe(keccak256('0x'))
  })
})
