// What /api/v1/facilitator/verify and /settle check of an x402 `exact` payload a merchant's middleware sent:
// the terms (scheme, network, asset, amount, payTo: the treasury or the account's own wallet), the
// authorization against them (recipient, exact value, window, signature: src/chain/authorization.ts, the
// check every metered authorization passes), then the chain (nonce unused, balance). Failures are values
// with the x402 specification's reason names (§9) where it names one.

import * as v from 'valibot'
import { type Address, getAddress, type Hex } from 'viem'
import {
  authorizationProofKey,
  type TransferAuthorization,
  verifyTransferAuthorization,
} from '../chain/authorization.ts'
import type { AuthorizationChainCheck, AuthorizationChainChecker } from '../chain/check-authorization.ts'
import type { ChainInfo } from '../chain/info.ts'
import { type StoredAuthorization, storedAuthorization } from '../chain/settle.ts'
import { sameAddress } from '../chain/transfer.ts'
import type { SponsoredApproval, StoredUptoPermit, UptoPermit } from '../chain/upto-permit.ts'
import type {
  SmartWalletCheck,
  SmartWalletVerifier,
  WalletDigestVerifier,
} from '../chain/verify-smart-wallet.ts'
import { PAYMENT_IDENTIFIER } from '../wire/challenge.ts'

const Uint = v.pipe(v.string(), v.regex(/^\d{1,78}$/))
const HexAddress = v.pipe(v.string(), v.regex(/^0x[0-9a-fA-F]{40}$/))
const ExactPayload = v.looseObject({
  signature: v.pipe(v.string(), v.regex(/^0x[0-9a-fA-F]+$/)),
  authorization: v.looseObject({
    from: HexAddress,
    to: HexAddress,
    value: Uint,
    validAfter: Uint,
    validBefore: Uint,
    nonce: v.pipe(v.string(), v.regex(/^0x[0-9a-fA-F]{64}$/)),
  }),
})

/** The terms a payload is checked against, as either version states them. */
export interface Terms {
  x402Version: 1 | 2
  scheme: string
  network: string
  amount: string
  asset: string
  payTo: string
  /** The token's EIP-712 domain the client signs with, when the requirements name it. */
  extra?: Record<string, unknown> | null
  /** v2: the terms the payload says it accepted (they must be these). */
  accepted?: { scheme: string; network: string; amount: string; asset: string; payTo: string }
  /** The payload's scheme and network (v1 states them on the payload). */
  payloadScheme: string
  payloadNetwork: string
  payload: unknown
  extensions?: Record<string, unknown>
}

export type Checked =
  | ({
      ok: true
      proofKey: string
      payer: Address
      valueAtomic: bigint
      custody: 'treasury' | 'merchant'
      payTo: Address
      network: string
      paymentIdentifier: string | null
    } & (
      | { kind: 'eip3009'; authorization: StoredAuthorization; nonce: Hex }
      /** upto: settled for valueAtomic, at most the permit's signed maximum. */
      | {
          kind: 'upto'
          authorization: StoredUptoPermit
          permit: UptoPermit
          /** Its eip2612GasSponsoring approval of Permit2, verified locally; null: none. */
          approval: SponsoredApproval | null
        }
    ))
  | { ok: false; reason: string; message: string; payer?: Address }

export interface CheckContext {
  chain: ChainInfo
  /** The account's registered wallet: a payTo the merchant keeps custody of. */
  accountWallet: string
  nowSeconds: bigint
  /** A smart-wallet payer's check (ERC-1271, ERC-6492 of a deployed wallet); absent: EOA payers only. */
  verifySmartWallet?: SmartWalletVerifier
  /** The same for an upto permit's Permit2 digest. */
  verifyWalletDigest?: WalletDigestVerifier
}

const ID_PATTERN = /^[A-Za-z0-9_-]{16,128}$/

/** What the terms' common part settles to: where the money goes and on which network. */
export type CommonTerms =
  | { ok: true; custody: 'treasury' | 'merchant'; network: string }
  | { ok: false; reason: string; message: string }

