// The receipt digest as a stage: on an endpoint whose receipts are signed, the SHA-256 of the body as
// delivered (after any change the meter or a rewriter made), recorded once the answer went out whole, for the
// signed final receipt (/receipts/<id>). Only a paid answer below 500 where receipts are signed builds one.
import { createHash } from 'node:crypto'
import { deliveriesApart, deliveriesOnCall } from '../../observability/metrics.ts'
import type { Payment } from '../../schemes/scheme.ts'
import type { ObservedCalls } from '../observed-calls.ts'
import type { ProxyOutcome } from '../proxy.ts'
import type { AnswerStage } from './answer-stages.ts'

export class ReceiptDigest implements AnswerStage {
  private readonly hash = createHash('sha256')
  private bytes = 0

  constructor(
    private readonly payment: Payment,
    private readonly receiptId: string,
    private readonly observed: ObservedCalls | undefined,
  ) {}

  onData(chunk: Buffer): Buffer {
    this.hash.update(chunk)
    this.bytes += chunk.length
    return chunk
  }

  onDone(outcome: ProxyOutcome): void {
    // Only an answer delivered whole has a digest to sign: a partial one says so on its receipt.
    if (outcome.kind !== 'responded') return
    const sha256 = this.hash.digest('hex')
    // On the call row when its capture is still queued; else a record of its own, a few seconds later.
    if (this.payment.deliver?.(sha256, this.bytes) === true) deliveriesOnCall.inc()
    else {
      deliveriesApart.inc()
      this.observed?.delivered(this.receiptId, sha256, this.bytes)
    }
  }
}
