// EIP-3009 TransferWithAuthorization, as x402 "exact" payments use it: sign (payers, tests), verify
// locally without any RPC (the hot path), and settle on chain from the treasury (the batcher).
import { type Address, type Client, type Hash, type Hex, parseSignature, toHex } from 'viem'
import type { LocalAccount } from 'viem/accounts'
import { readContract, writeContract } from 'viem/actions'
import type { ChainWalletClient } from './client.ts'
import { authorizationDigest, domainSeparator, recoverSigner } from './recover-authorization.ts'
import { sameAddress } from './transfer.ts'
import { usdcAbi } from './usdc.ts'

export const transferWithAuthorizationTypes = {
  TransferWithAuthorization: [
    { name: 'from', type: 'address' },
    { name: 'to', type: 'address' },
    { name: 'value', type: 'uint256' },
    { name: 'validAfter', type: 'uint256' },
    { name: 'validBefore', type: 'uint256' },
    { name: 'nonce', type: 'bytes32' },
  ],
} as const

/** The token's EIP-712 domain fields (FiatTokenV2: name, version, chainId, verifyingContract). */
export interface TokenDomain {
  address: Address
  name: string
  version: string
}

export interface TransferAuthorization {
  from: Address
  to: Address
  value: bigint
  /** Unix seconds; valid strictly after this… */
  validAfter: bigint
  /** …and strictly before this. */
  validBefore: bigint
  nonce: Hex
}

export interface AuthorizationTarget {
  usdc: TokenDomain
  chainId: number
}

export type AuthorizationFailure =
  | 'invalid_signature'
  | 'wrong_recipient'
  | 'underpaid'
  | 'authorization_not_yet_valid'
  | 'authorization_expired'

export type AuthorizationCheck = { ok: true; payer: Address } | { ok: false; reason: AuthorizationFailure }

// Half the secp256k1 order: USDC refuses the high-s twin of a signature, so it must not pass here either.
const HALF_N = 0x7fffffffffffffffffffffffffffffff5d576e7357a4501ddfe92f46681b20a0n

export function authorizationTypedData(
  { usdc, chainId }: AuthorizationTarget,
  message: TransferAuthorization,
) {
  return {
    domain: { name: usdc.name, version: usdc.version, chainId, verifyingContract: usdc.address },
    types: transferWithAuthorizationTypes,
    primaryType: 'TransferWithAuthorization',
    message,
  } as const
}

/** 32 random bytes: EIP-3009 nonces are not sequential, any unused value works. */
export function createAuthorizationNonce(): Hex {
  return toHex(crypto.getRandomValues(new Uint8Array(32)))
}

export async function signTransferAuthorization(
  account: LocalAccount,
  params: AuthorizationTarget & Omit<TransferAuthorization, 'from'> & { from?: Address },
): Promise<{ authorization: TransferAuthorization; signature: Hex }> {
  const { usdc, chainId, from = account.address, to, value, validAfter, validBefore, nonce } = params
  const authorization = { from, to, value, validAfter, validBefore, nonce }
  const signature = await account.signTypedData(authorizationTypedData({ usdc, chainId }, authorization))
  return { authorization, signature }
}

/**
 * Pure crypto and arithmetic: checks the fields against what is owed, then recovers the signer. What only the
 * chain knows (nonce unused, balance) is the caller's next step. The fields come first so that
 * `invalid_signature` means "everything else is right, but ecrecover does not give `from`": the one case a
 * smart-wallet payer (EIP-1271 / ERC-6492, src/chain/verify-smart-wallet.ts) may still be valid.
 */
export async function verifyTransferAuthorization(
  params: AuthorizationTarget & {
    authorization: TransferAuthorization
    signature: Hex
    payTo: Address
    minValue: bigint
    nowSeconds?: bigint
    /** Time settlement needs before validBefore; default 6 s, as the x402 reference facilitator. */
    minValidSeconds?: bigint
  },
): Promise<AuthorizationCheck> {
  const { authorization, signature } = params
  const now = params.nowSeconds ?? BigInt(Math.floor(Date.now() / 1000))
  if (!sameAddress(authorization.to, params.payTo)) return { ok: false, reason: 'wrong_recipient' }
  if (authorization.value < params.minValue) return { ok: false, reason: 'underpaid' }
  if (authorization.validAfter >= now) return { ok: false, reason: 'authorization_not_yet_valid' }
  if (authorization.validBefore < now + (params.minValidSeconds ?? 6n)) {
    return { ok: false, reason: 'authorization_expired' }
  }
  let signer: Address | null
  try {
    if (signature.length !== 132 || BigInt(`0x${signature.slice(66, 130)}`) > HALF_N) {
      return { ok: false, reason: 'invalid_signature' }
    }
    const separator = domainSeparator({
      name: params.usdc.name,
      version: params.usdc.version,
      chainId: params.chainId,
      verifyingContract: params.usdc.address,
    })
    signer = await recoverSigner(authorizationDigest(separator, authorization), signature)
  } catch {
    return { ok: false, reason: 'invalid_signature' }
  }
  if (!signer || !sameAddress(signer, authorization.from)) return { ok: false, reason: 'invalid_signature' }
  return { ok: true, payer: authorization.from }
}

export async function readAuthorizationState(
  client: Client,
  { usdc, authorizer, nonce }: { usdc: Address; authorizer: Address; nonce: Hex },
): Promise<boolean> {
  return readContract(client, {
    address: usdc,
    abi: usdcAbi,
    functionName: 'authorizationState',
    args: [authorizer, nonce],
  })
}

/**
 * Submits the authorization from the treasury. Uses the (v, r, s) overload, which every FiatTokenV2 has,
 * and normalises v to 27/28 because some wallets sign with a 0/1 recovery id that ecrecover refuses.
 */
export async function settleTransferAuthorization(
  walletClient: ChainWalletClient,
  params: {
    usdc: Address
    authorization: TransferAuthorization
    signature: Hex
    nonce?: number
    gas?: bigint
  },
): Promise<Hash> {
  const { authorization: a, signature } = params
  const { r, s, yParity } = parseSignature(signature)
  return writeContract(walletClient, {
    address: params.usdc,
    abi: usdcAbi,
    functionName: 'transferWithAuthorization',
    args: [a.from, a.to, a.value, a.validAfter, a.validBefore, a.nonce, 27 + yParity, r, s],
    nonce: params.nonce,
    gas: params.gas,
  })
}

/**
 * The claim key of an EIP-3009 authorization on this chain's token: the same wherever it pays (a metered
 * call, the facilitator, an MPP charge, a checkout), so it pays once; also what a transfer the token logged
 * it used is matched to (src/checkout/attribution.ts).
 */
export function authorizationProofKey(q: {
  chainId: number
  token: string
  payer: string
  nonce: string
}): string {
  return `auth:${q.chainId}:${q.token.toLowerCase()}:${q.payer.toLowerCase()}:${q.nonce.toLowerCase()}`
}
