// The one batch writer of the hot path: claims (awaited by their request) and captures (the caller already
// has its answer) are group-committed together, one statement and one commit per batch, so a paid call
// costs one durable write under load. Captures are never dropped while the process lives: a failed batch
// puts them back and they are retried with backoff until written; stop() drains them.
//
// A claim waits at most claimTimeoutMs: behind a batch stuck on a frozen or locked database, the request
// is answered 503 (ClaimTimeoutError) instead of waiting with it. A claim abandoned before it was sent is
// never written; one abandoned in flight that then wins is released at once (nothing was forwarded), so
// the payer may present the same proof again. So is one whose statement failed without an answer (the
// connection lost around the commit) but had committed: found by its attempt token once the database
// answers again, before this writer's next statement (a retry of that proof here then wins at once), and
// tried again at most a second apart meanwhile (another instance's retry is answered busy until then, see
// DOUBT_GRACE_MS in claims.ts).
import { randomBytes } from 'node:crypto'
import type { Sql } from '../db/sql.ts'
import {
  type Capture,
  type ClaimRequest,
  type ClaimResult,
  claimAndCapture,
  DOUBT_GRACE_MS,
  releaseClaim,
  releaseUnacknowledgedClaims,
} from './claims.ts'

/** Attempt tokens: this process's random prefix and a counter (unique without a random read per claim). */
const TOKEN_PREFIX = randomBytes(6).toString('hex')
let tokenCounter = 0
/** Unanswered claim statements remembered for release; past it the oldest is forgotten (in doubt, refunded). */
const UNACKNOWLEDGED_MAX = 10_000
/** The longest wait between two tries of a write the database refused (a release, a capture). */
const RETRY_MAX_MS = 1_000

interface PendingClaim {
  req: ClaimRequest
  resolve(result: ClaimResult): void
  reject(err: unknown): void
  /** Its request was already answered 503: the outcome has nobody to go to. */
  abandoned: boolean
  timer: NodeJS.Timeout | null
}

/** A claim's write did not finish within the writer's claimTimeoutMs (the database is stalled or locked). */
export class ClaimTimeoutError extends Error {
  // isDatabaseUnavailable knows it: answered 503 with Retry-After wherever it surfaces.
  readonly code = 'CLAIM_TIMEOUT'
  constructor(ms: number) {
    super(`the claim was not written within ${ms} ms (database stalled)`)
    this.name = 'ClaimTimeoutError'
  }
}

export interface BatchWriterOptions {
  batchMax: number
  /** Round trips allowed in flight at once (≤ pool size); 1 makes the best group commit. */
  concurrency: number
  /** How long a capture with no claim to ride along waits before it is written alone. */
  flushIntervalMs: number
  /** A claim not written within this is rejected (ClaimTimeoutError, answered 503); default none. */
  claimTimeoutMs?: number
  /** An abandoned claim won in flight was released (ok) or could not be (it stays held, then in doubt). */
  onAbandonedRelease?(ok: boolean, err?: unknown): void
  /** Backoff of capture retries after a failed batch: doubles from the first to the last (1 s). */
  retryMinMs?: number
  retryMaxMs?: number
  /** How long an unreleased claim is answered busy past its lease (DOUBT_GRACE_MS; tests shorten it). */
  doubtGraceMs?: number
  onBatch?(claims: number, captures: number): void
  /** A batch's statement ended (written or failed), `ms` after it was sent. */
  onWritten?(ms: number): void
  /** A batch failed; `captures` of them are queued again. */
  onError?(err: unknown, captures: number): void
  /** Captures waiting (queued or being written), after every change. */
  onQueue?(waiting: number): void
  /** Captures whose claim was no longer 'claimed' (already captured by an earlier, unacknowledged write). */
  onNotApplied?(captures: Capture[]): void
  /** Claims of failed statements that had committed all the same, released now (`released` of `checked`). */
  onUnacknowledgedReleased?(released: number, checked: number): void
}

export class BatchWriter {
  private claims: PendingClaim[] = []
  private captures: Capture[] = []
  private writing = 0
  private inFlight = 0
  private retryAtMs = 0
  private failures = 0
  private timer: NodeJS.Timeout | null = null
  private idle: Array<() => void> = []
  /** Attempts whose claim statement failed without an answer: released once the database answers. */
  private unacknowledged: Array<{ proofKey: string; token: string }> = []
  /** The release of unacknowledged attempts being written, if one is. */
  private releasing: Promise<void> | null = null
  private releaseFailures = 0
  /** The database's last absence this writer saw: since its first failed write, up at the next answer. */
  private outage: { sinceMs: number; upAtMs: number | null } | null = null

  constructor(
    private readonly sql: Sql,
    private readonly options: BatchWriterOptions,
  ) {}

