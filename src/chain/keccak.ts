// keccak256 on the verification and settlement paths: the `keccak` package's native binding (libkeccak)
// when it loads, else viem's (@noble/hashes, JS). In the x402 CPU profile, noble's keccakP was the largest
// JS self time after the signature recovery: three hashes per authorization verified, and the hash of every
// signed settlement transaction.
import { createRequire } from 'node:module'
import { type Hex, keccak256 } from 'viem'

/** The one call used from the `keccak` package (ethereumjs; it ships no types). Buffers only. */
type KeccakFactory = (algorithm: 'keccak256') => { update(data: Buffer): { digest(): Buffer } }

/**
 * The native binding, or null: not installed (an optional dependency), or only the package's JS fallback
 * would load, which is no faster than viem's.
 */
function loadNative(): KeccakFactory | null {
  try {
    return createRequire(import.meta.url)('keccak/bindings') as KeccakFactory
  } catch {
    return null
  }
}

const native = loadNative()

/** Which keccak256 answers in this process (the bench records it beside its figures). */
export const keccakBackend: 'native' | 'viem' = native ? 'native' : 'viem'

/** keccak256 of bytes (a string is hashed as its UTF-8 bytes). */
export function keccakBytes(bytes: Uint8Array | string): Uint8Array {
  // A view on the same memory, no copy.
  const data =
    typeof bytes === 'string'
      ? Buffer.from(bytes)
      : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  return native ? native('keccak256').update(data).digest() : keccak256(data, 'bytes')
}

/** keccak256 of 0x-hex bytes, as 0x-hex (a transaction hash from its signed bytes). */
export function keccakHex(hex: Hex): Hex {
  if (!native) return keccak256(hex)
  return `0x${native('keccak256')
    .update(Buffer.from(hex.slice(2), 'hex'))
    .digest()
    .toString('hex')}`
}
