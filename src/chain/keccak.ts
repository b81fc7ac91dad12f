// keccak256 on the verification and settlement paths: the `keccak` package's native binding (libkeccak)
// when it loads, else viem's (@noble/hashes, JS). In the x402 CPU profile, noble's keccakP was the largest
// JS self time after the signature recovery: three hashes per authorization verified, and the hash of every
// signed settlement transaction.
import { createRequire } from 'node:module'
import { dirname } from 'node:path'
import { type Hex, keccak256 } from 'viem'

/**
 * The `keccak` package's native sponge (ethereumjs; it ships no types), used bare: the package's own
 * `createKeccakHash` wraps each hash in a new Transform stream, which cost more than the hash (per 224-byte
 * hash, one core: viem 17.5 µs, the package's wrapper 6.8 µs, the sponge alone 2.5 µs; the wrapper's streams
 * were 5 % of the facilitator's busy time in its V8 profile, with their garbage).
 */
interface KeccakSponge {
  initialize(rate: number, capacity: number): void
  absorb(data: Buffer): void
  /** Pads with keccak's 0x01 suffix on the first squeeze. */
  squeeze(length: number): Buffer
}

/**
 * One sponge for the process (each hash runs to its end synchronously), or null: not installed (an optional
 * dependency), or only the package's JS fallback would load, which is no faster than viem's.
 */
function loadNative(): KeccakSponge | null {
  try {
    // The package's own loader of its prebuilt binary, resolved from the package (its dependency, not ours).
    const manifest = createRequire(import.meta.url).resolve('keccak/package.json')
    const Sponge = createRequire(manifest)('node-gyp-build')(dirname(manifest)) as new () => KeccakSponge
    if (typeof Sponge !== 'function') return null
    return new Sponge()
  } catch {
    return null
  }
}

const native = loadNative()

/** keccak256's rate and capacity in bits. */
const RATE = 1088
const CAPACITY = 512

function nativeKeccak(sponge: KeccakSponge, data: Buffer): Buffer {
  sponge.initialize(RATE, CAPACITY)
  sponge.absorb(data)
  return sponge.squeeze(32)
}

/** Which keccak256 answers in this process (the bench records it beside its figures). */
export const keccakBackend: 'native' | 'viem' = native ? 'native' : 'viem'

/** keccak256 of bytes (a string is hashed as its UTF-8 bytes). */
export function keccakBytes(bytes: Uint8Array | string): Uint8Array {
  // A view on the same memory, no copy.
  const data =
    typeof bytes === 'string'
      ? Buffer.from(bytes)
      : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  return native ? nativeKeccak(native, data) : keccak256(data, 'bytes')
}

/** keccak256 of 0x-hex bytes, as 0x-hex (a transaction hash from its signed bytes). */
export function keccakHex(hex: Hex): Hex {
  if (!native) return keccak256(hex)
  return `0x${nativeKeccak(native, Buffer.from(hex.slice(2), 'hex')).toString('hex')}`
}
