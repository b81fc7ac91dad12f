// The held answer of a call whose charge is known only at its end (usage pricing) and whose payment
// settles before the answer (x402 `upto` on an endpoint with x402_settlement "before_answer"): the head
// waits while the body is read and kept (the proxy's readsWhileHeld), the charge is captured at the
// body's end, its settlement is sent and awaited, and the head then goes out with the receipt that names
// the mined transaction, the body right behind it. Bounded: past maxBytes the head goes out at once with
// the pending receipt and the rest streams (the call is settled after, from the settler all the same).
// A stage of its own beside the meter, the rewriter, the digest and the recorder: it sees only the sizes
// of the bytes on their way out and the body's end.
import { heldAnswers } from '../../observability/metrics.ts'
import type { Payment } from '../../schemes/scheme.ts'
import type { AnswerStage } from './answer-stages.ts'

type Headers = Array<[string, string]>

export interface HeldAnswerCall {
  /** The head's headers now, with the pending receipt (the answer was too large to hold). */
  pending(): Headers
  /** The body ended whole: captures the charge and resolves with the head's headers once it is settled. */
  settle(): Promise<Headers>
}

/** Whether an answer of this head may be held: a content-length above maxBytes never fits. */
export function fitsHeld(head: Buffer[], maxBytes: number): boolean {
  for (let i = 0; i + 1 < head.length; i += 2) {
    if (head[i]!.toString('latin1').toLowerCase() !== 'content-length') continue
    const length = Number(head[i + 1]!.toString('latin1'))
    return Number.isFinite(length) && length <= maxBytes
  }
  return true
}

/** What the held answer asks of the paid call it holds (metered.ts). */
export interface HoldingCall {
  readonly payment: Payment | null
  /** The head's headers, given the receipt, the status and the head. */
  answerHeaders(receipt: [string, string] | null, status: number, head: Buffer[]): Headers
  /** The charge measured on the whole answer, captured. */
  captureUsage(ending: 'complete'): void
}

export class HeldAnswer implements AnswerStage {
  /** The head's extra headers: the proxy writes the head, and the body kept, once this resolves. */
  readonly head: Promise<Headers>
  private resolve!: (headers: Headers) => void
  private bytes = 0
  private released = false

  constructor(
    private readonly maxBytes: number,
    private readonly call: HeldAnswerCall,
  ) {
    this.head = new Promise<Headers>((resolve) => {
      this.resolve = resolve
    })
  }

  /** Holds a paid call's answer whose upstream head (`status`, `head`) just came. */
  static around(call: HoldingCall, maxBytes: number, head: Buffer[], status: number): HeldAnswer {
    // Read when the head goes out, long after the socket buffer the head is a view of was reused.
    const kept = head.map((b) => Buffer.from(b))
    const payment = call.payment!
    return new HeldAnswer(maxBytes, {
      pending: () => call.answerHeaders(payment.receipt(true), status, kept),
      settle: () => {
        call.captureUsage('complete')
        const settling = payment.settleBeforeAnswer?.() ?? null
        if (settling === null) return Promise.resolve(call.answerHeaders(payment.receipt(true), status, kept))
        return settling.then((receipt) => call.answerHeaders(receipt, status, kept))
      },
    })
  }

  /** Bytes on their way out (after the meter and any rewrite): past maxBytes the head goes now. */
  onData(chunk: Buffer): Buffer {
    if (this.released) return chunk
    this.bytes += chunk.length
    if (this.bytes <= this.maxBytes) return chunk
    this.released = true
    heldAnswers.labels('oversize').inc()
    this.resolve(this.call.pending())
    return chunk
  }

  /** The body ended (within maxBytes, unless released already): settle, then the head. */
  onEnd(): null {
    if (this.released) return null
    this.released = true
    heldAnswers.labels('held').inc()
    this.call.settle().then(this.resolve, () => this.resolve(this.call.pending()))
    return null
  }
}
