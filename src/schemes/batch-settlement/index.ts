// x402 `batch-settlement` (pay once into a channel, call many): a deposit, then a cumulative EIP-712 voucher
// per call, verified without the chain (voucher.ts), accepted once across instances by the channel's lease
// in memory (leases.ts), claimed on chain in batches by the leader (src/control-plane/jobs/voucher-claimer.ts).
// Offered only where the endpoint's owner turned it on, and only over contracts that compute what the
// published client signs (checked at start-up).
import { randomBytes } from 'node:crypto'
import { hostname } from 'node:os'
import { getAddress } from 'viem'
import type { VoucherCall } from '../../books/channels.ts'
import { BATCH_SCHEME, checkBatchContracts } from '../../chain/batch-channel.ts'
import { newId } from '../../ids.ts'
import { splitOwnerShare } from '../../money.ts'
import { voucherCallsLost, voucherWrites } from '../../observability/metrics.ts'
import { usageDocument } from '../../pricing/model.ts'
import { v2Header } from '../../wire/challenge.ts'
import type { Proof } from '../../wire/proof.ts'
import { v2Requirement } from '../requirement.ts'
import type {
  CallFacts,
  ClaimOutcome,
  Offer,
  OfferQuery,
  Payment,
  PayQuery,
  Scheme,
  SchemeDeps,
  ServedCall,
  SessionFunds,
  TopUpOutcome,
  Verdict,
} from '../scheme.ts'
import { haltRefusal } from '../verdicts.ts'
import { VoucherLeases } from './leases.ts'
import {
  BATCH_ERR,
  BATCH_WITHDRAW_DELAY_S,
  type BatchDeps,
  type BatchOutcome,
  type BatchVerified,
  batchRequiredHeader,
  decideBatch,
  extendBatch,
  parseBatchPayment,
  sessionReceipt,
} from './voucher.ts'

const JSON_TYPE = 'application/json; charset=utf-8'

/** null (logged) when the contracts at the published client's addresses fail the start-up check. */
export async function batchSettlementScheme(deps: SchemeDeps): Promise<Scheme | null> {
  if (!(await contractsUsable(deps))) return null
  const { settings, chainInfo, chain, logger } = deps
  const { leaseMs, flushMs, reserveAtomic } = settings.batch
  const leases = new VoucherLeases(deps.sql, {
    // One holder name per process start.
    holder: `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`,
    leaseMs,
    flushMs,
    reserveAtomic,
    // An idle holder lets go soon: another instance asking for the channel waits at most this (plus a flush).
    idleMs: Math.max(100, flushMs * 20),
    handoffWaitMs: leaseMs + Math.floor(leaseMs / 2),
    onWrite: () => voucherWrites.labels('written').inc(),
    onError: (err) => {
      voucherWrites.labels('failed').inc()
      logger.error('batch voucher write failed; retried at the next flush', { err })
    },
    onLost: (n) => {
      voucherCallsLost.inc(n)
      logger.error('served voucher calls not written: their channel lease was taken over', { calls: n })
    },
  })
  return new BatchSettlementScheme(deps, {
    sql: deps.sql,
    chainId: chainInfo.chainId,
    caip2: chainInfo.caip2,
    treasury: getAddress(chain.treasury),
    usdc: getAddress(chain.usdc.address),
    // Deposits and refunds are sent by the leader; the request waits for the outcome.
    opWaitMs: 60_000,
    leases,
  })
}

class BatchSettlementScheme implements Scheme {
  readonly name = BATCH_SCHEME

  constructor(
    private readonly deps: SchemeDeps,
    private readonly batch: BatchDeps,
  ) {}

  offer(q: OfferQuery): Offer | null {
    if (!q.enabled.has(BATCH_SCHEME)) return null
    const c = this.deps.chainInfo
    const { amountAtomic, maxTimeoutSeconds } = q
    // tollgate's treasury is both the receiver and the receiver's authorizer.
    const extra = {
      receiverAuthorizer: c.treasury,
      withdrawDelay: BATCH_WITHDRAW_DELAY_S,
      assetTransferMethod: 'eip3009',
    }
    return { v2: v2Requirement(c, { scheme: BATCH_SCHEME, amountAtomic, maxTimeoutSeconds }, extra) }
  }

