// The one proof verifier, shared by metered calls and checkout. Answers from the verified-transfer cache
// when it can (synchronously), else asks the chain once per hash however many requests wait.
// It proves what was paid and by whom; the caller decides whether that is enough (price, amount due).

import { LRUCache } from 'lru-cache'
import { isErc6492Signature } from 'viem'
import type { AuthorizationFailure, TransferAuthorization } from '../chain/authorization.ts'
import { authorizationProofKey, verifyTransferAuthorization } from '../chain/authorization.ts'
import type { AuthorizationChainCheck, BalanceRead } from '../chain/check-authorization.ts'
import { storedAuthorization } from '../chain/settle.ts'
import type { SimulationCheck } from '../chain/simulate-authorization.ts'
import type { SmartWalletCheck, SmartWalletVerifier } from '../chain/verify-smart-wallet.ts'
import type { TransferFailure } from '../chain/verify-transfer.ts'
import { verifications } from '../observability/metrics.ts'
import { ConcurrencyLimiter } from '../rate-limit.ts'
import type { Proof } from '../wire/proof.ts'
import { type ExactPayment, parseExactPayment } from '../wire/x402-payload.ts'
import type { VerifiedTransfer } from './caches.ts'
import { cacheCounters, type createVerifiedTransferCache } from './caches.ts'

/** Every reason a proof is refused: the chain module's, plus the ones decided here. Wire values as they are. */
export type VerifyFailure =
  | 'invalid_proof'
  | 'unsupported_proof'
  | 'wrong_network'
  /** Not a 402: the client already has as many chain look-ups in flight as it may (answered 429). */
  | 'too_many_lookups'
  | TransferFailure
  | AuthorizationFailure
  | Extract<AuthorizationChainCheck, { ok: false }>['reason']
  | Extract<SmartWalletCheck, { ok: false }>['reason']
  | Extract<SimulationCheck, { ok: false }>['reason']

export type VerifyResult =
  | {
      ok: true
      proofKey: string
      kind: 'tx'
      payer: `0x${string}`
      valueAtomic: bigint
      transaction: `0x${string}`
      /** The transaction's block time: stored with its claim, which the retention horizon compares. */
      timestampMs: number
    }
  | {
      ok: true
      proofKey: string
      kind: 'eip3009'
      /** The x402 version the payer spoke: its receipt is answered in the same version. */
      x402Version: 1 | 2
      payer: `0x${string}`
      valueAtomic: bigint
      /** Known once the authorization is settled on chain (after the call). */
      transaction: null
      /** Kept with the claim: the settlement batcher submits it. */
      authorization: SignedAuthorization
      /** The payer's balance as read (or reused), for the claim's reservation; null where none was read. */
      balance: BalanceRead | null
    }
  | {
      ok: false
      reason: VerifyFailure
      retryAfterMs?: number
      detail?: string
      /** proof_already_used of an authorization signed by its payer (its nonce used on chain). */
      spent?: { proofKey: string; payer: `0x${string}` }
    }

/** An authorization as stored with its claim (JSON: amounts as strings). */
export interface SignedAuthorization {
  signature: `0x${string}`
  from: `0x${string}`
  to: `0x${string}`
  value: string
  validAfter: string
  validBefore: string
  nonce: `0x${string}`
}

/** What the chain module answers for one transaction hash. */
export type ChainTransferResult =
  | { ok: true; transfer: VerifiedTransfer }
  | {
      ok: false
      reason: TransferFailure
      retryAfterMs?: number
      detail?: string
    }

export interface VerifierOptions {
  lookupTransfer(hash: `0x${string}`): Promise<ChainTransferResult>
  /** Nonce unused and funds present, on chain. */
  checkAuthorization(q: {
    from: `0x${string}`
    nonce: `0x${string}`
    value: bigint
  }): Promise<AuthorizationChainCheck>
  /** Drops a payer's reused balance read (its claim was refused for funds). */
  forgetBalance?(payer: `0x${string}`): void
  /** The wallet's own check (EIP-1271 / ERC-6492), asked only when ecrecover does not give `from`. */
  verifySmartWallet?: SmartWalletVerifier
  /** A dry run of the settlement, for authorizations of at least `simulateFromAtomic`. */
  simulate?(q: { authorization: TransferAuthorization; signature: `0x${string}` }): Promise<SimulationCheck>
  /** null: never simulate (x402.simulate_min_price unset). */
  simulateFromAtomic?: bigint | null
  /** What an x402 authorization must be bound to. */
  x402: {
    networks: readonly string[]
    chainId: number
    treasury: `0x${string}`
    usdc: { address: `0x${string}`; name: string; version: string }
  }
  verified: ReturnType<typeof createVerifiedTransferCache>
  maxProofAgeMs: number
  /**
   * Hashes the chain did not know within the verify wait are answered transaction_not_found from memory
   * for this long: a repeated typo (or a flood of one junk hash) costs no RPC. 0: not remembered.
   */
  notFoundTtlMs?: number
  /** Chain look-ups one client may have in flight (a cache hit or joining one in flight is free); 0: no bound. */
  lookupsPerClient?: number
  /**
   * The stored retention horizons (src/data-plane/proof-horizons.ts): a proof dated before one may have
   * lost its claim row to the prune job, so it is refused whatever maxProofAgeMs says now.
   */
  horizons?: { refusedBeforeMs(kind: 'tx' | 'eip3009'): number }
  now?: () => number
}

