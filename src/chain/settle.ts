// Settling x402 authorizations: transferWithAuthorization submitted by the treasury. Signed locally first so
// the hash can be recorded before anything is sent (a restart looks it up instead of sending blind).
import {
  encodeFunctionData,
  type Hash,
  type Hex,
  keccak256,
  type PrivateKeyAccount,
  parseSignature,
} from 'viem'
import type { FeeQuote } from './payouts.ts'
import { usdcAbi } from './usdc.ts'

export interface StoredAuthorization {
  signature: Hex
  from: Hex
  to: Hex
  value: string
  validAfter: string
  validBefore: string
  nonce: Hex
}

export async function signSettlement(
  account: PrivateKeyAccount,
  p: {
    chainId: number
    usdc: Hex
    authorization: StoredAuthorization
    nonce: number
    gas: bigint
    fees: FeeQuote
  },
): Promise<{ rawTx: Hex; hash: Hash }> {
  const a = p.authorization
  const { r, s, yParity } = parseSignature(a.signature)
  const rawTx = await account.signTransaction({
    type: 'eip1559',
    chainId: p.chainId,
    to: p.usdc,
    // The (v, r, s) overload exists on every FiatTokenV2; v normalised to 27/28.
    data: encodeFunctionData({
      abi: usdcAbi,
      functionName: 'transferWithAuthorization',
      args: [
        a.from,
        a.to,
        BigInt(a.value),
        BigInt(a.validAfter),
        BigInt(a.validBefore),
        a.nonce,
        27 + yParity,
        r,
        s,
      ],
    }),
    nonce: p.nonce,
    gas: p.gas,
    maxFeePerGas: p.fees.maxFeePerGas,
    maxPriorityFeePerGas: p.fees.maxPriorityFeePerGas,
    value: 0n,
  })
  return { rawTx, hash: keccak256(rawTx) }
}
