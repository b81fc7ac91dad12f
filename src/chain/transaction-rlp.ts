// viem's serializeTransaction for the treasury's EIP-1559 transactions, written as RLP by hand: every
// transaction the signing account signs (./signing-account.ts) is serialized twice, to hash it and once
// signed, and a settlement batch's carries ~35 KB of calldata, which viem's generic RLP builds through many
// small hex strings (measured with the batch's calldata: bench/settle-encoding.ts). viem's function stays the
// reference and the fallback: test/chain/settle-batch-encoding.unit.test.ts holds these bytes to its, and
// every other transaction type, an access list or a field outside its shape goes to viem.
import {
  assertTransactionEIP1559,
  type Hex,
  type Signature,
  serializeTransaction,
  type TransactionSerializable,
} from 'viem'

const ADDRESS = /^0x[0-9a-fA-F]{40}$/
const WORD = /^0x[0-9a-fA-F]{64}$/
const BYTES = /^0x(?:[0-9a-fA-F]{2})*$/

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

/** viem's hex is lower-case; most of a transaction already is. */
function lowerCase(hex: string): string {
  return /[A-F]/.test(hex) ? hex.toLowerCase() : hex
}
