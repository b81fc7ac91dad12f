// The AuthorizationBatcher's settle(token, items) calldata and the EIP-1559 transaction that carries it,
// written by hand from their fixed shapes (the RLP serves every EIP-1559 transaction the treasury's signing
// account signs: ./signing-account.ts). In the x402 CPU profile (6,000 authorizations, the busiest 8 s of
// the warm instance) viem's generic encodeFunctionData and its serializeTransaction, run twice per signed
// batch (before and after the signature), took ~4 % of the instance's busy time: they walk the ABI and build
// the ~35 KB of a batch of 100 through many small hex strings. Measured by `npx tsx bench/settle-encoding.ts`
// (CPU per signed batch, viem's path against this one). viem's functions stay the reference and the fallback:
// test/chain/settle-batch-encoding.unit.test.ts holds these bytes to theirs, and anything outside the shapes
// below (a malformed field, another transaction type) goes to viem, which also throws its own errors. One
// difference: an address is encoded by its bytes whatever the case of its hex, where viem refuses a mixed
// case that is not a valid checksum; the authorization was verified against those bytes (its signer).
import {
  type Address,
  assertTransactionEIP1559,
  encodeFunctionData,
  type Hex,
  type Signature,
  serializeTransaction,
  type TransactionSerializable,
} from 'viem'
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
    const signature = a.signature.slice(2)
    const padded = signature + ZEROS.slice(0, (64 - (signature.length % 64)) % 64)
    offsets[i] = word(offset)
    items[i] =
      address(a.from.toLowerCase()) +
      address(a.to.toLowerCase()) +
      value +
      validAfter +
      validBefore +
      a.nonce.slice(2) +
      word(7 * 32) +
      word(signature.length / 2) +
      padded
    offset += items[i]!.length / 2
  }
  const head = `0x${SETTLE_SELECTOR}${address(usdc.toLowerCase())}${word(64)}${word(n)}`
  return lowerCase(`${head}${offsets.join('')}${items.join('')}`) as Hex
}

/** viem's hex is lower-case; most of a batch already is (only checksummed addresses are not). */
function lowerCase(hex: string): string {
  return /[A-F]/.test(hex) ? hex.toLowerCase() : hex
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

/**
 * viem's serializeTransaction for an EIP-1559 transaction without an access list, written as RLP by hand
 * (0x02 ‖ rlp([chainId, nonce, maxPriorityFeePerGas, maxFeePerGas, gas, to, value, data, [],
 * yParity, r, s])); every other transaction, and any field outside its shape, goes to viem's.
 */
export function serializeEip1559Transaction(tx: TransactionSerializable, signature?: Signature): Hex {
  return serializeByHand(tx, signature) ?? serializeTransaction(tx, signature)
}

function serializeByHand(tx: TransactionSerializable, signature?: Signature): Hex | null {
  if (tx.type !== 'eip1559' || (tx.accessList !== undefined && tx.accessList.length > 0)) return null
  if (tx.to == null || !ADDRESS.test(tx.to)) return null
  // viem's own checks of the fields (chain id, fee cap and tip, the address's checksum): the same refusals.
  assertTransactionEIP1559(tx)
  const data = tx.data ?? '0x'
  if (!BYTES.test(data)) return null
  const fields = [
    rlpInteger(BigInt(tx.chainId)),
    rlpInteger(BigInt(tx.nonce ?? 0)),
    rlpInteger(tx.maxPriorityFeePerGas ?? 0n),
    rlpInteger(tx.maxFeePerGas ?? 0n),
    rlpInteger(tx.gas ?? 0n),
    rlpString(tx.to.slice(2)),
    rlpInteger(tx.value ?? 0n),
    rlpString(data.slice(2)),
    'c0',
  ]
  if (signature !== undefined) {
    const yParity = signature.yParity ?? (signature.v === 28n ? 1 : signature.v === 27n ? 0 : null)
    if (yParity !== 0 && yParity !== 1) return null
    if (!WORD.test(signature.r) || !WORD.test(signature.s)) return null
    fields.push(yParity === 1 ? '01' : '80', rlpInteger(BigInt(signature.r)), rlpInteger(BigInt(signature.s)))
  }
  const payload = fields.join('')
  return lowerCase(`0x02${rlpLength(payload.length / 2, 0xc0)}${payload}`) as Hex
}

/** A non-negative integer as RLP: its big-endian bytes without leading zeros (zero is the empty string). */
function rlpInteger(v: bigint): string {
  if (v < 0n) throw new RangeError('a transaction field is negative')
  if (v === 0n) return '80'
  const hex = v.toString(16)
  return rlpString(hex.length % 2 === 1 ? `0${hex}` : hex)
}

/** Bytes (as hex, no 0x) as an RLP string. */
function rlpString(hex: string): string {
  const length = hex.length / 2
  if (length === 1 && Number.parseInt(hex, 16) < 0x80) return hex
  return rlpLength(length, 0x80) + hex
}

/** The RLP prefix of a string (0x80) or list (0xc0) of `length` bytes. */
function rlpLength(length: number, base: 0x80 | 0xc0): string {
  if (length <= 55) return (base + length).toString(16)
  let hex = length.toString(16)
  if (hex.length % 2 === 1) hex = `0${hex}`
  return (base + 55 + hex.length / 2).toString(16) + hex
}
