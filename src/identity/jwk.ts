// Public keys as a key directory publishes them (JWK), and their RFC 7638 thumbprint, which Web Bot Auth
// uses as the `keyid`.
import { createHash, createPublicKey, type KeyObject } from 'node:crypto'
import type { Algorithm } from './algorithms.ts'

export interface PublishedKey {
  keyid: string
  key: KeyObject
  alg: Algorithm
}

/** A JWK the directory lists, or null when it is no key we can verify with (skipped, not fatal). */
export function readJwk(jwk: unknown): PublishedKey | null {
  if (typeof jwk !== 'object' || jwk === null) return null
  const j = jwk as Record<string, unknown>
  let canonical: string
  let alg: Algorithm
  if (j.kty === 'OKP' && j.crv === 'Ed25519' && typeof j.x === 'string') {
    canonical = JSON.stringify({ crv: j.crv, kty: j.kty, x: j.x })
    alg = 'ed25519'
  } else if (j.kty === 'EC' && j.crv === 'P-256' && typeof j.x === 'string' && typeof j.y === 'string') {
    canonical = JSON.stringify({ crv: j.crv, kty: j.kty, x: j.x, y: j.y })
    alg = 'ecdsa-p256-sha256'
  } else if (j.kty === 'RSA' && typeof j.e === 'string' && typeof j.n === 'string') {
    canonical = JSON.stringify({ e: j.e, kty: j.kty, n: j.n })
    // Web Bot Auth signs with RSA only as rsa-pss-sha512; a directory key is bound to that one algorithm.
    alg = 'rsa-pss-sha512'
  } else {
    return null
  }
  let key: KeyObject
  try {
    const { d: _private, ...pub } = j
    key = createPublicKey({ key: pub as never, format: 'jwk' })
  } catch {
    return null
  }
  const keyid = createHash('sha256').update(canonical).digest('base64url')
  return { keyid, key, alg }
}
