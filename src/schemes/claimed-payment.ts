// A payment held by a claim row (transaction hashes and EIP-3009 authorizations): claimed before the upstream
// is called, captured with its call when served, released when the upstream certainly did not serve it, left
// in doubt otherwise (refunded or voided at the end of its window by the expiry job). The SQL is src/books/.
import type { LRUCache } from 'lru-cache'
import type { BatchWriter } from '../books/batch-writer.ts'
import { type Capture, releaseClaim } from '../books/claims.ts'
import type { Sql } from '../db/sql.ts'
import { splitOwnerShare } from '../money.ts'
import type { Logger } from '../observability/logger.ts'
import { claimReleases } from '../observability/metrics.ts'
import { usageDocument } from '../pricing/model.ts'
import type { CallFacts, ClaimOutcome, Payment, SchemeDeps, ServedCall } from './scheme.ts'

export interface ClaimedPaymentDeps {
  sql: Sql
  books: BatchWriter
  usedProofs: LRUCache<string, true>
  logger: Logger
  ownerShareBps: number
  retryWindowMs: number
  /** Releases still being written, by proof: a quick retry waits for its own release (per process). */
  pendingReleases: Map<string, Promise<void>>
}

/** What a scheme's claimed payments share, from the registry's deps (each scheme its own pending releases). */
export function claimedPaymentDeps(deps: SchemeDeps): ClaimedPaymentDeps {
  return {
    sql: deps.sql,
    books: deps.books,
    usedProofs: deps.usedProofs,
    logger: deps.logger,
    ownerShareBps: deps.settings.ownerShareBps,
    retryWindowMs: deps.settings.retryWindowMs,
    pendingReleases: new Map(),
  }
}

/** How long past the upstream's timeout a claim is held: a slow answer still captures it. */
const LEASE_MARGIN_MS = 5_000

/** A claim's lease: it outlives the upstream's timeout, so a slow answer still captures it. */
export function claimLeaseMs(endpoint: { timeoutMs: number }): number {
  return endpoint.timeoutMs + LEASE_MARGIN_MS
}

export interface ClaimedPaymentInit {
  scheme: string
  /** The claims table's kind. */
  kind: 'tx' | 'eip3009' | 'upto'
  proofKey: string
  payer: `0x${string}`
  coversAtomic: bigint
  transaction: string | null
  /** Kept with the claim (settled after the call); null for a transaction hash. */
  authorization: object | null
  /** A transaction hash's block time (the retention horizon is compared with it); null for others. */
  proofAtMs: number | null
  endpointId: string
  accountId: string
  leaseMs: number
  /** x402 exact and upto: the payer's balance read; the claim reserves against it (src/books/claims.ts). */
  reserve?: { balanceAtomic: bigint; block: bigint } | null
  /** The claim was refused for funds. */
  onInsufficientFunds?: () => void
  receipt(served: boolean): [string, string] | null
  /**
   * Settles before the answer (its endpoint asks so): takes the capture, writes it with the settlement
   * transaction that carries it, and resolves with the receipt once that is done.
   */
  settleEarly?: (capture: Capture) => Promise<[string, string]>
}

/** A verified EIP-3009 authorization, as the verifier answers it (the fields a claim of one needs). */
export interface VerifiedAuthorization {
  proofKey: string
  payer: `0x${string}`
  valueAtomic: bigint
  authorization: object
  balance: { atomic: bigint; block: bigint } | null
}

/**
 * The claimed payment of one EIP-3009 authorization (x402 `exact`, an MPP `evm` charge): held by its nonce's
 * claim, reserved against the payer's balance read, settled after the call unless `settleEarly` settles it
 * before the answer. One construction for every scheme that pays with an authorization.
 */
export function authorizationPayment(
  deps: ClaimedPaymentDeps,
  scheme: string,
  v: VerifiedAuthorization,
  endpoint: { id: string; accountId: string; timeoutMs: number },
  how: {
    forgetBalance: (payer: `0x${string}`) => void
    receipt: ClaimedPaymentInit['receipt']
    settleEarly?: ClaimedPaymentInit['settleEarly']
  },
): ClaimedPayment {
  return new ClaimedPayment(deps, {
    scheme,
    kind: 'eip3009',
    proofKey: v.proofKey,
    payer: v.payer,
    coversAtomic: v.valueAtomic,
    transaction: null,
    authorization: v.authorization,
    proofAtMs: null,
    endpointId: endpoint.id,
    accountId: endpoint.accountId,
    leaseMs: claimLeaseMs(endpoint),
    reserve: v.balance === null ? null : { balanceAtomic: v.balance.atomic, block: v.balance.block },
    onInsufficientFunds: () => how.forgetBalance(v.payer),
    receipt: how.receipt,
    settleEarly: how.settleEarly,
  })
}

export class ClaimedPayment implements Payment {
  readonly scheme: string
  readonly proofKey: string
  readonly payer: `0x${string}`
  readonly coversAtomic: bigint
  readonly transaction: string | null
  /** The claim attempt this request holds (its release names it). */
  attempt = 0
  /** The claim's partition key, as its claim returned it: the capture goes straight to that partition. */
  private horizonAt: string | null = null
  /** The receipt once settled before the answer (set by capture() when its endpoint asks for it). */
  private settling: Promise<[string, string]> | null = null
  /** The capture queued on the books' writer (not one a settler writes), until the answer's delivery. */
  private queued: Capture | null = null