/**
 * The checks every scheme's terms pass: scheme, network, asset, the token's domain, v2 `accepted` equal to
 * the requirements (its amount compared by the scheme: `upto` settles for less than it accepted), payTo.
 */
export function checkCommonTerms(t: Terms, c: CheckContext, scheme: 'exact' | 'upto'): CommonTerms {
  const fail = (reason: string, message: string): CommonTerms => ({ ok: false, reason, message })
  if (t.scheme !== scheme || t.payloadScheme !== scheme)
    return fail('unsupported_scheme', `this facilitator settles exact and upto, not ${t.payloadScheme}`)
  const network = t.x402Version === 1 ? c.chain.x402Network : c.chain.caip2
  if (t.network !== network || t.payloadNetwork !== network)
    return fail('invalid_network', `this facilitator settles on ${network}`)
  if (!sameAddress(t.asset as Address, c.chain.usdcAddress))
    return fail('invalid_payment_requirements', `asset must be USDC at ${c.chain.usdcAddress}`)
  // The client signs with the domain the requirements name: another name (Base Sepolia's "USDC" for a token
  // that says "USD Coin") would only show as a bad signature.
  const name = t.extra?.name
  const version = t.extra?.version
  if (
    (name !== undefined && name !== c.chain.usdcName) ||
    (version !== undefined && version !== c.chain.usdcVersion)
  )
    return fail(
      'invalid_payment_requirements',
      `extra must name the token's EIP-712 domain: name "${c.chain.usdcName}", version "${c.chain.usdcVersion}"`,
    )
  if (t.accepted) {
    const a = t.accepted
    if (
      a.scheme !== t.scheme ||
      a.network !== t.network ||
      (scheme === 'exact' && a.amount !== t.amount) ||
      !sameAddress(a.asset as Address, t.asset as Address) ||
      !sameAddress(a.payTo as Address, t.payTo as Address)
    )
      return fail('invalid_payment_requirements', 'the payload accepted other terms than the requirements')
  }
  const custody = sameAddress(t.payTo as Address, c.chain.treasury)
    ? 'treasury'
    : sameAddress(t.payTo as Address, c.accountWallet as Address)
      ? 'merchant'
      : null
  if (custody === null)
    return fail(
      'pay_to_not_allowed',
      `payTo ${t.payTo} is neither the treasury (${c.chain.treasury}) nor this account's wallet (${c.accountWallet})`,
    )
  return { ok: true, custody, network }
}

/** The local checks of an `exact` payload: no RPC. `ok` carries what the chain must confirm and the claim records. */
export async function checkTerms(t: Terms, c: CheckContext): Promise<Checked> {
  const fail = (reason: string, message: string, payer?: Address): Checked => ({
    ok: false,
    reason,
    message,
    payer,
  })
  const common = checkCommonTerms(t, c, 'exact')
  if (!common.ok) return common
  const { custody, network } = common
  const parsed = v.safeParse(ExactPayload, t.payload)
  if (!parsed.success)
    return fail('invalid_payload', 'payload must hold an EIP-3009 signature and authorization')
  const p = parsed.output
  const authorization: TransferAuthorization = {
    from: getAddress(p.authorization.from),
    to: getAddress(p.authorization.to),
    value: BigInt(p.authorization.value),
    validAfter: BigInt(p.authorization.validAfter),
    validBefore: BigInt(p.authorization.validBefore),
    nonce: p.authorization.nonce.toLowerCase() as Hex,
  }
  const payer = authorization.from
  const amount = BigInt(t.amount)
  // `exact` means exact: neither less nor more than the requirement's amount.
  if (authorization.value !== amount)
    return fail('invalid_exact_evm_payload_authorization_value', `value must be exactly ${amount}`, payer)
  let signature = p.signature as Hex
  const local = await verifyTransferAuthorization({
    usdc: { address: c.chain.usdcAddress, name: c.chain.usdcName, version: c.chain.usdcVersion },
    chainId: c.chain.chainId,
    authorization,
    signature,
    payTo: t.payTo as Address,
    minValue: amount,
    nowSeconds: c.nowSeconds,
  })
  if (!local.ok && local.reason === 'invalid_signature' && c.verifySmartWallet) {
    // Not the key of `from`: maybe `from` is a contract wallet, asked (an eth_call) only now, so EOA payers
    // never pay for the RPC. Settlement hands the wallet the inner signature of an ERC-6492 wrapper.
    const wallet = await c.verifySmartWallet({ authorization, signature })
    if (!wallet.ok) return fail(...SMART_WALLET_REASONS[wallet.reason], payer)
    signature = wallet.signature
  } else if (!local.ok) return fail(LOCAL_REASONS[local.reason], local.reason.replaceAll('_', ' '), payer)
  return {
    ok: true,
    // The key every verifier gives this authorization (src/schemes/verifier.ts): one claim, wherever it pays.
    proofKey: authorizationProofKey({
      chainId: c.chain.chainId,
      token: c.chain.usdcAddress,
      payer,
      nonce: authorization.nonce,
    }),
    payer,
    valueAtomic: authorization.value,
    custody,
    payTo: getAddress(t.payTo),
    network,
    kind: 'eip3009',
    authorization: storedAuthorization(authorization, signature),
    nonce: authorization.nonce,
    paymentIdentifier: paymentIdentifier(t.extensions),
  }
}

