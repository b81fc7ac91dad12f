// The Payment protocol (schemes/scheme.ts) checked at run time, for tests: a payment is claimed at most once;
// one never claimed ends dropped or untouched; a claim that won ends in exactly one of capture, release or
// doubt by the time its call answers, and nothing changes it after; a settlement before the answer and a
// delivery follow a capture. Off (the default), a payment passes unwrapped and the call pays one boolean.
import type { CallFacts, ClaimOutcome, Payment, ServedCall } from '../schemes/scheme.ts'

/** Tests turn `on` and read `violations` (one line each, naming the scheme and the step). */
export const paymentChecks = { on: false, violations: [] as string[] }

type State = 'verified' | 'claiming' | 'claimed' | 'refused' | 'claim_failed' | 'dropped' | Ending
type Ending = 'captured' | 'released' | 'doubted'

/** The payment a metered call holds: checked when the checks are on, else the payment itself. */
export function checkedPayment(payment: Payment): Payment {
  return paymentChecks.on ? new CheckedPayment(payment) : payment
}

/** The call answered (or its client left): a won claim must have ended by now. */
export function paymentEnded(payment: Payment | null): void {
  if (payment instanceof CheckedPayment) payment.ended()
}

export class CheckedPayment implements Payment {
  private state: State = 'verified'

  constructor(private readonly inner: Payment) {}

  get scheme(): string {
    return this.inner.scheme
  }
  get proofKey(): string {
    return this.inner.proofKey
  }
  get payer(): `0x${string}` {
    return this.inner.payer
  }
  get coversAtomic(): bigint {
    return this.inner.coversAtomic
  }
  get transaction(): string | null {
    return this.inner.transaction
  }
  get settlesEarly(): boolean | undefined {
    return this.inner.settlesEarly
  }

  claim(): ClaimOutcome | Promise<ClaimOutcome> {
    if (!this.expect('claim', 'verified')) return this.inner.claim()
    this.state = 'claiming'
    const outcome = this.inner.claim()
    if (typeof outcome === 'string') return this.claimed(outcome)
    return outcome.then(
      (o) => this.claimed(o),
      (err) => {
        // Unknown whether it holds: the scheme's own lease decides; nothing more may be done with it here.
        this.state = 'claim_failed'
        throw err
      },
    )
  }

  drop(): void {
    if (this.expect('drop', 'verified')) this.state = 'dropped'
    this.inner.drop()
  }

  capture(call: ServedCall): void {
    this.end('capture', 'captured')
    this.inner.capture(call)
  }

  release(): void {
    this.end('release', 'released')
    this.inner.release()
  }

  doubt(call: CallFacts): void {
    this.end('doubt', 'doubted')
    this.inner.doubt(call)
  }

  receipt(served: boolean): [string, string] | null {
    return this.inner.receipt(served)
  }

  settleBeforeAnswer(): Promise<[string, string]> | null {
    this.expect('settleBeforeAnswer', 'captured')
    return this.inner.settleBeforeAnswer?.() ?? null
  }

  deliver(bodySha256: string, bodyBytes: number): boolean {
    this.expect('deliver', 'captured')
    return this.inner.deliver?.(bodySha256, bodyBytes) ?? false
  }

  /** The call is over. */
  ended(): void {
    if (this.state === 'claimed' || this.state === 'claiming')
      this.violation(`call ended with the payment ${this.state}, neither captured, released nor doubted`)
  }

  private claimed(outcome: ClaimOutcome): ClaimOutcome {
    this.state = outcome === 'won' ? 'claimed' : 'refused'
    return outcome
  }

  /** A step out of order is named, and changes nothing: the steps after it are read from where it was. */
  private end(step: string, to: Ending): void {
    if (this.expect(step, 'claimed')) this.state = to
  }

  private expect(step: string, state: State): boolean {
    if (this.state === state) return true
    this.violation(`${step}() on a payment ${this.state} (expected ${state})`)
    return false
  }

  private violation(what: string): void {
    paymentChecks.violations.push(`${this.inner.scheme} ${this.inner.proofKey}: ${what}`)
  }
}
