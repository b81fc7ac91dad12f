// The x402 `payment-identifier` extension as a stage around a paid call (paid-answers.ts keeps the answers):
// a payment that carries an id reserves it once verified, before its claim; its answer is recorded as it
// streams past (bounded) and kept for a retry with the same id and payment; a reservation the call does not
// use is given back. Only a call whose payment carries an id, where the extension is kept, builds one.
import type { ErrorCode, ErrorDetails } from '../../errors.ts'
import type { Payment, Verdict } from '../../schemes/scheme.ts'
import type { Proof } from '../../wire/proof.ts'
import { type FlatHeaders, RETRY_AFTER_1 } from '../answer-writer.ts'
import { type PaidAnswers, paymentIdentifier, type Reservation } from '../paid-answers.ts'
import type { ProxyOutcome } from '../proxy.ts'
import type { AnswerStage } from './answer-stages.ts'

/** Headers worth replaying (the content's own); framing and per-connection headers are set again. */
const KEPT_HEADERS = new Set([
  'content-type',
  'content-encoding',
  'content-language',
  'cache-control',
  'etag',
])

/** What the stage asks of the call it is around (metered.ts). */
export interface IdentifiedCall {
  readonly abort: { readonly aborted: boolean }
  claim(payment: Payment): void
  finishAborted(): void
  respond402(reason: string, retryAfterMs?: number, requiredHeader?: string): void
  respondReplay(status: number, headers: Array<[string, string]>, body: Buffer | null): void
  respondError(code: ErrorCode, details?: ErrorDetails, headers?: FlatHeaders): void
  respondUnavailable(message: string, reason: string, err?: unknown): void
}

export class PaymentIdentifier implements AnswerStage {
  /** The id is this call's own: its answer is kept (the proxy reads on if the client leaves). */
  keeps = false
  /** Reserved and not closed yet: closed once, kept, lost or given back. */
  private open = false
  private status = 0
  /** The upstream's relayed content headers plus tollgate's receipt, as the client got them. */
  private readonly headers: Array<[string, string]> = []
  private chunks: Buffer[] = []
  private bytes = 0
  private over = false
  /** The answer's end went through the stages (a sized answer ended by the proxy's tryEnd does not). */
  private ended = false

  private constructor(
    private readonly store: PaidAnswers,
    private readonly query: { id: string; digest: string; endpointId: string },
  ) {}

  /** The id a payment carries; null when it carries none or the extension is off (nothing built then). */
  static of(store: PaidAnswers | undefined, proof: Proof, endpointId: string): PaymentIdentifier | null {
    if (store === undefined) return null
    const pid = paymentIdentifier(proof)
    return pid === null ? null : new PaymentIdentifier(store, { ...pid, endpointId })
  }

  /** The payment verified: the id becomes this call's own before the claim, or what it holds is answered. */
  reserveThenClaim(call: IdentifiedCall, payment: Payment): void {
    this.store.reserve(this.query).then(
      (r) => {
        if (r.kind === 'go') this.keeps = this.open = true
        if (r.kind === 'go' && !call.abort.aborted) return call.claim(payment)
        // Not claimed: the payment stays what it was (the kept answer, or another payment, holds the id).
        payment.drop()
        if (call.abort.aborted) return call.finishAborted()
        this.answer(call, r)
      },
      (err) => {
        payment.drop()
        const message = 'the payment identifier could not be recorded; retry shortly'
        call.respondUnavailable(message, 'paid_answer_failed', err)
      },
    )
  }

  /** The payment was refused as already used: the retry of a call whose answer was kept? */
  replayOrRefuse(call: IdentifiedCall, refused: Extract<Verdict, { ok: false }>): void {
    this.store.lookup(this.query).then(
      (r) => {
        if (call.abort.aborted) return call.finishAborted()
        if (r === null) return call.respond402(refused.reason, refused.retryAfterMs, refused.requiredHeader)
        this.answer(call, r)
      },
      (err) => {
        const message = 'the payment identifier could not be looked up; retry shortly'
        call.respondUnavailable(message, 'paid_answer_failed', err)
      },
    )
  }

  /** What the id holds, answered (never 'go' here). */
  private answer(call: IdentifiedCall, r: Reservation): void {
    switch (r.kind) {
      case 'go':
        return call.respondError('invalid_state')
      case 'replay':
        return call.respondReplay(r.answer.status ?? 200, r.answer.headers ?? [], r.answer.body)
      case 'conflict':
        return call.respondError('idempotency_key_reused', {
          message: 'this payment-identifier was used with another payment (or another endpoint)',
        })
      case 'in_progress':
        return call.respondError('payment_in_progress', undefined, RETRY_AFTER_1)
      case 'not_kept':
        return call.respondError('invalid_state', {
          message:
            r.why === 'too_large'
              ? 'this payment was used once and its answer was over the size kept for retries: it is not sent again, and not charged again'
              : 'this payment was used once and its answer did not complete: it is not sent again, and not charged again',
        })
    }
  }

  /** The head as the client gets it: the upstream's content headers and the receipt. */
  head(status: number, raw: Buffer[], receipt: [string, string] | null): void {
    this.status = status
    for (let i = 0; i + 1 < raw.length; i += 2) {
      const name = raw[i]!.toString('latin1').toLowerCase()
      if (KEPT_HEADERS.has(name)) this.headers.push([name, raw[i + 1]!.toString('latin1')])
    }
    if (receipt !== null) this.headers.push(receipt)
  }

  onData(chunk: Buffer): Buffer {
    if (this.over) return chunk
    this.bytes += chunk.length
    if (this.bytes > this.store.settings.maxAnswerBytes) {
      this.over = true
      this.chunks = []
    } else this.chunks.push(Buffer.from(chunk)) // copied: the proxy reuses the buffer it handed over
    return chunk
  }

  onEnd(): null {
    this.ended = true
    return null
  }

  /** The whole answer of a served call is kept; otherwise the id says why not. */
  onDone(outcome: ProxyOutcome, captured: boolean, released: boolean): void {
    if (!this.open) return
    this.open = false
    const id = this.query.id
    if (released) return this.store.close(id, 'released')
    const complete = outcome.kind === 'responded' || (outcome.kind === 'client_aborted' && this.ended)
    if (!captured || !complete) return this.store.close(id, 'lost')
    this.store.store(id, this.status, this.headers, this.over ? null : Buffer.concat(this.chunks))
  }

  /** Answered without forwarding (refused, failed, or the client left first): the id is free for a retry. */
  release(): void {
    if (!this.open) return
    this.open = false
    this.store.close(this.query.id, 'released')
  }
}
