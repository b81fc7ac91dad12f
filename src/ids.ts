// Opaque prefixed random identifiers and API keys.
import { createHash, randomBytes } from 'node:crypto'

export type IdPrefix =
  | 'acct'
  | 'key'
  | 'ep'
  | 'pay'
  | 'call'
  | 'evt'
  | 'wh'
  | 'whd'
  | 'po'
  | 'req'
  | 'clm'
  | 're'
  | 'rcpt'
  | 'pass'
  | 'fst'

const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'

/** base62 of `bytes` random bytes; 16 bytes → 128 bits, ~22 characters. */
function randomBase62(bytes: number): string {
  const buf = randomBytes(bytes)
  let n = BigInt(`0x${buf.toString('hex')}`)
  let out = ''
  while (n > 0n) {
    out = ALPHABET[Number(n % 62n)] + out
    n /= 62n
  }
  // Fixed width keeps ids sortable-by-length-free and uniform.
  const width = Math.ceil((bytes * 8) / Math.log2(62))
  return out.padStart(width, '0')
}

// Ids are made on the hot path (one per captured call): draw from a pool of random bytes refilled 4 KB
// at a time, and map bytes to base62 by rejection (bytes ≥ 248 are skipped, so every character is uniform).
const POOL_SIZE = 4096
let pool = randomBytes(POOL_SIZE)
let poolOffset = 0
const ID_CHARS = 18 // ≈ 107 bits

export function newId(prefix: IdPrefix): string {
  let out = `${prefix}_`
  let n = 0
  while (n < ID_CHARS) {
    if (poolOffset === POOL_SIZE) {
      pool = randomBytes(POOL_SIZE)
      poolOffset = 0
    }
    const byte = pool[poolOffset++]!
    if (byte >= 248) continue
    out += ALPHABET[byte % 62]
    n++
  }
  return out
}

export type KeyMode = 'live' | 'test'

/** An API key: sk_live_/sk_test_ + 192 bits of randomness. Returned once; only its hash is stored. */
export function newApiKey(mode: KeyMode): string {
  return `sk_${mode}_${randomBase62(24)}`
}

/**
 * API keys carry ≥128 bits of entropy, so a single SHA-256 is the right hash: no salt or slow KDF is
 * needed (nothing to brute-force) and lookups stay one indexed query.
 */
export function hashApiKey(key: string): Buffer {
  return createHash('sha256').update(key).digest()
}

export const API_KEY_FORMAT = /^sk_(live|test)_[0-9A-Za-z]{20,64}$/

/** The part of a key that is safe to show again (e.g. in a list of keys). */
export function apiKeyHint(key: string): string {
  return `${key.slice(0, 8)}…${key.slice(-4)}`
}
