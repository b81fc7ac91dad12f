// The treasury's signing account: viem's local account, with signTransaction done by libsecp256k1 when its
// native binary loads. The treasury signs one transaction per settled x402 authorization and per payout; in
// the x402 CPU profile viem's signing (@noble/curves: mod, invert, mul) was ~6 % of the main thread under
// load, which also serves the paid calls. Both paths use RFC 6979 deterministic nonces and low-s, so they
// sign the same bytes (test/chain/signing-account.unit.test.ts checks it against viem).
import { bytesToHex, type Hex, hexToBytes, type SerializeTransactionFn } from 'viem'
import { type PrivateKeyAccount, privateKeyToAccount } from 'viem/accounts'
import { keccakBytes } from './keccak.ts'
import { secp256k1 } from './secp256k1.ts'
import { serializeEip1559Transaction } from './transaction-rlp.ts'

/** Which signer answers in this process. The package's own JS fallback (elliptic) is slower than viem's. */
export const signingBackend: 'native' | 'viem' = secp256k1?.backend === 'native' ? 'native' : 'viem'

export function signingAccount(privateKey: Hex): PrivateKeyAccount {
  const account = privateKeyToAccount(privateKey)
  const lib = signingBackend === 'native' ? secp256k1!.lib : null
  if (!lib) return account
  const key = hexToBytes(privateKey)
  return {
    ...account,
    async signTransaction(transaction, options) {
      // Blob transactions sign their body without the sidecars: viem knows how, and the treasury sends none.
      if (transaction.type === 'eip4844') return account.signTransaction(transaction, options)
      // By default the hand-written EIP-1559 RLP (viem's for every other type): the same bytes, less CPU.
      const serializer = (options?.serializer ?? serializeEip1559Transaction) as SerializeTransactionFn
      // Buffer's native hex decoding: viem's hexToBytes took ~0.8 ms for a settlement batch's ~36 KB.
      const unsigned = await serializer(transaction)
      const digest = keccakBytes(Buffer.from(unsigned.slice(2), 'hex'))
      const { signature, recid } = lib.ecdsaSign(digest, key)
      return (await serializer(transaction, {
        r: bytesToHex(signature.subarray(0, 32)),
        s: bytesToHex(signature.subarray(32, 64)),
        // v as viem's sign gives it: legacy transactions derive their v (EIP-155) from it.
        v: recid ? 28n : 27n,
        yParity: recid,
      })) as Awaited<ReturnType<PrivateKeyAccount['signTransaction']>>
    },
  }
}