const LOCAL_REASONS = {
  wrong_recipient: 'invalid_exact_evm_payload_recipient_mismatch',
  underpaid: 'invalid_exact_evm_payload_authorization_value',
  authorization_not_yet_valid: 'invalid_exact_evm_payload_authorization_valid_after',
  authorization_expired: 'invalid_exact_evm_payload_authorization_valid_before',
  invalid_signature: 'invalid_exact_evm_payload_signature',
} as const

/** A smart wallet's refusal as the answer's reason (the published @x402/evm facilitator's names). */
const SMART_WALLET_REASONS: Record<(SmartWalletCheck & { ok: false })['reason'], [string, string]> = {
  invalid_signature: ['invalid_exact_evm_payload_signature', 'the payer wallet did not accept the signature'],
  smart_wallet_not_deployed: [
    'invalid_exact_evm_payload_undeployed_smart_wallet',
    'the payer is a smart wallet not deployed yet: deploy it first',
  ],
  // The published @x402/evm facilitator's name, for a factory outside its eip6492AllowedFactories.
  smart_wallet_factory_not_allowed: [
    'eip6492_factory_not_allowed',
    'the payer is a smart wallet not deployed yet, of a factory this facilitator does not deploy through',
  ],
  rpc_unavailable: ['unexpected_verify_error', 'the payer wallet could not be asked; retry shortly'],
}

/** The chain's part: nonce unused, balance enough. Null when fine; otherwise the failure. */
export async function checkOnChain(
  checker: AuthorizationChainChecker,
  a: { payer: Address; nonce: Hex; valueAtomic: bigint },
): Promise<{ reason: string; message: string } | null> {
  return exactChainFailure(await checker({ from: a.payer, nonce: a.nonce, value: a.valueAtomic }))
}

/** An exact authorization's chain read as the answer's reason; null when fine. */
export function exactChainFailure(r: AuthorizationChainCheck): { reason: string; message: string } | null {
  if (r.ok) return null
  if (r.reason === 'insufficient_funds')
    return { reason: 'insufficient_funds', message: 'the payer cannot cover it' }
  if (r.reason === 'proof_already_used')
    return { reason: 'proof_already_used', message: 'this authorization is already used on chain' }
  return { reason: 'unexpected_verify_error', message: 'the chain could not be read; retry shortly' }
}

export function paymentIdentifier(extensions: Record<string, unknown> | undefined): string | null {
  const ext = extensions?.[PAYMENT_IDENTIFIER] as { info?: { id?: unknown } } | undefined
  const id = ext?.info?.id
  return typeof id === 'string' && ID_PATTERN.test(id) ? id : null
}
