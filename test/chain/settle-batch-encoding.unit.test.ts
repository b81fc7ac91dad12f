// The settlement batch's calldata and transaction built by hand are viem's to the byte: random batches (long
// and short signatures, extreme amounts, mixed-case hex), signed by the native account and by viem's own;
// and what the hand encoding does not take goes to viem, errors included.
import { randomBytes } from 'node:crypto'
import {
  bytesToHex,
  getAddress,
  type Hex,
  parseTransaction,
  recoverTransactionAddress,
  serializeTransaction,
  type TransactionSerializable,
} from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { describe, expect, it } from 'vitest'
import type { StoredAuthorization } from '../../src/chain/settle.ts'
import { settleCalldata, settleCalldataByViem } from '../../src/chain/settle-batch-encoding.ts'
import { signingAccount } from '../../src/chain/signing-account.ts'
import { serializeEip1559Transaction } from '../../src/chain/transaction-rlp.ts'

const hex = (bytes: number): Hex => bytesToHex(randomBytes(bytes))
const UINT256_MAX = (1n << 256n) - 1n

function randomAuthorization(i: number): StoredAuthorization {
  const amounts = ['0', '1', '10000', String(UINT256_MAX), String(BigInt(hex(9)))]
  // 65-byte EOA signatures, and the longer or shorter ones a smart wallet hands back (EIP-1271).
  const signatureBytes = [65, 65, 0, 1, 31, 32, 33, 64, 97, 230][i % 10]!
  // Addresses as clients send them (checksummed) or lower-case; other hex in either case.
  const mixed = (h: Hex) => (i % 3 === 0 ? (`0x${h.slice(2).toUpperCase()}` as Hex) : h)
  const address = (h: Hex) => (i % 2 === 0 ? getAddress(h) : h)
  return {
    from: address(hex(20)),
    to: address(hex(20)),
    value: amounts[i % amounts.length]!,
    validAfter: amounts[(i + 1) % amounts.length]!,
    validBefore: amounts[(i + 2) % amounts.length]!,
    nonce: mixed(hex(32)),
    signature: mixed(hex(signatureBytes)),
  }
}

describe('settle() calldata', () => {
  it('is the bytes viem encodes, for batches of 0 to 120', () => {
    for (const n of [0, 1, 2, 7, 50, 100, 120]) {
      const batch = Array.from({ length: n }, (_, i) => randomAuthorization(i + n))
      const usdc = hex(20)
      expect(settleCalldata(usdc, batch)).toBe(settleCalldataByViem(usdc, batch).toLowerCase())
    }
  })

  it('leaves a malformed field to viem, which refuses it or encodes it as it does', () => {
    const good = randomAuthorization(1)
    for (const bad of [
      { ...good, value: '-1' },
      { ...good, value: String(UINT256_MAX + 1n) },
      { ...good, validBefore: '1e9' },
      { ...good, from: '0x1234' as Hex },
      { ...good, nonce: hex(31) },
    ]) {
      expect(() => settleCalldata(hex(20), [bad])).toThrow()
    }
    // An odd number of hex digits: viem encodes it its own way, and so it is encoded.
    const odd = { ...good, signature: '0xabc' as Hex }
    const usdc = hex(20)
    expect(settleCalldata(usdc, [odd])).toBe(settleCalldataByViem(usdc, [odd]))
  })
})

describe('the settlement transaction', () => {
  // 40 signatures and recoveries of pure JavaScript: well under a second alone, several on a loaded CI machine.
  it('serializes as viem does, unsigned and signed, and signs to the same bytes', async () => {
    for (let i = 0; i < 40; i++) {
      const key = hex(32)
      const tx = {
        type: 'eip1559' as const,
        chainId: [1, 8453, 84532, 31337][i % 4]!,
        to: hex(20),
        data: settleCalldata(
          hex(20),
          Array.from({ length: i % 5 === 0 ? 100 : i }, (_, j) => randomAuthorization(i + j)),
        ),
        nonce: [0, 1, 127, 128, 255, 256, 65_535, 2 ** 32][i % 8]!,
        gas: 250_000n + 120_000n * BigInt(i),
        maxFeePerGas: [0n, 1n, 127n, 128n, 10n ** 18n][i % 5]! + 40n,
        maxPriorityFeePerGas: BigInt(i),
        value: 0n,
      } satisfies TransactionSerializable
      expect(serializeEip1559Transaction(tx)).toBe(serializeTransaction(tx))
      const signature = { r: hex(32), s: hex(32), yParity: i % 2 }
      expect(serializeEip1559Transaction(tx, signature)).toBe(serializeTransaction(tx, signature))
      const ours = await signingAccount(key).signTransaction(tx, {
        serializer: serializeEip1559Transaction,
      })
      expect(ours).toBe(await privateKeyToAccount(key).signTransaction(tx))
      expect(await recoverTransactionAddress({ serializedTransaction: ours as never })).toBe(
        privateKeyToAccount(key).address,
      )
      expect(parseTransaction(ours).data).toBe(tx.data)
    }
  }, 30_000)

  it('signature words with leading zero bytes are trimmed as viem trims them', () => {
    const tx = { type: 'eip1559' as const, chainId: 8453, to: hex(20), data: '0x' as Hex, nonce: 0 }
    const r = `0x0000${hex(30).slice(2)}` as Hex
    const s = `0x00${hex(31).slice(2)}` as Hex
    expect(serializeEip1559Transaction(tx, { r, s, yParity: 1 })).toBe(
      serializeTransaction(tx, { r, s, yParity: 1 }),
    )
  })

  it('leaves every other transaction to viem', () => {
    const legacy = {
      type: 'legacy' as const,
      chainId: 8453,
      to: hex(20),
      nonce: 3,
      gas: 21_000n,
      gasPrice: 7n,
    }
    expect(serializeEip1559Transaction(legacy)).toBe(serializeTransaction(legacy))
    const listed = {
      type: 'eip1559' as const,
      chainId: 8453,
      to: hex(20),
      accessList: [{ address: hex(20), storageKeys: [hex(32)] }],
    }
    expect(serializeEip1559Transaction(listed)).toBe(serializeTransaction(listed))
    const creation = { type: 'eip1559' as const, chainId: 8453, data: hex(40) }
    expect(serializeEip1559Transaction(creation)).toBe(serializeTransaction(creation))
  })
})