  reads(proof: Proof): boolean {
    if (proof.kind !== 'x402') return false
    return (proof.payload as { accepted?: { scheme?: unknown } }).accepted?.scheme === BATCH_SCHEME
  }

  verify(proof: Proof, q: PayQuery): Verdict | Promise<Verdict> {
    if (proof.kind !== 'x402') return { ok: false, reason: 'invalid_proof' }
    // The token cannot pay the treasury (paused, or the treasury blacklisted): a channel's claim would revert.
    const halted = haltRefusal(this.deps.settlementThrottle)
    if (halted !== null) return halted
    // Not turned on for this endpoint: the payload names terms this 402 does not offer.
    if (!q.quote.challenge.accepts.some((a) => a.scheme === BATCH_SCHEME))
      return { ok: false, reason: 'requirements_mismatch' }
    const payment = parseBatchPayment(proof.payload)
    if (payment === 'invalid' || payment === null) return { ok: false, reason: BATCH_ERR.payload }
    const varies = q.quote.varies
    return decideBatch(this.batch, payment, q.quote.amountAtomic, varies).then(
      (outcome) => this.verdict(outcome, q),
      (err): Verdict => ({
        ok: 'unavailable',
        message: 'the channel could not be checked; retry shortly',
        reason: 'batch_failed',
        err,
      }),
    )
  }

  private verdict(outcome: BatchOutcome, q: PayQuery): Verdict {
    if (outcome.ok === true)
      return { ok: true, payment: new VoucherPayment(this.batch, this.deps, outcome, q.quote.varies) }
    if (outcome.ok === false) {
      // The scheme's corrective 402 carries the channel's state: the client resyncs from it.
      const header = batchRequiredHeader(
        v2Header(q.quote.challenge, outcome.reason),
        outcome.reason,
        outcome.channel,
      )
      return { ok: false, reason: outcome.reason, requiredHeader: header }
    }
    // A refund: answered here, nothing forwarded.
    return {
      ok: 'answered',
      status: '200 OK',
      headers: [
        ['content-type', JSON_TYPE],
        ['payment-response', outcome.receipt],
      ],
      body: outcome.body,
      reason: 'batch_refund',
    }
  }

  flush(): Promise<void> {
    return this.batch.leases.flushNow()
  }

  stop(): Promise<void> {
    return this.batch.leases.stop()
  }
}

/**
 * A voucher increment accepted by its channel's lease: accepted once, in memory (no claim round trip), so
 * claim() has nothing left to do; its call is written with the voucher by the lease after it is served.
 */
class VoucherPayment implements Payment {
  readonly scheme = BATCH_SCHEME
  readonly proofKey: string
  readonly payer: `0x${string}`
  /** The voucher's increment; a session's further vouchers add theirs (sessionFunds). */
  coversAtomic: bigint
  readonly transaction = null

  constructor(
    private readonly batch: BatchDeps,
    private readonly deps: SchemeDeps,
    private readonly paid: BatchVerified,
    /** The voucher covers a ceiling; the call is charged its measured amount (usage pricing). */
    private readonly varies: boolean,
  ) {
    this.proofKey = paid.proofKey
    this.payer = paid.payer
    this.coversAtomic = paid.valueAtomic
  }

  claim(): ClaimOutcome {
    return 'won'
  }

  /** Accepted but never forwarded: the same voucher may come again. */
  drop(): void {
    this.batch.leases.released(this.paid.lease, this.paid.cumulative)
  }

  capture(call: ServedCall): void {
    if (this.varies) {
      this.batch.leases.settledFor(this.paid.lease, call.chargeAtomic, true, (cumulative) =>
        this.voucherCall(call, call, cumulative),
      )
      return
    }
    this.batch.leases.served(this.paid.lease, this.paid.cumulative, this.voucherCall(call, call))
  }

  release(): void {
    this.batch.leases.released(this.paid.lease, this.paid.cumulative)
  }

