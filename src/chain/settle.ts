// Settling x402 authorizations: transferWithAuthorization submitted by the treasury. Signed locally first so
// the hash can be recorded before anything is sent (a restart looks it up instead of sending blind).
import { encodeFunctionData, type Hash, type Hex, type PrivateKeyAccount, parseSignature } from 'viem'
import type { TransferAuthorization } from './authorization.ts'
import type { FeeQuote } from './payouts.ts'
import { signCall } from './sign-call.ts'
import { usdcAbi } from './usdc.ts'

/** Gas for one transferWithAuthorization (measured ~60k on the test USDC; Circle's is similar) with margin. */
export const SETTLEMENT_GAS = 150_000n

export interface StoredAuthorization {
  signature: Hex
  from: Hex
  to: Hex
  value: string
  validAfter: string
  validBefore: string
  nonce: Hex
}

/** An authorization and its signature in the form the claims table keeps (amounts as decimal strings). */
export function storedAuthorization(a: TransferAuthorization, signature: Hex): StoredAuthorization {
  return {
    signature,
    from: a.from,
    to: a.to,
    value: a.value.toString(),
    validAfter: a.validAfter.toString(),
    validBefore: a.validBefore.toString(),
    nonce: a.nonce,
  }
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
  return signCall(account, { ...p, to: p.usdc, data: settlementCalldata(p.authorization) })
}

/**
 * An EOA's 65-byte signature goes through the (v, r, s) overload, which every FiatTokenV2 has (v normalised to
 * 27/28); anything else is a smart wallet's (EIP-1271) and goes through the bytes overload (FiatTokenV2_2),
 * where the token asks the wallet.
 */
export function settlementCalldata(a: StoredAuthorization): Hex {
  const head = [a.from, a.to, BigInt(a.value), BigInt(a.validAfter), BigInt(a.validBefore), a.nonce] as const
  if (a.signature.length !== 132) {
    return encodeFunctionData({
      abi: usdcAbi,
      functionName: 'transferWithAuthorization',
      args: [...head, a.signature],
    })
  }
  const { r, s, yParity } = parseSignature(a.signature)
  return encodeFunctionData({
    abi: usdcAbi,
    functionName: 'transferWithAuthorization',
    args: [...head, 27 + yParity, r, s],
  })
}
