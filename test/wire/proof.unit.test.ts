import { describe, expect, it } from 'vitest'
import { parseProof } from '../../src/wire/proof.ts'

describe('parseProof', () => {
  it('reads a transaction hash, normalised to lower case', () => {
    const h = `0x${'AB'.repeat(32)}`
    expect(parseProof(` ${h} `)).toEqual({ kind: 'tx', hash: h.toLowerCase(), key: `tx:${h.toLowerCase()}` })
  })
  it('reads a base64 x402 payload', () => {
    const raw = Buffer.from(JSON.stringify({ x402Version: 1, scheme: 'exact', payload: {} })).toString(
      'base64',
    )
    expect(parseProof(raw)).toMatchObject({ kind: 'x402', version: 1 })
  })
  it('calls anything else invalid', () => {
    expect(parseProof('0x1234').kind).toBe('invalid')
    expect(parseProof('hello world').kind).toBe('invalid')
    expect(parseProof(`0x${'g'.repeat(64)}`).kind).toBe('invalid')
  })
})
