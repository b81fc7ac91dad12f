// x402 `upto` on EVM: the payer signs a Permit2 witness transfer for the ceiling the 402 offers, naming the
// x402 upto proxy as spender and tollgate's facilitator (its UptoSettlementBatcher, or the treasury on a
// chain without one) in the witness. Verified locally and on chain (src/chain/upto-permit.ts), its
// (payer, Permit2 nonce) claimed before the call, captured for the call's charge (at most the signed
// ceiling), and settled for that charge: before the answer by this process's settler (a delegate of the
// batcher; the answer is held whole until the charge is known, src/data-plane/held-answer.ts) on endpoints
// that settle before the answer, else after the call by the upto settlement job. Offered where the amount
// varies (usage pricing): a fixed price has `exact`.
import type { Address } from 'viem'
import { getAddress } from 'viem'
import type { Capture } from '../../books/claims.ts'
import type { StoredUptoPermit } from '../../chain/upto-permit.ts'
import {
  createUptoChainChecker,
  storedUptoPermit,
  type UptoChainChecker,
  type UptoFailure,
  uptoProofKey,
  verifySponsoredApproval,
  verifyUptoPermit,
} from '../../chain/upto-permit.ts'
import {
  allowUptoDelegateOnDevChain,
  checkUptoContracts,
  hasUptoBatcher,
  isUptoDelegate,
  uptoBatcherAddress,
} from '../../chain/upto-settle.ts'
import { type WalletDigestVerifier, walletDigestVerifier } from '../../chain/verify-smart-wallet.ts'
import type { Proof } from '../../wire/proof.ts'
import {
  ClaimedPayment,
  type ClaimedPaymentDeps,
  claimedPaymentDeps,
  claimLeaseMs,
} from '../claimed-payment.ts'
import type { EarlySettlement } from '../exact/settle-before-answer.ts'
import { type EarlySettler, sharedSettler } from '../exact/settler.ts'
import { acceptedAmount, v2Requirement } from '../requirement.ts'
import type { Offer, OfferQuery, PayQuery, Scheme, SchemeDeps, Verdict } from '../scheme.ts'
import { backlogRefusal } from '../verdicts.ts'
import {
  EIP2612_GAS_SPONSORING,
  EIP2612_GAS_SPONSORING_DECLARATION,
  parseUptoPayload,
} from './permit-payload.ts'

export const UPTO = 'upto'

/** null (logged) when the chain lacks Permit2 and the upto proxy as the published client expects them. */
export async function uptoScheme(deps: SchemeDeps): Promise<Scheme | null> {
  const { chain, chainInfo, logger } = deps
  let facilitator: Address
  let settler: EarlySettler | null = null
  try {
    const checked = await checkUptoContracts(chain.publicClient, { chainId: chainInfo.chainId })
    if (!checked.ok) {
      logger.warn('x402 upto is not offered: its contracts failed the start-up check', {
        reason: checked.reason,
      })
      return null
    }
    // The batcher settles many permits per transaction; without it the treasury settles them one by one.
    const batched = await hasUptoBatcher(chain.publicClient, chainInfo.treasury)
    facilitator = batched ? uptoBatcherAddress(chainInfo.treasury) : getAddress(chainInfo.treasury)
    // Only a delegate of the batcher settles before the answer: the treasury's nonces are the leader's.
    if (batched) settler = await delegateSettler(deps, facilitator)
  } catch (err) {
    logger.warn('x402 upto is not offered: the chain could not be read at start-up', { err })
    return null
  }
  return new UptoScheme(deps, facilitator, settler)
}

/**
 * This process's settler (shared with exact) when the batcher lets it settle: on the dev chain it is made a
 * delegate here; elsewhere the treasury names the slots (setDelegates). null: upto settles after.
 */
async function delegateSettler(deps: SchemeDeps, batcher: Address): Promise<EarlySettler | null> {
  const settler = await sharedSettler(deps)
  if (settler === null) return null
  const client = deps.chain.publicClient
  const account = settler.early.address
  if (deps.settings.devChain && !(await isUptoDelegate(client, batcher, account)))
    await allowUptoDelegateOnDevChain(deps.chain.rpcUrl, batcher, account)
  if (await isUptoDelegate(client, batcher, account)) return settler
  deps.logger.warn(
    'x402 upto: this settler slot is not a delegate of the UptoSettlementBatcher; upto calls settle after, with pending receipts (the treasury names its slots with setDelegates)',
    { settler: account, batcher },
  )
  return null
}