  /** Claims a proof; resolves when its batch committed. Rejects when the batch failed (answer 503). */
  claim(req: ClaimRequest): Promise<ClaimResult> {
    return new Promise((resolve, reject) => {
      const pending: PendingClaim = { req, resolve, reject, abandoned: false, timer: null }
      const timeoutMs = this.options.claimTimeoutMs
      if (timeoutMs !== undefined && timeoutMs > 0) {
        pending.timer = setTimeout(() => {
          pending.abandoned = true
          // Not sent yet: it never will be.
          const queued = this.claims.indexOf(pending)
          if (queued >= 0) this.claims.splice(queued, 1)
          reject(new ClaimTimeoutError(timeoutMs))
        }, timeoutMs)
        pending.timer.unref()
      }
      this.claims.push(pending)
      if (this.inFlight < this.options.concurrency) this.flush()
    })
  }

  /** Queues the capture of a served call: written with the next claims, or alone after flushIntervalMs. */
  capture(c: Capture): void {
    this.captures.push(c)
    this.options.onQueue?.(this.captures.length + this.writing)
    // A capture someone waits for (settle before answer) is written now, not after flushIntervalMs.
    const urgent = c.onWritten !== undefined || this.captures.length >= this.options.batchMax
    if (urgent && this.inFlight < this.options.concurrency) {
      this.flush()
      return
    }
    this.schedule(this.options.flushIntervalMs)
  }

  /** Captures waiting (queued or being written). */
  get pendingCaptures(): number {
    return this.captures.length + this.writing
  }

  /**
   * Resolves when everything queued so far is written; with a deadline, resolves with the number of
   * captures still unwritten when it passes (the database is down at stop: those calls will be refunded).
   */
  async drain(timeoutMs = Number.POSITIVE_INFINITY): Promise<number> {
    const deadline = Date.now() + timeoutMs
    while (
      this.captures.length > 0 ||
      this.inFlight > 0 ||
      this.claims.length > 0 ||
      this.unacknowledged.length > 0 ||
      this.releasing !== null
    ) {
      if (Date.now() >= deadline) return this.pendingCaptures
      if (this.inFlight === 0) {
        // Retry now rather than after the backoff: we are stopping.
        this.retryAtMs = 0
        this.flush()
      }
      this.releaseInBackground()
      await new Promise<void>((r) => {
        this.idle.push(r)
        if (Number.isFinite(deadline))
          setTimeout(r, Math.max(10, Math.min(200, deadline - Date.now()))).unref()
      })
    }
    return 0
  }

  private schedule(delayMs: number): void {
    if (this.timer || this.inFlight >= this.options.concurrency) return
    this.timer = setTimeout(() => {
      this.timer = null
      this.flush()
    }, delayMs)
    this.timer.unref()
  }

  private flush(): void {
    const now = Date.now()
    const claims = this.claims.splice(0, this.options.batchMax)
    const captures = now >= this.retryAtMs ? this.captures.splice(0, this.options.batchMax) : []
    if (claims.length === 0 && captures.length === 0) {
      if (this.captures.length > 0) this.schedule(this.retryAtMs - now)
      return
    }
    if (this.timer) {
      clearTimeout(this.timer)
      this.timer = null
    }
    // From here a delivery can no longer ride with these captures (Capture.delivery).
    for (const c of captures) c.sent = true
    this.inFlight++
    this.writing += captures.length
    this.options.onBatch?.(claims.length, captures.length)
    const sentAt = performance.now()
    this.write(claims, captures).finally(() => {
      this.options.onWritten?.(performance.now() - sentAt)
      this.inFlight--
      this.writing -= captures.length
      this.options.onQueue?.(this.pendingCaptures)
      if (this.claims.length > 0) this.flush()
      else if (this.captures.length > 0) this.schedule(Math.max(0, this.retryAtMs - Date.now()))
      for (const wake of this.idle.splice(0)) wake()
    })
  }

