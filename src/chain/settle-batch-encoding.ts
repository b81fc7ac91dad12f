// The AuthorizationBatcher's settle(token, items) calldata, written by hand from its fixed shape (the
// transaction that carries it is serialized by ./transaction-rlp.ts). In the x402 CPU profile (6,000
// authorizations, the busiest 8 s of the warm instance) viem's generic encodeFunctionData and its
// serializeTransaction, run twice per signed batch (before and after the signature), took ~4 % of the
// instance's busy time: they walk the ABI and build the ~35 KB of a batch of 100 through many small hex
// strings. Measured by `npx tsx bench/settle-encoding.ts` (CPU per signed batch, viem's path against the hand
// one). viem's encoding stays the reference and the fallback: test/chain/settle-batch-encoding.unit.test.ts
// holds these bytes to its, and a field outside its type's shape goes to viem, which throws its own errors.
// One difference: an address is encoded by its bytes whatever the case of its hex, where viem refuses a
// mixed case that is not a valid checksum; the authorization was verified against those bytes (its signer).
import { type Address, encodeFunctionData, type Hex } from 'viem'
import { authorizationBatcherArtifact } from './contracts/artifacts.ts'
import type { StoredAuthorization } from './settle.ts'

/** settle(address,(address,address,uint256,uint256,uint256,bytes32,bytes)[]), its first four bytes. */
const SETTLE_SELECTOR = encodeFunctionData({
  abi: authorizationBatcherArtifact.abi,
  functionName: 'settle',
  args: ['0x0000000000000000000000000000000000000000', []],
}).slice(2, 10)

const ADDRESS = /^0x[0-9a-fA-F]{40}$/
const WORD = /^0x[0-9a-fA-F]{64}$/
const BYTES = /^0x(?:[0-9a-fA-F]{2})*$/
const DECIMAL = /^(?:0|[1-9][0-9]{0,77})$/
const UINT256_MAX = (1n << 256n) - 1n
const ZEROS = '0'.repeat(64)

/** The calldata of settle(usdc, authorizations), as viem's encodeFunctionData gives it. */
export function settleCalldata(usdc: Address, authorizations: readonly StoredAuthorization[]): Hex {
  return settleCalldataByHand(usdc, authorizations) ?? settleCalldataByViem(usdc, authorizations)
}

/** viem's encoding: the reference, and the fallback for what the hand encoding does not take. */
export function settleCalldataByViem(usdc: Address, authorizations: readonly StoredAuthorization[]): Hex {
  return encodeFunctionData({
    abi: authorizationBatcherArtifact.abi,
    functionName: 'settle',
    args: [
      usdc,
      authorizations.map((a) => ({
        from: a.from,
        to: a.to,
        value: BigInt(a.value),
        validAfter: BigInt(a.validAfter),
        validBefore: BigInt(a.validBefore),
        nonce: a.nonce,
        signature: a.signature,
      })),
    ],
  })
}

/**
 * ABI encoding of (address, T[]) with T a dynamic tuple (six static words, then bytes): the address, the
 * array's offset (0x40), its length, one offset per item from the start of the items, then each item: its
 * six words, its signature's offset within the item (0xe0), the signature's length and its bytes padded
 * to whole words. null when a field is not of its type's shape.
 */
function settleCalldataByHand(usdc: Address, authorizations: readonly StoredAuthorization[]): Hex | null {
  if (!ADDRESS.test(usdc)) return null
  const n = authorizations.length
  const offsets: string[] = new Array(n)
  const items: string[] = new Array(n)
  let offset = 32 * n
  for (let i = 0; i < n; i++) {
    const a = authorizations[i]!
    const value = uint256(a.value)
    const validAfter = uint256(a.validAfter)
    const validBefore = uint256(a.validBefore)
    if (value === null || validAfter === null || validBefore === null) return null
    if (!ADDRESS.test(a.from) || !ADDRESS.test(a.to) || !WORD.test(a.nonce) || !BYTES.test(a.signature))
      return null
    const signature = a.signature.slice(2).toLowerCase()
    const padded = signature + ZEROS.slice(0, (64 - (signature.length % 64)) % 64)
    offsets[i] = word(offset)
    items[i] =
      address(a.from.toLowerCase()) +
      address(a.to.toLowerCase()) +
      value +
      validAfter +
      validBefore +
      a.nonce.slice(2).toLowerCase() +
      word(7 * 32) +
      word(signature.length / 2) +
      padded
    offset += items[i]!.length / 2
  }
  const head = `0x${SETTLE_SELECTOR}${address(usdc.toLowerCase())}${word(64)}${word(n)}`
  return `${head}${offsets.join('')}${items.join('')}` as Hex
}

function address(a: string): string {
  return `000000000000000000000000${a.slice(2)}`
}

function word(n: number): string {
  return n.toString(16).padStart(64, '0')
}

/** A decimal amount as a 32-byte word, or null when it is not a uint256. */
function uint256(decimal: string): string | null {
  if (!DECIMAL.test(decimal)) return null
  const v = BigInt(decimal)
  return v > UINT256_MAX ? null : v.toString(16).padStart(64, '0')
}
