// The treasury's transactions signed by libsecp256k1 are the very bytes viem signs (RFC 6979 nonces, low s):
// payouts and settlements, legacy and EIP-1559, random keys and fields; and the account still signs messages
// and typed data through viem.
import { randomBytes } from 'node:crypto'
import { bytesToHex, type Hex, parseTransaction, recoverTransactionAddress } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { describe, expect, it } from 'vitest'
import { signingAccount, signingBackend } from '../../src/chain/signing-account.ts'

function randomKey(): Hex {
  return bytesToHex(randomBytes(32))
}
function randomAddress(): Hex {
  return bytesToHex(randomBytes(20))
}

describe('signingAccount', () => {
  it('uses the native signer on this machine', () => {
    // The bench and CI machines have the prebuilt binary; the fallback is tested by viem itself.
    expect(signingBackend).toBe('native')
  })

  it('signs EIP-1559 transactions to the byte exactly as viem does', async () => {
    for (let i = 0; i < 50; i++) {
      const key = randomKey()
      const tx = {
        type: 'eip1559' as const,
        chainId: 1 + (i % 3) * 84_531,
        to: randomAddress(),
        data: bytesToHex(randomBytes(4 + 32 * (i % 9))),
        nonce: i * 7919,
        gas: 50_000n + BigInt(i),
        maxFeePerGas: 1_000_000_000n * BigInt(i + 1),
        maxPriorityFeePerGas: BigInt(i),
        value: 0n,
      }
      const ours = await signingAccount(key).signTransaction(tx)
      expect(ours).toBe(await privateKeyToAccount(key).signTransaction(tx))
      expect(await recoverTransactionAddress({ serializedTransaction: ours as never })).toBe(
        privateKeyToAccount(key).address,
      )
    }
  })

  it('signs legacy transactions as viem does', async () => {
    const key = randomKey()
    const tx = {
      type: 'legacy' as const,
      chainId: 8453,
      to: randomAddress(),
      nonce: 3,
      gas: 21_000n,
      gasPrice: 7n,
    }
    const ours = await signingAccount(key).signTransaction(tx)
    expect(ours).toBe(await privateKeyToAccount(key).signTransaction(tx))
    expect(parseTransaction(ours).nonce).toBe(3)
  })

  it('keeps viem for everything else', async () => {
    const key = randomKey()
    const ours = signingAccount(key)
    const viem = privateKeyToAccount(key)
    expect(ours.address).toBe(viem.address)
    expect(await ours.signMessage({ message: 'tollgate' })).toBe(
      await viem.signMessage({ message: 'tollgate' }),
    )
  })
})