/**
 * Local refusals as wire reasons: the permit signs other terms than this 402's (rpc_unavailable is not a
 * refusal: UNAVAILABLE, a 503 to retry).
 */
const WIRE_REASON: Record<Exclude<UptoFailure, 'rpc_unavailable'>, string> = {
  invalid_signature: 'invalid_signature',
  wrong_recipient: 'wrong_recipient',
  wrong_asset: 'wrong_asset',
  wrong_spender: 'requirements_mismatch',
  wrong_facilitator: 'requirements_mismatch',
  max_amount_mismatch: 'wrong_amount',
  authorization_not_yet_valid: 'authorization_not_yet_valid',
  authorization_expired: 'authorization_expired',
  smart_wallet_not_deployed: 'smart_wallet_not_deployed',
}

const UNAVAILABLE: Verdict = {
  ok: 'unavailable',
  message: 'the chain could not be reached to verify the payment; retry shortly',
  reason: 'rpc_unavailable',
}

const PENDING_MESSAGE =
  'the permit is verified and its nonce claimed; tollgate settles it on chain for the charge, at most the signed maximum'
const SENT_MESSAGE =
  'the permit is in the named transaction for the charge, broadcast before this answer and not yet mined'
const NOT_CHARGED_MESSAGE =
  'the upstream failed: nothing was charged, and the same payment may be retried within the retry window'

class UptoScheme implements Scheme {
  readonly name = UPTO
  private readonly claimed: ClaimedPaymentDeps
  private readonly onChain: UptoChainChecker
  /** A contract wallet's own check of its permit, asked only when the signature is not its key's. */
  private readonly wallet: WalletDigestVerifier

  constructor(
    private readonly deps: SchemeDeps,
    /** The facilitator payers sign into their witness: the only account the proxy lets settle. */
    readonly facilitator: Address,
    /** Settles before the answer where the endpoint asks it; null: every call settles after. */
    private readonly settler: EarlySettler | null,
  ) {
    this.claimed = claimedPaymentDeps(deps)
    this.onChain = createUptoChainChecker(deps.chain.tokenReads)
    this.wallet = walletDigestVerifier(deps.chain.publicClient)
  }

  offer(q: OfferQuery): Offer | null {
    // A fixed price is paid by `exact`; upto is for a charge known only after the call.
    if (!q.varies) return null
    const extra = { assetTransferMethod: 'permit2', facilitatorAddress: this.facilitator }
    const { amountAtomic, maxTimeoutSeconds } = q
    return {
      v2: v2Requirement(this.deps.chainInfo, { scheme: UPTO, amountAtomic, maxTimeoutSeconds }, extra),
      // A payer that never approved Permit2 signs an EIP-2612 approval beside its permit; the settlement
      // submits it (the batcher's settleWithPermits), at tollgate's gas.
      extensions: { [EIP2612_GAS_SPONSORING]: EIP2612_GAS_SPONSORING_DECLARATION },
    }
  }

  reads(proof: Proof): boolean {
    if (proof.kind !== 'x402') return false
    return (proof.payload as { accepted?: { scheme?: unknown } }).accepted?.scheme === UPTO
  }