  constructor(
    private readonly deps: ClaimedPaymentDeps,
    private readonly init: ClaimedPaymentInit,
  ) {
    this.scheme = init.scheme
    this.proofKey = init.proofKey
    this.payer = init.payer
    this.coversAtomic = init.coversAtomic
    this.transaction = init.transaction
  }

  claim(): Promise<ClaimOutcome> {
    // A retry right after a failure on this instance waits for that failure's release to be written.
    const releasing = this.deps.pendingReleases.get(this.proofKey)
    if (releasing !== undefined) return releasing.then(() => this.claim())
    const i = this.init
    return this.deps.books
      .claim({
        proofKey: i.proofKey,
        kind: i.kind,
        targetType: 'call',
        targetId: i.endpointId,
        accountId: i.accountId,
        payer: i.payer,
        amountAtomic: i.coversAtomic,
        retryWindowMs: this.deps.retryWindowMs,
        leaseMs: i.leaseMs,
        authorization: i.authorization,
        proofAtMs: i.proofAtMs,
        reserve: i.reserve ?? null,
      })
      .then((result) => {
        if (result.outcome === 'used') this.deps.usedProofs.set(this.proofKey, true)
        if (result.outcome === 'insufficient_funds') i.onInsufficientFunds?.()
        if (result.outcome === 'won') {
          this.attempt = result.attempt
          this.horizonAt = result.horizonAt
        }
        return result.outcome
      })
  }

  drop(): void {}

  capture(call: ServedCall): void {
    const split = splitOwnerShare(call.chargeAtomic, this.deps.ownerShareBps)
    const usage = call.usage
    const capture: Capture = {
      callId: call.callId,
      proofKey: this.proofKey,
      endpointId: call.endpointId,
      accountId: call.accountId,
      ownerWallet: call.ownerWallet,
      payer: this.payer,
      amountAtomic: call.chargeAtomic,
      ownerShareAtomic: split.owner,
      feeAtomic: split.fee,
      upstreamStatus: call.status,
      method: call.method,
      pricing: {
        model: call.pricingModel,
        unit: usage?.unit ?? null,
        usage: usage === null ? null : usageDocument(usage),
        ceilingAtomic: usage?.ceilingAtomic ?? null,
        // A usage-priced call paid for more than its charge (a prepaid ceiling): the rest goes back. A
        // transaction hash prepaid (refunded with the capture), and so did an authorization for the ceiling
        // (an MPP charge; x402 exact is never taken where the amount varies), refunded once it settled; an
        // upto permit is settled for the charge, the rest is never taken.
        refundAtomic:
          usage === null || this.init.kind === 'upto' ? 0n : this.coversAtomic - call.chargeAtomic,
      },
      scheme: this.scheme,
      receiptId: call.receiptId,
      tool: call.tool ?? null,
      agent: call.agent ?? null,
      horizonAt: this.horizonAt,
    }
    // Settled before the answer: the settler writes the capture itself, in any case, with the hash of the
    // transaction that carries the authorization when it signed one.
    if (this.init.settleEarly !== undefined) this.settling = this.init.settleEarly(capture)
    else {
      this.queued = capture
      this.deps.books.capture(capture)
    }
    this.deps.usedProofs.set(this.proofKey, true)
  }

  deliver(bodySha256: string, bodyBytes: number): boolean {
    const capture = this.queued
    this.queued = null
    // Single-threaded: the writer either took the capture already (sent) or will take it with this.
    if (capture === null || capture.sent === true) return false
    capture.delivery = { bodySha256, bodyBytes }
    return true
  }

  release(): void {
    const { pendingReleases, sql, logger } = this.deps
    const proofKey = this.proofKey
    const p = releaseWithRetry(sql, proofKey, this.attempt)
      .then((applied) => {
        claimReleases.labels(applied ? 'released' : 'refused').inc()
      })
      .catch((err) => {
        // Not released: the claim stays held, then in doubt, and is refunded at the end of its window.
        claimReleases.labels('failed').inc()
        logger.warn('claim release failed; the proof will be refunded instead of retried', { err })
      })
      .finally(() => pendingReleases.delete(proofKey))
    pendingReleases.set(proofKey, p)
  }

  /** The claim stays held: once its lease runs out it is in doubt, and the expiry job settles it. */
  doubt(_call: CallFacts): void {}

  receipt(served: boolean): [string, string] | null {
    return this.init.receipt(served)
  }

  settleBeforeAnswer(): Promise<[string, string]> | null {
    return this.settling
  }

  get settlesEarly(): boolean {
    return this.init.settleEarly !== undefined
  }
}

/** A release is worth a few quick tries: without it, a retry within the window is refused. */
async function releaseWithRetry(sql: Sql, proofKey: string, attempt: number): Promise<boolean> {
  for (let i = 0; ; i++) {
    try {
      return (await releaseClaim(sql, { proofKey, attempt })).ok
    } catch (err) {
      if (i >= 2) throw err
      await new Promise((r) => setTimeout(r, 100 * 2 ** i))
    }
  }
}