const counters = {
  cacheOk: verifications.labels('tx', 'cache', 'ok'),
  cacheTooOld: verifications.labels('tx', 'cache', 'proof_too_old'),
}

const NOT_FOUND: VerifyResult = Object.freeze({
  ok: false as const,
  reason: 'transaction_not_found' as const,
  detail: 'the chain did not know this transaction hash; check the hash and the network',
})
const TOO_MANY_LOOKUPS: VerifyResult = Object.freeze({
  ok: false as const,
  reason: 'too_many_lookups' as const,
})

export class Verifier {
  private readonly inflight = new Map<string, Promise<VerifyResult>>()
  private readonly now: () => number
  private readonly notFound: LRUCache<string, true> | null
  private readonly lookups: ConcurrencyLimiter | null

  constructor(private readonly options: VerifierOptions) {
    this.now = options.now ?? Date.now
    const ttl = options.notFoundTtlMs ?? 0
    this.notFound = ttl > 0 ? new LRUCache({ max: 100_000, ttl }) : null
    const perClient = options.lookupsPerClient ?? 0
    this.lookups = perClient > 0 ? new ConcurrencyLimiter(perClient) : null
  }

  /**
   * A value when the answer is known now (cache hit, bad header); a promise when the chain must be asked.
   * `client` (its rate-limit key): a new chain look-up takes one of its slots until it settles.
   */
  /** The payer's next authorization reads its balance again (a top-up since shows). */
  forgetBalance(payer: `0x${string}`): void {
    this.options.forgetBalance?.(payer)
  }

  verify(proof: Proof, client = ''): VerifyResult | Promise<VerifyResult> {
    if (proof.kind === 'invalid') return { ok: false, reason: 'invalid_proof', detail: proof.detail }
    if (proof.kind === 'x402') return this.verifyAuthorization(proof.payload, client)
    // An MPP credential is read by its scheme (src/schemes/mpp-charge/), which hands its authorization here as
    // an x402 payload; one reaching the verifier as it is (checkout) is not a proof it reads.
    if (proof.kind === 'mpp')
      return { ok: false, reason: 'unsupported_proof', detail: 'an MPP credential is not accepted here' }
    const cached = this.options.verified.get(proof.hash)
    if (cached) {
      cacheCounters.transferHit.inc()
      return this.fromTransfer(cached, proof.key, 'cache')
    }
    cacheCounters.transferMiss.inc()
    if (this.notFound?.has(proof.hash)) {
      verifications.labels('tx', 'cache', 'transaction_not_found').inc()
      return NOT_FOUND
    }
    let pending = this.inflight.get(proof.hash)
    if (!pending) {
      // No client named (checkout, tests): not bounded here.
      const lookups = client === '' ? null : this.lookups
      if (lookups !== null && !lookups.acquire(client)) return TOO_MANY_LOOKUPS
      pending = this.options.lookupTransfer(proof.hash).then(
        (result) => {
          this.inflight.delete(proof.hash)
          lookups?.release(client)
          if (!result.ok) {
            if (result.reason === 'transaction_not_found') this.notFound?.set(proof.hash, true)
            verifications.labels('tx', 'rpc', result.reason).inc()
            return {
              ok: false as const,
              reason: result.reason,
              retryAfterMs: result.retryAfterMs,
              detail: result.detail,
            }
          }
          this.options.verified.set(proof.hash, result.transfer)
          return this.fromTransfer(result.transfer, proof.key, 'rpc')
        },
        () => {
          this.inflight.delete(proof.hash)
          lookups?.release(client)
          verifications.labels('tx', 'rpc', 'rpc_unavailable').inc()
          return { ok: false as const, reason: 'rpc_unavailable' as const }
        },
      )
      this.inflight.set(proof.hash, pending)
    }
    return pending
  }