  /**
   * Forwarded, outcome unknown: the voucher is never served again, so its whole increment stays charged (a
   * cumulative voucher cannot be skipped: the channel's next one builds on it, and taken back, the same
   * voucher would pay for the call again). The books carry it as what it is, a call charged with no upstream
   * status (0). Without that row the claim moved the payer's USDC for a call the books never saw.
   */
  doubt(call: CallFacts): void {
    const inDoubt: ServedCall = {
      ...call,
      callId: newId('call'),
      status: 0,
      chargeAtomic: this.coversAtomic,
      usage: null,
      receiptId: null,
    }
    if (this.varies) {
      this.batch.leases.settledFor(this.paid.lease, 0n, false, (cumulative) =>
        this.voucherCall(call, inDoubt, cumulative),
      )
      return
    }
    this.batch.leases.doubt(this.paid.lease, this.paid.cumulative, this.voucherCall(call, inDoubt))
  }

  receipt(served: boolean): [string, string] | null {
    return served ? ['payment-response', this.paid.receipt] : null
  }

  /** Usage pricing only: the session holds this voucher in flight and each voucher it is sent extends it. */
  sessionFunds(): SessionFunds | null {
    if (!this.varies) return null
    const paid = this.paid
    const batch = this.batch
    const payer = paid.payer
    return {
      receipt: () => [
        'payment-response',
        sessionReceipt(batch, payer, paid.channelId, paid.valueAtomic, paid.cumulative),
      ],
      topUp: async (proof: Proof, q: PayQuery): Promise<TopUpOutcome> => {
        const p = proof.kind === 'x402' ? parseBatchPayment(proof.payload) : null
        if (p === 'invalid' || p === null) return { ok: false, reason: BATCH_ERR.payload }
        const price = q.quote.amountAtomic
        const done = await extendBatch(batch, p, paid, price)
        if (!done.ok) {
          const base = v2Header(q.quote.challenge, done.reason)
          const held = batch.leases.held(paid.lease)
          return {
            ok: false,
            reason: done.reason,
            requiredHeader: batchRequiredHeader(base, done.reason, held),
          }
        }
        this.coversAtomic += price
        return { ok: true, addedAtomic: price, receipt: ['payment-response', done.receipt] }
      },
    }
  }

  private voucherCall(
    facts: CallFacts,
    served: ServedCall | null,
    cumulative = this.paid.cumulative,
  ): VoucherCall {
    const paid = this.paid
    const amount = served?.chargeAtomic ?? paid.valueAtomic
    const split = splitOwnerShare(amount, this.deps.settings.ownerShareBps)
    return {
      channelId: paid.channelId,
      cumulative,
      endpointId: facts.endpointId,
      accountId: facts.accountId,
      payer: paid.payer,
      amountAtomic: amount,
      call:
        served === null
          ? null
          : {
              callId: served.callId,
              ownerWallet: facts.ownerWallet,
              ownerShareAtomic: split.owner,
              feeAtomic: split.fee,
              upstreamStatus: served.status,
              method: facts.method,
              receiptId: served.receiptId,
              tool: served.tool ?? null,
              agent: served.agent ?? null,
              pricing: {
                model: served.pricingModel,
                unit: served.usage?.unit ?? null,
                usage: served.usage === null ? null : usageDocument(served.usage),
                ceilingAtomic: served.usage?.ceilingAtomic ?? null,
                // A channel is charged what was measured: nothing to refund.
                refundAtomic: 0n,
              },
            },
    }
  }
}

/**
 * The contracts at the addresses the published client expects (on a real network the x402 project's
 * deployment) hold code and compute the client's channel ids and voucher digests. Otherwise batch-settlement
 * is not offered by any endpoint of this process (logged; exact and hashes still work).
 */
async function contractsUsable({ chain, logger }: SchemeDeps): Promise<boolean> {
  let checked: Awaited<ReturnType<typeof checkBatchContracts>>
  try {
    checked = await checkBatchContracts(chain.publicClient, {
      chainId: chain.chainId,
      withdrawDelay: BATCH_WITHDRAW_DELAY_S,
    })
  } catch (err) {
    checked = {
      ok: false,
      reason: `the check could not read the chain (${(err as Error).message?.split('\n')[0]})`,
    }
  }
  if (!checked.ok)
    logger.error('x402 batch-settlement is not offered: its contracts failed the start-up check', {
      code: 'TOLLGATE_BATCH_CONTRACTS_UNUSABLE',
      reason: checked.reason,
    })
  return checked.ok
}
