// The one proof verifier, shared by metered calls and checkout. Answers from the verified-transfer cache
// when it can (synchronously), else asks the chain once per hash however many requests wait.
// It proves what was paid and by whom; the caller decides whether that is enough (price, amount due).
import { verifications } from '../observability/metrics.ts'
import type { VerifiedTransfer } from './caches.ts'
import { cacheCounters, type createVerifiedTransferCache } from './caches.ts'
import type { Proof } from './proof.ts'

export type VerifyFailure =
  | 'invalid_proof'
  | 'unsupported_proof'
  | 'payment_pending'
  | 'transaction_failed'
  | 'wrong_recipient'
  | 'wrong_asset'
  | 'no_transfer'
  | 'proof_too_old'
  | 'rpc_unavailable'

export type VerifyResult =
  | {
      ok: true
      proofKey: string
      kind: 'tx'
      payer: `0x${string}`
      valueAtomic: bigint
      transaction: `0x${string}`
    }
  | { ok: false; reason: VerifyFailure; retryAfterMs?: number; detail?: string }

/** What the chain module answers for one transaction hash. */
export type ChainTransferResult =
  | { ok: true; transfer: VerifiedTransfer }
  | {
      ok: false
      reason: Exclude<VerifyFailure, 'invalid_proof' | 'unsupported_proof'>
      retryAfterMs?: number
    }

export interface VerifierOptions {
  lookupTransfer(hash: `0x${string}`): Promise<ChainTransferResult>
  verified: ReturnType<typeof createVerifiedTransferCache>
  maxProofAgeMs: number
  now?: () => number
}

const counters = {
  cacheOk: verifications.labels('tx', 'cache', 'ok'),
  cacheTooOld: verifications.labels('tx', 'cache', 'proof_too_old'),
}

export class Verifier {
  private readonly inflight = new Map<string, Promise<VerifyResult>>()
  private readonly now: () => number

  constructor(private readonly options: VerifierOptions) {
    this.now = options.now ?? Date.now
  }

  /** A value when the answer is known now (cache hit, bad header); a promise when the chain must be asked. */
  verify(proof: Proof): VerifyResult | Promise<VerifyResult> {
    if (proof.kind === 'invalid') return { ok: false, reason: 'invalid_proof', detail: proof.detail }
    if (proof.kind === 'x402') {
      return {
        ok: false,
        reason: 'unsupported_proof',
        detail: 'x402 authorization payloads are not accepted yet; pay with a transaction hash',
      }
    }
    const cached = this.options.verified.get(proof.hash)
    if (cached) {
      cacheCounters.transferHit.inc()
      return this.fromTransfer(cached, proof.key, 'cache')
    }
    cacheCounters.transferMiss.inc()
    let pending = this.inflight.get(proof.hash)
    if (!pending) {
      pending = this.options.lookupTransfer(proof.hash).then(
        (result) => {
          this.inflight.delete(proof.hash)
          if (!result.ok) {
            verifications.labels('tx', 'rpc', result.reason).inc()
            return { ok: false as const, reason: result.reason, retryAfterMs: result.retryAfterMs }
          }
          this.options.verified.set(proof.hash, result.transfer)
          return this.fromTransfer(result.transfer, proof.key, 'rpc')
        },
        () => {
          this.inflight.delete(proof.hash)
          verifications.labels('tx', 'rpc', 'rpc_unavailable').inc()
          return { ok: false as const, reason: 'rpc_unavailable' as const }
        },
      )
      this.inflight.set(proof.hash, pending)
    }
    return pending
  }

  private fromTransfer(t: VerifiedTransfer, proofKey: string, source: 'cache' | 'rpc'): VerifyResult {
    if (this.now() - t.timestampMs > this.options.maxProofAgeMs) {
      if (source === 'cache') counters.cacheTooOld.inc()
      else verifications.labels('tx', 'rpc', 'proof_too_old').inc()
      return { ok: false, reason: 'proof_too_old' }
    }
    if (source === 'cache') counters.cacheOk.inc()
    else verifications.labels('tx', 'rpc', 'ok').inc()
    return { ok: true, proofKey, kind: 'tx', payer: t.from, valueAtomic: t.value, transaction: t.hash }
  }
}
