// What /api/v1/facilitator/verify and /settle check of an x402 `upto` payload (a Permit2 witness transfer
// signed for a maximum, as @x402/evm's upto client signs it): the common terms (facilitator-check.ts), then
// the permit against them, as the published upto facilitator checks it: the upto proxy as spender, payTo as
// the witness's recipient, tollgate's upto facilitator in the witness, inside its window, the signed maximum
// the amount accepted, signed by `from`. /verify asks for the maximum; /settle for what the middleware
// settles (its settlement override), at most the maximum. Reasons as @x402/evm's upto facilitator names them.
import { type Address, getAddress } from 'viem'
import {
  storedUptoPermit,
  type UptoChainCheck,
  type UptoFailure,
  uptoProofKey,
  verifySponsoredApproval,
  verifyUptoPermit,
} from '../chain/upto-permit.ts'
import { EIP2612_GAS_SPONSORING, parseUptoPayload } from '../schemes/upto/permit-payload.ts'
import {
  type CheckContext,
  type Checked,
  checkCommonTerms,
  paymentIdentifier,
  type Terms,
} from './facilitator-check.ts'

const REASONS: Record<UptoFailure, string> = {
  invalid_signature: 'invalid_permit2_signature',
  wrong_recipient: 'invalid_permit2_recipient_mismatch',
  wrong_asset: 'permit2_token_mismatch',
  wrong_spender: 'invalid_permit2_spender',
  wrong_facilitator: 'upto_facilitator_mismatch',
  max_amount_mismatch: 'permit2_amount_mismatch',
  authorization_not_yet_valid: 'permit2_not_yet_valid',
  authorization_expired: 'permit2_deadline_expired',
  // (The published upto facilitator has no name for these; the first as its exact facilitator names it.)
  smart_wallet_not_deployed: 'invalid_upto_evm_payload_undeployed_smart_wallet',
  rpc_unavailable: 'unexpected_verify_error',
}

/**
 * The local checks of an `upto` payload: no RPC. `settle`: the requirements' amount is what is settled (0 <
 * amount ≤ the signed maximum); `verify`: it is the maximum. `facilitator`: the account payers must name in
 * the witness (null: this instance offers no upto).
 */
export async function checkUptoTerms(
  t: Terms,
  c: CheckContext & { facilitator: Address | null; phase: 'verify' | 'settle' },
): Promise<Checked> {
  if (c.facilitator === null)
    return { ok: false, reason: 'unsupported_scheme', message: 'upto is not offered on this chain' }
  if (t.x402Version !== 2)
    return { ok: false, reason: 'unsupported_scheme', message: 'upto is settled in x402 version 2 only' }
  const common = checkCommonTerms(t, c, 'upto')
  if (!common.ok) return common
  const parsed = parseUptoPayload({ payload: t.payload, extensions: t.extensions })
  if (!parsed.ok) return { ok: false, reason: 'invalid_payload', message: parsed.detail }
  const { permit, signature, approval } = parsed
  const payer = getAddress(permit.from)
  const fail = (reason: string, message: string): Checked => ({ ok: false, reason, message, payer })
  const amount = BigInt(t.amount)
  // The payload accepted the maximum the payer signed; /settle may ask for less (never more), /verify for it.
  if (t.accepted && BigInt(t.accepted.amount) !== permit.amount)
    return fail(
      'permit2_amount_mismatch',
      `the permit signs ${permit.amount}, the payload accepted another amount`,
    )
  if (c.phase === 'verify' ? amount !== permit.amount : amount > permit.amount)
    return fail(
      c.phase === 'verify' ? 'permit2_amount_mismatch' : 'invalid_upto_evm_payload_settlement_exceeds_amount',
      `the amount must be ${c.phase === 'verify' ? '' : 'at most '}the signed maximum ${permit.amount}`,
    )
  const local = await verifyUptoPermit({
    chainId: c.chain.chainId,
    permit,
    signature,
    usdc: c.chain.usdcAddress,
    // The witness's recipient: the requirements' payTo (the treasury or the account's wallet, checked above).
    treasury: getAddress(t.payTo),
    facilitators: [c.facilitator],
    maxAmount: permit.amount,
    nowSeconds: c.nowSeconds,
    wallet: c.verifyWalletDigest,
  })
  if (!local.ok)
    return fail(
      REASONS[local.reason],
      local.reason === 'rpc_unavailable'
        ? 'the payer wallet could not be asked; retry shortly'
        : local.reason.replaceAll('_', ' '),
    )
  if (approval !== null) {
    const sponsored = await verifySponsoredApproval({
      chainId: c.chain.chainId,
      token: { address: c.chain.usdcAddress, name: c.chain.usdcName, version: c.chain.usdcVersion },
      permit,
      approval,
      nowSeconds: c.nowSeconds,
    })
    if (!sponsored.ok)
      return fail(
        sponsored.reason,
        `the ${EIP2612_GAS_SPONSORING} approval: ${sponsored.reason.replaceAll('_', ' ')}`,
      )
  }
  return {
    ok: true,
    // The key the metered upto scheme claims this permit by: one claim, wherever it pays.
    proofKey: uptoProofKey(permit),
    payer,
    valueAtomic: amount,
    custody: common.custody,
    payTo: getAddress(t.payTo),
    network: common.network,
    paymentIdentifier: paymentIdentifier(t.extensions),
    kind: 'upto',
    authorization: storedUptoPermit(permit, local.signature, approval),
    permit,
    approval,
  }
}

/** The chain's part of a permit: nonce unspent, balance and Permit2 allowance enough. Null when fine. */
export function uptoChainFailure(r: UptoChainCheck): { reason: string; message: string } | null {
  if (r.ok) return null
  switch (r.reason) {
    case 'insufficient_funds':
      return { reason: 'insufficient_funds', message: 'the payer cannot cover the signed maximum' }
    case 'permit2_allowance_required':
      return { reason: 'permit2_allowance_required', message: 'the payer has not approved Permit2 for it' }
    case 'permit2_allowance_pending':
      return {
        reason: 'permit2_allowance_pending',
        message: `another payment's ${EIP2612_GAS_SPONSORING} approval of Permit2 is not settled yet`,
      }
    case 'eip2612_nonce_mismatch':
      return {
        reason: 'eip2612_nonce_mismatch',
        message: `the ${EIP2612_GAS_SPONSORING} approval's nonce is not the token's current one`,
      }
    case 'proof_already_used':
      return { reason: 'proof_already_used', message: 'this permit is already used on chain' }
    default:
      return { reason: 'unexpected_verify_error', message: 'the chain could not be read; retry shortly' }
  }
}
