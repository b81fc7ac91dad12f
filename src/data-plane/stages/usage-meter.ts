// Usage pricing as a stage: the answer is measured as it streams past (bytes, duration, tokens), and the call
// is charged at its end for what it measured. Only a usage-priced paid call builds one.
import { usageCapped } from '../../observability/metrics.ts'
import { asksForStreamUsage, type Ending, UsageMeter, withStreamUsage } from '../../pricing/meter.ts'
import type { UsagePricing, UsageRecord } from '../../pricing/model.ts'
import type { ForwardRequest, ProxyOutcome, RequestBody } from '../proxy.ts'
import { setContentLength } from '../request-body.ts'
import type { AnswerStage } from './answer-stages.ts'

export class MeterStage implements AnswerStage {
  /** The upstream's status once it answered below 500: a charge is due at the answer's end (0: none due). */
  servedStatus = 0

  private constructor(private readonly meter: UsageMeter) {}

  /**
   * Measures a forwarded call's answer. An OpenAI-style stream that did not ask for its usage asks for it (the
   * meter takes the extra event out again): only a body complete by now can be changed.
   */
  static start(
    usage: UsagePricing,
    basePath: string,
    forward: ForwardRequest,
    body: RequestBody,
  ): MeterStage {
    let injected = false
    if (usage.unit === 'tokens' && asksForStreamUsage(basePath + forward.pathAndQuery)) {
      injected = body.rewrite(withStreamUsage)
      if (injected) setContentLength(forward.headers, body.length)
    }
    return new MeterStage(new UsageMeter(usage, performance.now(), injected))
  }

  onHead(head: Buffer[], status: number): void {
    if (status >= 500) return
    this.meter.onHead(head)
    this.servedStatus = status
  }

  onData(chunk: Buffer): Buffer {
    return this.meter.onData(chunk)
  }

  onEnd(): Buffer | null {
    return this.meter.onEnd()
  }

  /**
   * The charge, taken once: what the client got whole, or up to where it left (charged for what was
   * delivered), or nothing when the upstream broke off. Never above what the payment covers, nor above the
   * ceiling (counted when the measure went past it).
   */
  charge(ending: Ending, coversAtomic: bigint): UsageRecord {
    this.servedStatus = 0
    const usage = this.meter.finish(ending, performance.now())
    if (usage.capped) usageCapped.inc()
    let charge = usage.chargeAtomic < coversAtomic ? usage.chargeAtomic : coversAtomic
    if (ending === 'upstream_failed') charge = 0n
    usage.chargeAtomic = charge
    return usage
  }
}

/** How a forwarded call's answer ended, as the meter charges it. */
export function endingOf(outcome: ProxyOutcome): Ending {
  if (outcome.kind === 'responded') return 'complete'
  return outcome.kind === 'client_aborted' ? 'client_aborted' : 'upstream_failed'
}
