// The stages around a metered call's answer, composed per call from what its endpoint and payment use (the
// shape of undici's dispatch handlers and hono's compose): the usage meter, the MCP rewriter, the discovery
// count, the receipt digest, the payment-identifier recorder, the held answer. A call that uses none builds
// none: it holds no chain, and its answer passes the proxy untouched. The next feature is a stage and a rank.
import type { ProxyOutcome } from '../proxy.ts'

/** One stage: each hook optional, a stage implements what it reads or changes. */
export interface AnswerStage {
  /** The upstream's head (raw [name, value, …]) and status, before anything is written. */
  onHead?(head: Buffer[], status: number): void
  /** A chunk on its way out: what to pass on (the same buffer unless the stage changes the answer). */
  onData?(chunk: Buffer): Buffer
  /** The body ended: what the stage still held back (passed on through the stages after it), or null. */
  onEnd?(): Buffer | null
  /** A way to write onto a chunked answer between the upstream's chunks (an MCP stream's events). */
  attach?(push: (bytes: Buffer) => boolean): void
  /** The answer is over (ended, failed, or the client left). */
  close?(): void
  /** The call is over: `captured`, its charge was booked; `released`, its payment given back for a retry. */
  onDone?(outcome: ProxyOutcome, captured: boolean, released: boolean): void
}

/**
 * The order of the chain, one slot each. The meter reads the upstream's bytes (and takes out an event it asked
 * for), the rewriter changes them, the others see the answer as delivered. At the end, the discovery count comes
 * before the delivery record; the held answer settles last, once the digest and the recorder have the tail.
 */
export const RANK = { meter: 0, rewriter: 1, observed: 2, digest: 3, recorder: 4, held: 5 } as const
type Rank = (typeof RANK)[keyof typeof RANK]
const NONE: readonly AnswerStage[] = []

export class AnswerStages {
  /** One slot per rank (a call builds one object and one short array, whatever it composes). */
  private readonly slots: Array<AnswerStage | null> = [null, null, null, null, null, null]
  /** The stages that read bytes, in order: one that does not costs the chunks nothing. */
  private flow: readonly AnswerStage[] = NONE
  /** A stage changes the answer's length: it is sent unsized (the proxy's `resizes`). */
  resizes = false
  /** The head waits while the body is read and kept (the proxy's `readsWhileHeld`). */
  holds = false

  /** Adds a stage at its rank; before the answer's first byte. */
  add(rank: Rank, stage: AnswerStage): void {
    this.slots[rank] = stage
    if (rank === RANK.rewriter) this.resizes = true
    else if (rank === RANK.held) this.holds = true
    if (stage.onData === undefined) return
    const flow: AnswerStage[] = []
    for (const s of this.slots) if (s !== null && s.onData !== undefined) flow.push(s)
    this.flow = flow
  }

  has(rank: Rank): boolean {
    return this.slots[rank] !== null
  }

  onHead(head: Buffer[], status: number): void {
    const slots = this.slots
    for (let i = 0; i < slots.length; i++) slots[i]?.onHead?.(head, status)
  }

  onData(chunk: Buffer): Buffer {
    const flow = this.flow
    let out = chunk
    for (let i = 0; i < flow.length; i++) out = flow[i]!.onData!(out)
    return out
  }

  /** What the stages held back, each stage's tail passed through the stages after it. */
  onEnd(): Buffer | null {
    const slots = this.slots
    let tail: Buffer | null = null
    for (let i = 0; i < slots.length; i++) {
      const s = slots[i]!
      if (s === null) continue
      const last: Buffer | null = tail === null || s.onData === undefined ? tail : s.onData(tail)
      const rest = s.onEnd === undefined ? null : s.onEnd()
      if (last === null || last.length === 0) tail = rest
      else tail = rest === null ? last : Buffer.concat([last, rest])
    }
    return tail
  }

  attach(push: (bytes: Buffer) => boolean): void {
    for (const s of this.slots) s?.attach?.(push)
  }

  onDone(outcome: ProxyOutcome, captured: boolean, released: boolean): void {
    const slots = this.slots
    for (let i = 0; i < slots.length; i++) {
      const s = slots[i]!
      if (s === null) continue
      s.close?.()
      s.onDone?.(outcome, captured, released)
    }
  }
}
