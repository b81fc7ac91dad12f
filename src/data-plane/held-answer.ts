// The held answer of a call whose charge is known only at its end (usage pricing) and whose payment
// settles before the answer (x402 `upto` on an endpoint with x402_settlement "before_answer"): the head
// waits while the body is read and kept (the proxy's readsWhileHeld), the charge is captured at the
// body's end, its settlement is sent and awaited, and the head then goes out with the receipt that names
// the mined transaction, the body right behind it. Bounded: past maxBytes the head goes out at once with
// the pending receipt and the rest streams (the call is settled after, from the settler all the same).
// A stage of its own beside the meter, the rewriter, the digest and the recorder: it sees only the sizes
// of the bytes on their way out and the body's end.
import { heldAnswers } from '../observability/metrics.ts'

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

export class HeldAnswer {
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

  /** Bytes on their way out (after the meter and any rewrite): past maxBytes the head goes now. */
  data(bytes: number): void {
    if (this.released) return
    this.bytes += bytes
    if (this.bytes <= this.maxBytes) return
    this.released = true
    heldAnswers.labels('oversize').inc()
    this.resolve(this.call.pending())
  }

  /** The body ended (within maxBytes, unless released already): settle, then the head. */
  end(): void {
    if (this.released) return
    this.released = true
    heldAnswers.labels('held').inc()
    this.call.settle().then(this.resolve, () => this.resolve(this.call.pending()))
  }
}
