// Ed25519 through libsodium must answer exactly as node:crypto does for every signature an honest or a
// careless signer can send: valid, over other bytes, altered, cut short, by another key.
import { createPublicKey, generateKeyPairSync, type KeyObject, randomBytes, sign } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { verifyWith } from '../../src/identity/algorithms.ts'
import { ed25519Backend, verifyEd25519, verifyWithNode } from '../../src/identity/ed25519.ts'

function keyPair(): { publicKey: KeyObject; privateKey: KeyObject } {
  return generateKeyPairSync('ed25519')
}

describe('Ed25519 verification', () => {
  it('runs on libsodium here (sodium-native is installed: the fast path is the one tested)', () => {
    expect(ed25519Backend).toBe('sodium')
  })

  it('agrees with node:crypto on valid, altered, truncated and foreign signatures', () => {
    const other = keyPair()
    for (let i = 0; i < 200; i++) {
      const { publicKey, privateKey } = keyPair()
      const data = randomBytes(1 + (i % 300))
      const good = sign(null, data, privateKey)
      const flipped = Buffer.from(good)
      flipped[i % 64]! ^= 1 << (i % 8)
      const otherData = Buffer.from(data)
      otherData[i % data.length]! ^= 1
      const cases: Array<[KeyObject, Buffer, Uint8Array, boolean]> = [
        [publicKey, data, good, true],
        [publicKey, data, flipped, false],
        [publicKey, otherData, good, false],
        [other.publicKey, data, good, false],
        [publicKey, data, good.subarray(0, 63), false],
        [publicKey, data, Buffer.concat([good, Buffer.from([0])]), false],
        [publicKey, data, new Uint8Array(0), false],
      ]
      for (const [key, bytes, sig, expected] of cases) {
        expect(verifyEd25519(key, bytes, sig)).toBe(expected)
        expect(verifyWithNode(key, bytes, sig)).toBe(expected)
      }
    }
  })

  it('reads a signature from a view into a larger buffer at its own offset', () => {
    const { publicKey, privateKey } = keyPair()
    const data = Buffer.from('"@authority": example.com\n"@signature-params": ("@authority")')
    const sig = sign(null, data, privateKey)
    const wide = Buffer.concat([Buffer.from('junk'), sig, Buffer.from('more')])
    expect(verifyEd25519(publicKey, data, wide.subarray(4, 68))).toBe(true)
    expect(verifyEd25519(publicKey, data, wide.subarray(3, 67))).toBe(false)
  })

  it('refuses a small-order key, whose one signature OpenSSL takes for every message', () => {
    // The neutral point (y = 1) as the key and as R, S = 0: [S]B = R + [k]A holds for any message k hashes.
    // OpenSSL says valid; libsodium refuses small-order keys and R points. A directory could publish it.
    const neutral = Buffer.alloc(32)
    neutral[0] = 1
    const key = createPublicKey({
      key: { kty: 'OKP', crv: 'Ed25519', x: neutral.toString('base64url') },
      format: 'jwk',
    })
    const forged = Buffer.concat([neutral, Buffer.alloc(32)])
    for (const message of ['GET /m/ep_1', 'anything at all']) {
      expect(verifyWithNode(key, Buffer.from(message), forged)).toBe(true)
      expect(verifyEd25519(key, Buffer.from(message), forged)).toBe(false)
    }
    const zero = createPublicKey({
      key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.alloc(32).toString('base64url') },
      format: 'jwk',
    })
    expect(verifyEd25519(zero, Buffer.from('x'), Buffer.alloc(64))).toBe(false)
  })

  it('refuses with a key that is not an Ed25519 public key, as node:crypto does', () => {
    const { privateKey } = keyPair()
    const data = Buffer.from('x')
    const sig = sign(null, data, privateKey)
    const x25519 = generateKeyPairSync('x25519').publicKey
    expect(verifyEd25519(x25519, data, sig)).toBe(false)
    expect(verifyWithNode(x25519, data, sig)).toBe(false)
  })

  it('is what verifyWith uses for ed25519 keys', () => {
    const { publicKey, privateKey } = keyPair()
    const base = '"@method": GET\n"@signature-params": ("@method");created=1'
    const sig = sign(null, Buffer.from(base), privateKey)
    expect(verifyWith('ed25519', publicKey, base, sig)).toBe(true)
    expect(verifyWith('ed25519', publicKey, `${base} `, sig)).toBe(false)
  })
})
