// Ed25519 verification of Web Bot Auth signatures: libsodium's (the `sodium-native` package, an optional
// dependency) when it loads, else node:crypto's (OpenSSL). Per CPU second of one core, a Web Bot Auth
// signature base: node:crypto 11,798 verifications (85 µs each), libsodium 25,985 (38 µs)
// (`npm run bench -- recover`, its ed25519_* figures; every full run records them). In the `signed-agent`
// profile node:crypto's verification was 75 % of the busy time of a signed 402. Both implement RFC 8032 and
// agree on every signature an honest signer makes; libsodium also refuses small-order keys and R points,
// which OpenSSL accepts: with the neutral point as the key, one signature (R neutral, S = 0) passes OpenSSL's
// check for every message (test/identity/ed25519.unit.test.ts): a directory publishing such a key would let
// anyone sign as its signer, not only itself. The fallback keeps OpenSSL's answer.

import { type KeyObject, verify } from 'node:crypto'
import { createRequire } from 'node:module'

interface Sodium {
  crypto_sign_verify_detached(signature: Buffer, message: Buffer, publicKey: Buffer): boolean
  crypto_sign_BYTES: number
  crypto_sign_PUBLICKEYBYTES: number
}

/** The package's binding, or null: not installed (optional), or its binary does not load here. */
function loadSodium(): Sodium | null {
  try {
    const sodium = createRequire(import.meta.url)('sodium-native') as Sodium
    return typeof sodium.crypto_sign_verify_detached === 'function' ? sodium : null
  } catch {
    return null
  }
}

const sodium = loadSodium()

/** Which implementation verifies in this process (the bench records it beside its figures). */
export const ed25519Backend: 'sodium' | 'node' = sodium ? 'sodium' : 'node'

/** Each key's 32 raw bytes, read once from its KeyObject (directory keys live for the directory's TTL). */
const rawKeys = new WeakMap<KeyObject, Buffer | null>()

function rawPublicKey(key: KeyObject): Buffer | null {
  let raw = rawKeys.get(key)
  if (raw === undefined) {
    // Only an Ed25519 public key: an X25519 key's JWK has an `x` too (node:crypto refuses to verify with it).
    const x =
      key.type === 'public' && key.asymmetricKeyType === 'ed25519'
        ? key.export({ format: 'jwk' }).x
        : undefined
    raw = typeof x === 'string' ? Buffer.from(x, 'base64url') : null
    if (raw !== null && raw.length !== 32) raw = null
    rawKeys.set(key, raw)
  }
  return raw
}

/** Whether `signature` is `key`'s Ed25519 signature of `data`; anything malformed is false. */
export function verifyEd25519(key: KeyObject, data: Buffer, signature: Uint8Array): boolean {
  if (sodium === null) return verifyWithNode(key, data, signature)
  const raw = rawPublicKey(key)
  if (raw === null) return verifyWithNode(key, data, signature)
  if (signature.length !== sodium.crypto_sign_BYTES) return false
  const sig = Buffer.from(signature.buffer, signature.byteOffset, signature.byteLength)
  return sodium.crypto_sign_verify_detached(sig, data, raw)
}

/** node:crypto's verification: the fallback, and the reference the tests hold libsodium's to. */
export function verifyWithNode(key: KeyObject, data: Buffer, signature: Uint8Array): boolean {
  try {
    return verify(null, data, key, signature)
  } catch {
    return false
  }
}