  private async write(batch: PendingClaim[], captures: Capture[]): Promise<void> {
    // One statement may not touch a row twice: the same proof twice among the claims is 'busy' (the first
    // holds it), and a claim for a proof being captured here is spent already.
    const capturing = new Set(captures.map((c) => c.proofKey))
    const seen = new Set<string>()
    const rows: PendingClaim[] = []
    for (const p of batch) {
      if (capturing.has(p.req.proofKey)) this.settle(p, { outcome: 'used' })
      else if (seen.has(p.req.proofKey)) this.settle(p, { outcome: 'busy' })
      else {
        seen.add(p.req.proofKey)
        p.req.attemptToken = `${TOKEN_PREFIX}${(tokenCounter++).toString(36)}`
        rows.push(p)
      }
    }
    try {
      // Attempts whose statement went unanswered are released first: a retry of one of those proofs (maybe in
      // this very batch) wins instead of meeting its own forgotten claim.
      if (this.unacknowledged.length > 0 || this.releasing !== null) await this.releaseUnacknowledged()
      const result = await claimAndCapture(
        this.sql,
        { claims: rows.map((p) => p.req), captures },
        this.doubtGraceMs(),
      )
      this.answered()
      for (let i = 0; i < rows.length; i++) this.settle(rows[i]!, result.claims[i]!)
      this.failures = 0
      this.retryAtMs = 0
      for (const c of captures) c.onWritten?.(result.captured.has(c.proofKey))
      if (result.captured.size < captures.length) {
        this.options.onNotApplied?.(captures.filter((c) => !result.captured.has(c.proofKey)))
      }
    } catch (err) {
      this.failed()
      for (const p of rows) {
        if (p.timer) clearTimeout(p.timer)
        p.reject(err)
        // Answered 503, forwarded nothing; but the statement may have committed before its answer was lost
        // (or was never sent, the release before it having failed: releasing an unwritten token does nothing).
        this.unacknowledged.push({ proofKey: p.req.proofKey, token: p.req.attemptToken! })
      }
      if (rows.length > 0) {
        if (this.unacknowledged.length > UNACKNOWLEDGED_MAX)
          this.unacknowledged.splice(0, this.unacknowledged.length - UNACKNOWLEDGED_MAX)
        this.retryReleases()
      }
      if (captures.length > 0) {
        // Back to the front, in order: retried (with backoff) until written. Idempotent: a capture applies
        // only to a claim still 'claimed', so a write that committed but whose answer was lost is harmless.
        this.captures.unshift(...captures)
        this.failures++
        const min = this.options.retryMinMs ?? 100
        const max = this.options.retryMaxMs ?? RETRY_MAX_MS
        this.retryAtMs = Date.now() + Math.min(max, min * 2 ** (this.failures - 1))
      }
      this.options.onError?.(err, captures.length)
    }
  }

  /**
   * Releases the attempts of failed claim statements that committed all the same (a retry of the proof can
   * then win at once), all of them, joining a release under way; rejects while the database is away (tried
   * again at most RETRY_MAX_MS later, by retryReleases).
   */
  private releaseUnacknowledged(): Promise<void> {
    if (this.releasing !== null) return this.releasing
    if (this.unacknowledged.length === 0) return Promise.resolve()
    const batch = this.unacknowledged.splice(0, this.options.batchMax)
    const releasing = releaseUnacknowledgedClaims(this.sql, batch).then(
      (released) => {
        this.answered()
        this.releasing = null
        this.releaseFailures = 0
        this.options.onUnacknowledgedReleased?.(released, batch.length)
        for (const wake of this.idle.splice(0)) wake()
        return this.releaseUnacknowledged()
      },
      (err: unknown) => {
        this.failed()
        this.releasing = null
        this.unacknowledged.unshift(...batch)
        this.releaseFailures++
        this.retryReleases()
        throw err
      },
    )
    this.releasing = releasing
    return releasing
  }

  /**
   * A write failed: the database is away (since the first failure of a run, or of the outage before it when
   * that one is still within its grace).
   */
  private failed(): void {
    const now = Date.now()
    const o = this.outage
    const grace = this.options.doubtGraceMs ?? DOUBT_GRACE_MS
    if (o === null || (o.upAtMs !== null && now - o.upAtMs > grace))
      this.outage = { sinceMs: now, upAtMs: null }
    else o.upAtMs = null
  }

  /** A write was answered: an outage seen is over (it still widens the doubt grace for a while). */
  private answered(): void {
    if (this.outage !== null && this.outage.upAtMs === null) this.outage.upAtMs = Date.now()
  }

  /**
   * How long past its lease an unreleased claim is answered busy (DOUBT_GRACE_MS): after an outage this writer
   * saw, also every lease that ran out while the database was away (or just before), until the grace has
   * passed since it came back. The holders needed the database to write their outcomes.
   */
  private doubtGraceMs(): number {
    const grace = this.options.doubtGraceMs ?? DOUBT_GRACE_MS
    const o = this.outage
    if (o === null) return grace
    const now = Date.now()
    if (o.upAtMs !== null && now - o.upAtMs > grace) {
      this.outage = null
      return grace
    }
    return now - o.sinceMs + grace
  }

  /** releaseUnacknowledged with nobody waiting: a failure is retried, not reported. */
  private releaseInBackground(): void {
    this.releaseUnacknowledged().catch(() => {})
  }

  private retryReleases(): void {
    const min = this.options.retryMinMs ?? 100
    const max = Math.min(this.options.retryMaxMs ?? RETRY_MAX_MS, RETRY_MAX_MS)
    setTimeout(() => this.releaseInBackground(), Math.min(max, min * 2 ** this.releaseFailures)).unref()
  }

  /** A claim's outcome to its request; one abandoned meanwhile and won is released (never forwarded). */
  private settle(p: PendingClaim, result: ClaimResult): void {
    if (p.timer) clearTimeout(p.timer)
    if (!p.abandoned) return p.resolve(result)
    if (result.outcome !== 'won') return
    releaseClaim(this.sql, { proofKey: p.req.proofKey, attempt: result.attempt }).then(
      (r) => this.options.onAbandonedRelease?.(r.ok),
      (err) => this.options.onAbandonedRelease?.(false, err),
    )
  }
}