  /**
   * An x402 "exact" payment: an EIP-3009 authorization signed by the payer. Checked locally (scheme,
   * network, signature, recipient, validity window), then on chain (nonce unused, balance), once per
   * authorization however many requests carry it. The claim of its nonce is the caller's next step.
   */
  private verifyAuthorization(payload: unknown, client: string): VerifyResult | Promise<VerifyResult> {
    const payment = parseExactPayment(payload)
    if (!payment)
      return { ok: false, reason: 'invalid_proof', detail: 'not an x402 exact EVM payment payload' }
    if (payment.scheme !== 'exact')
      return { ok: false, reason: 'unsupported_proof', detail: `scheme ${payment.scheme} is not accepted` }
    const { x402 } = this.options
    if (!x402.networks.includes(payment.network)) return { ok: false, reason: 'wrong_network' }
    const a = payment.authorization
    const proofKey = authorizationProofKey({
      chainId: x402.chainId,
      token: x402.usdc.address,
      payer: a.from,
      nonce: a.nonce,
    })
    let pending = this.inflight.get(proofKey)
    if (!pending) {
      // No client named (checkout, tests): not bounded here.
      const lookups = client === '' ? null : this.lookups
      if (lookups !== null && !lookups.acquire(client)) return TOO_MANY_LOOKUPS
      pending = this.checkAuthorization(payment, proofKey).then(
        (r) => {
          this.inflight.delete(proofKey)
          lookups?.release(client)
          verifications.labels('eip3009', 'rpc', r.ok ? 'ok' : r.reason).inc()
          return r
        },
        () => {
          this.inflight.delete(proofKey)
          lookups?.release(client)
          verifications.labels('eip3009', 'rpc', 'rpc_unavailable').inc()
          return { ok: false as const, reason: 'rpc_unavailable' as const }
        },
      )
      this.inflight.set(proofKey, pending)
    }
    return pending
  }

  private async checkAuthorization(payment: ExactPayment, proofKey: string): Promise<VerifyResult> {
    const { x402 } = this.options
    const a: TransferAuthorization = payment.authorization
    // Its claim may have been pruned (validBefore under the stored horizon): expired, whatever this clock says.
    const horizon = this.options.horizons?.refusedBeforeMs('eip3009')
    if (horizon !== undefined && Number(a.validBefore) * 1000 < horizon)
      return { ok: false, reason: 'authorization_expired' }
    const local = await verifyTransferAuthorization({
      usdc: x402.usdc,
      chainId: x402.chainId,
      authorization: a,
      signature: payment.signature,
      payTo: x402.treasury,
      minValue: 1n,
      nowSeconds: BigInt(Math.floor(this.now() / 1000)),
    })
    // invalid_signature comes last in the local checks: the fields are right, only ecrecover disagrees.
    const smartWallet = !local.ok && local.reason === 'invalid_signature' && this.options.verifySmartWallet
    if (!local.ok && !smartWallet) return { ok: false, reason: local.reason }
    const q = { from: a.from, nonce: a.nonce, value: a.value }
    const from = this.options.simulateFromAtomic
    // Not an ERC-6492 wrapper's: the token would be handed the wrapper (the wallet's own check stands for it).
    const simulate =
      from != null && a.value >= from && !isErc6492Signature(payment.signature)
        ? this.options.simulate
        : undefined
    // The chain reads run together: nonce and balance, the wallet's own signature check, the dry run.
    const [onChain, wallet, simulation] = await Promise.all([
      this.options.checkAuthorization(q),
      smartWallet ? smartWallet({ authorization: a, signature: payment.signature }) : null,
      simulate ? simulate({ authorization: a, signature: payment.signature }) : null,
    ])
    if (wallet !== null && !wallet.ok) return { ok: false, reason: wallet.reason }
    // Its nonce used on chain, the signature checked: the authorization is its payer's, spent (by us, if a
    // claim holds its key: a pass purchase retried finds what it bought).
    if (!onChain.ok && onChain.reason === 'proof_already_used')
      return { ok: false, reason: onChain.reason, spent: { proofKey, payer: a.from } }
    if (!onChain.ok) return { ok: false, reason: onChain.reason }
    if (simulation !== null && !simulation.ok) {
      return simulation.reason === 'simulation_failed'
        ? { ok: false, reason: simulation.reason, detail: simulation.detail }
        : { ok: false, reason: simulation.reason }
    }
    // A smart wallet's ERC-6492 wrapper is dropped: settlement hands the wallet its inner signature.
    const signature = wallet !== null ? wallet.signature : payment.signature
    const verified: Extract<VerifyResult, { kind: 'eip3009' }> = {
      ok: true,
      proofKey,
      kind: 'eip3009',
      x402Version: payment.version,
      payer: a.from,
      valueAtomic: a.value,
      transaction: null,
      authorization: storedAuthorization(a, signature),
      balance: onChain.balance,
    }
    return verified
  }

  private fromTransfer(t: VerifiedTransfer, proofKey: string, source: 'cache' | 'rpc'): VerifyResult {
    // Older than the configured age, or than the stored horizon (its claim may have been pruned under an
    // earlier, shorter age): refused either way.
    const horizon = this.options.horizons?.refusedBeforeMs('tx') ?? Number.NEGATIVE_INFINITY
    if (this.now() - t.timestampMs > this.options.maxProofAgeMs || t.timestampMs < horizon) {
      if (source === 'cache') counters.cacheTooOld.inc()
      else verifications.labels('tx', 'rpc', 'proof_too_old').inc()
      return { ok: false, reason: 'proof_too_old' }
    }
    if (source === 'cache') counters.cacheOk.inc()
    else verifications.labels('tx', 'rpc', 'ok').inc()
    return {
      ok: true,
      proofKey,
      kind: 'tx',
      payer: t.from,
      valueAtomic: t.value,
      transaction: t.hash,
      timestampMs: t.timestampMs,
    }
  }
}
