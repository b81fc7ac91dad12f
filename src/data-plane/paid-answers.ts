// The x402 `payment-identifier` extension on the hot path. A v2 payment may carry a client-chosen id
// (extensions["payment-identifier"].info.id, as @x402/extensions appends it); such a call's answer is kept
// (status, headers, body, bounded) so that a retry with the same id and the same payment, after the first
// answer was lost, gets it again instead of "proof already used": paid once, delivered twice, charged once.
// The same id with another payment is refused (409). Requests without an id never reach this file.
import { createHash } from 'node:crypto'
import { Grouped } from '../db/grouped.ts'
import {
  closePaidAnswer,
  livePaidAnswerBytes,
  type PaidAnswer,
  type PaidAnswerReserve,
  type PaidAnswerStore,
  type ReserveOutcome,
  readPaidAnswer,
  reservePaidAnswers,
  storePaidAnswers,
} from '../db/paid-answers.ts'
import type { Sql } from '../db/sql.ts'
import type { Logger } from '../observability/logger.ts'
import { PAYMENT_IDENTIFIER } from '../wire/challenge.ts'
import type { Proof } from '../wire/proof.ts'

const ID_PATTERN = /^[A-Za-z0-9_-]{16,128}$/

/** The id a v2 payload carries and the digest of the payment it names; null when it carries none. */
export function paymentIdentifier(proof: Proof): { id: string; digest: string } | null {
  if (proof.kind !== 'x402' || proof.version !== 2) return null
  const p = proof.payload as { extensions?: Record<string, { info?: { id?: unknown } }>; payload?: unknown }
  const id = p.extensions?.[PAYMENT_IDENTIFIER]?.info?.id
  if (typeof id !== 'string' || !ID_PATTERN.test(id)) return null
  // "The same payment": the scheme payload itself (signature and authorization), not the echoed terms.
  const digest = createHash('sha256')
    .update(JSON.stringify(p.payload ?? null))
    .digest('hex')
  return { id, digest }
}

export interface PaidAnswerSettings {
  ttlMs: number
  maxAnswerBytes: number
  maxTotalBytes: number
}

/** What a request with an identifier is to do before its payment is verified. */
export type Reservation =
  | { kind: 'go' }
  | { kind: 'replay'; answer: PaidAnswer }
  | { kind: 'conflict' }
  | { kind: 'in_progress' }
  | { kind: 'not_kept'; why: 'too_large' | 'lost' }

/** How often the budget of kept answers is read again from the database. */
const LIVE_READ_MS = 1_000
const DONE = Promise.resolve()
/**
 * At most this many reservations, or answers kept, a statement. Each was a statement of its own (two a call:
 * 343 µs of tollgate and 440 of PostgreSQL a call in the feature bench); the calls in flight together now
 * share one (db/grouped.ts).
 */
const GROUP_MAX = 64

export class PaidAnswers {
  private readonly live: { bytes: number; readAtMs: number; reading: Promise<void> | null } = {
    bytes: 0,
    readAtMs: Number.NEGATIVE_INFINITY,
    reading: null,
  }

  private readonly reserves: Grouped<PaidAnswerReserve, ReserveOutcome>
  private readonly stores: Grouped<PaidAnswerStore, undefined>

  constructor(
    private readonly sql: Sql,
    private readonly logger: Logger,
    readonly settings: PaidAnswerSettings,
  ) {
    this.reserves = new Grouped((qs) => reservePaidAnswers(sql, qs), GROUP_MAX)
    this.stores = new Grouped((qs) => storePaidAnswers(sql, qs), GROUP_MAX)
  }

  async reserve(q: { id: string; digest: string; endpointId: string }): Promise<Reservation> {
    const r = await this.reserves.submit({
      paymentId: q.id,
      digest: q.digest,
      endpointId: q.endpointId,
      ttlMs: this.settings.ttlMs,
    })
    return r.reserved ? { kind: 'go' } : decide(r.answer, q)
  }

  /** A retry whose payment was found spent after all: what the id holds now, if anything. */
  async lookup(q: { id: string; digest: string; endpointId: string }): Promise<Reservation | null> {
    const answer = await readPaidAnswer(this.sql, q.id)
    return answer === null ? null : decide(answer, q)
  }

  /** Fire and forget: the answer is already on its way; a failure only means a retry is not served again. */
  store(id: string, status: number, headers: Array<[string, string]>, body: Buffer | null): void {
    const p =
      body === null
        ? closePaidAnswer(this.sql, { paymentId: id, outcome: 'not_stored', status })
        : this.readLive().then(() => {
            // Counted at once, so this process's next answers see it before the next read.
            const keep = this.live.bytes + body.length <= this.settings.maxTotalBytes
            if (keep) this.live.bytes += body.length
            return this.stores.submit({ paymentId: id, status, headers, body, keep })
          })
    p.catch((err) => this.logger.warn('paid answer not kept', { err }))
  }

  /**
   * Reads the bytes kept on every instance into `live`, at most once every LIVE_READ_MS (`live` adds what this
   * process keeps in between). Summing the table for every answer cost the database a scan of every live answer per call
   * (a TTL's worth: minutes of calls) and grew with the traffic; once a second, the budget may be passed by
   * what the other instances keep within that second, a bound on storage, not on money.
   */
  private readLive(): Promise<void> {
    const live = this.live
    if (Date.now() - live.readAtMs < LIVE_READ_MS) return DONE
    live.reading ??= livePaidAnswerBytes(this.sql)
      .then((bytes) => {
        live.bytes = bytes
        live.readAtMs = Date.now()
      })
      .finally(() => {
        live.reading = null
      })
    return live.reading
  }

  close(id: string, outcome: 'released' | 'lost'): void {
    closePaidAnswer(this.sql, { paymentId: id, outcome }).catch((err) =>
      this.logger.warn('paid answer reservation not closed', { err }),
    )
  }
}

function decide(a: PaidAnswer, q: { digest: string; endpointId: string }): Reservation {
  if (a.payment_digest !== q.digest || a.endpoint_id !== q.endpointId) return { kind: 'conflict' }
  switch (a.state) {
    case 'stored':
      return { kind: 'replay', answer: a }
    case 'pending':
      return { kind: 'in_progress' }
    case 'not_stored':
      return { kind: 'not_kept', why: 'too_large' }
    case 'lost':
      return { kind: 'not_kept', why: 'lost' }
  }
}