  verify(proof: Proof, q: PayQuery): Verdict | Promise<Verdict> {
    if (proof.kind !== 'x402' || proof.version !== 2) return { ok: false, reason: 'invalid_proof' }
    // The settlement backlog would outrun new permits' deadlines: refused before any work, as exact is.
    const backlog = backlogRefusal(this.deps.settlementThrottle)
    if (backlog !== null) return backlog
    const advertised = q.quote.challenge.accepts.find((a) => a.scheme === UPTO)
    if (advertised === undefined) return { ok: false, reason: 'scheme_not_offered' }
    // The ceiling its `accepted` pays, when its terms are ours (the ceiling quoted within quote_ttl_ms holds).
    const maxAtomic = acceptedAmount(advertised, q.quote, proof.payload, q.nowMs)
    if (maxAtomic === null) return { ok: false, reason: 'requirements_mismatch' }
    const parsed = parseUptoPayload(proof.payload)
    if (!parsed.ok) return { ok: false, reason: 'invalid_proof' }
    const c = this.deps.chainInfo
    return verifyUptoPermit({
      chainId: c.chainId,
      permit: parsed.permit,
      signature: parsed.signature,
      usdc: c.usdcAddress,
      treasury: c.treasury,
      facilitators: [this.facilitator],
      maxAmount: maxAtomic,
      nowSeconds: BigInt(Math.floor(q.nowMs / 1000)),
      wallet: this.wallet,
    }).then(async (local): Promise<Verdict> => {
      if (!local.ok)
        return local.reason === 'rpc_unavailable'
          ? UNAVAILABLE
          : { ok: false, reason: WIRE_REASON[local.reason] }
      const { approval } = parsed
      if (approval !== null) {
        const sponsored = await verifySponsoredApproval({
          chainId: c.chainId,
          token: { address: c.usdcAddress, name: c.usdcName, version: c.usdcVersion },
          permit: parsed.permit,
          approval,
          nowSeconds: BigInt(Math.floor(q.nowMs / 1000)),
        })
        if (!sponsored.ok) return { ok: false, reason: sponsored.reason }
      }
      const proofKey = uptoProofKey(parsed.permit)
      if (this.deps.usedProofs.has(proofKey)) return { ok: false, reason: 'proof_already_used' }
      const onChain = await this.onChain(parsed.permit, approval)
      if (!onChain.ok)
        return onChain.reason === 'rpc_unavailable' ? UNAVAILABLE : { ok: false, reason: onChain.reason }
      const payer = getAddress(parsed.permit.from)
      const permit = storedUptoPermit(parsed.permit, local.signature, approval)
      const early = q.endpoint.settleBeforeAnswer === true && this.settler?.usable() ? this.settler : null
      return {
        ok: true,
        payment: new ClaimedPayment(this.claimed, {
          scheme: UPTO,
          kind: 'upto',
          proofAtMs: null,
          proofKey,
          payer,
          // The charge is capped here: never above what the payer signed.
          coversAtomic: parsed.permit.amount,
          transaction: null,
          authorization: permit,
          endpointId: q.endpoint.id,
          accountId: q.endpoint.accountId,
          leaseMs: claimLeaseMs(q.endpoint),
          receipt: (served) => this.receipt(payer, served),
          settleEarly: early === null ? undefined : (capture) => this.settleEarly(early, capture, permit),
          // The payer reservation: the claim holds the maximum against this balance read, on top of what
          // the payer's other permits and authorizations still hold, on every instance (src/books/claims.ts).
          reserve: { balanceAtomic: onChain.balance.atomic, block: onChain.balance.block },
        }),
      }
    })
  }

  /**
   * The charge is known (the capture's amount): settled from the settler, the receipt naming the mined
   * transaction. A zero charge moves nothing (the job books it without a transaction): pending, as after.
   */
  private settleEarly(
    settler: EarlySettler,
    capture: Capture,
    permit: StoredUptoPermit,
  ): Promise<[string, string]> {
    const payer = getAddress(permit.from)
    const charge = capture.amountAtomic
    if (charge <= 0n || charge > BigInt(permit.amount)) {
      this.deps.books.capture(capture)
      return Promise.resolve(this.receipt(payer, true))
    }
    return settler.early
      .settleUpto(capture, { permit, amount: charge })
      .then((outcome) => this.receipt(payer, true, { outcome, charge }))
  }

  /**
   * x402 v2 PAYMENT-RESPONSE. Settled before the answer: `success: true` with the transaction once it is
   * mined and the batcher logged this permit settled for the charge; sent and not mined within wait_ms,
   * `settlement_pending` with the hash. Otherwise pending (never success without a transaction).
   */
  private receipt(
    payer: Address,
    served: boolean,
    early?: { outcome: EarlySettlement; charge: bigint },
  ): [string, string] {
    const network = this.deps.chainInfo.caip2
    if (served && early !== undefined && early.outcome.state !== 'unsent') {
      const tail = `"transaction":"${early.outcome.transaction}","network":"${network}","payer":"${payer}","amount":"${early.charge}"`
      const json =
        early.outcome.state === 'settled'
          ? `{"success":true,${tail}}`
          : `{"success":false,"errorReason":"settlement_pending","errorMessage":"${SENT_MESSAGE}",${tail}}`
      return ['payment-response', Buffer.from(json).toString('base64')]
    }
    const reason = served ? 'settlement_pending' : 'upstream_failed'
    const message = served ? PENDING_MESSAGE : NOT_CHARGED_MESSAGE
    const json = `{"success":false,"errorReason":"${reason}","errorMessage":"${message}","transaction":"","network":"${network}","payer":"${payer}"}`
    return ['payment-response', Buffer.from(json).toString('base64')]
  }
}
