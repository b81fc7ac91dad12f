// The discovery count as a stage (observed-calls.ts): what a paid call did, served or not, and how long its
// upstream took to answer, for the listing's observed quality. Built only where discovery counts calls.
import type { ObservedCalls } from '../observed-calls.ts'
import type { ProxyOutcome } from '../proxy.ts'
import type { AnswerStage } from './answer-stages.ts'

export class ObservedCall implements AnswerStage {
  /** When the request went upstream, and when the upstream's head came back (0: never). */
  private readonly forwardedMs = performance.now()
  private headMs = 0

  constructor(
    private readonly observed: ObservedCalls,
    private readonly endpointId: string,
    /** The tool discovery counts the call under (bounded), else null. */
    private readonly tool: string | null,
    private readonly payer: string,
    /** Who called, on an endpoint with identity rules; else undefined. */
    private readonly signer: string | undefined,
  ) {}

  onHead(): void {
    this.headMs = performance.now()
  }

  onDone(_outcome: ProxyOutcome, captured: boolean): void {
    this.observed.record({
      endpointId: this.endpointId,
      tool: this.tool,
      payer: this.payer,
      served: captured,
      upstreamMs: this.headMs === 0 ? null : this.headMs - this.forwardedMs,
      signer: this.signer,
    })
  }
}
