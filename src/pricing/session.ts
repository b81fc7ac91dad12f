// What a WebSocket session costs: the endpoint's usage pricing read on the frames the upstream sends (bytes,
// duration, or the tokens of OpenAI Realtime `response.done` events), plus an optional price per message.
// Totals are kept as counts and priced once, so the session is charged to the base unit (one rounding up).
import { type Tokens, tokenCharge } from './meter.ts'
import type { UsagePricing, UsageRecord } from './model.ts'

/** The `websocket` column: the session terms (base units as strings). */
export interface StoredWebsocket {
  max_message_bytes: number
  per_message_atomic: string
  /** Absent on rows written before top-ups: the default. */
  top_up_wait_ms?: number
}

export interface SessionTerms {
  /** A frame or message over this, either way, closes the session with 1009. */
  maxMessageBytes: number
  /** Charged for every message relayed to the client (0: none). */
  perMessageAtomic: bigint
  /** Credit spent: how long the session waits, paused, for a top-up on the socket before it is closed. */
  topUpWaitMs: number
}

export const DEFAULT_MAX_MESSAGE_BYTES = 1_048_576
export const MAX_MESSAGE_BYTES_LIMIT = 16_777_216
export const DEFAULT_TOP_UP_WAIT_MS = 10_000
export const MAX_TOP_UP_WAIT_MS = 60_000

export function sessionTermsFromStored(s: StoredWebsocket): SessionTerms {
  return {
    maxMessageBytes: s.max_message_bytes,
    perMessageAtomic: BigInt(s.per_message_atomic),
    topUpWaitMs: s.top_up_wait_ms ?? DEFAULT_TOP_UP_WAIT_MS,
  }
}

export function sessionTermsToStored(t: SessionTerms): StoredWebsocket {
  return {
    max_message_bytes: t.maxMessageBytes,
    per_message_atomic: t.perMessageAtomic.toString(),
    top_up_wait_ms: t.topUpWaitMs,
  }
}

/**
 * A session paid by several payments (its opening one, then each top-up): its charge, filled into them in
 * the order they were paid, each at most what it covers. The shares add up to the charge (the session caps
 * its charge at their sum), so the session is still rounded once.
 */
export function splitCharge(chargeAtomic: bigint, covers: readonly bigint[]): bigint[] {
  let left = chargeAtomic
  return covers.map((c) => {
    const share = left < c ? left : c
    left -= share
    return share
  })
}

// A Realtime event is read as JSON only when its text names one of these types (cheap substring tests).
const RESPONSE_DONE = '"response.done"'
const DELTA = '.delta"'

/** Measures one session as its frames reach the client. */
export class SessionMeter {
  messages = 0
  bytes = 0
  readonly tokens: Tokens = { input: 0, cached: 0, output: 0 }
  /** Delta events delivered since the last usage report: the output estimate if the session ends first. */
  deltasSinceUsage = 0
  endedMs = 0

  constructor(
    readonly pricing: UsagePricing,
    readonly terms: SessionTerms,
    readonly startedMs: number,
  ) {}

  /** A message relayed to the client (text frames are read for Realtime usage events). */
  delivered(data: Buffer, isBinary: boolean): void {
    this.messages++
    this.bytes += data.length
    if (isBinary || this.pricing.unit !== 'tokens') return
    const text = data.toString('utf8')
    if (text.includes(RESPONSE_DONE)) this.readUsage(text)
    else if (text.includes(DELTA)) this.deltasSinceUsage++
  }

  /** Realtime `response.done`: response.usage {input_tokens, output_tokens, input_token_details.cached_tokens}. */
  readUsage(text: string): void {
    let event: unknown
    try {
      event = JSON.parse(text)
    } catch {
      return
    }
    const usage = (event as { response?: { usage?: Record<string, unknown> } } | null)?.response?.usage
    if (usage === undefined || usage === null || typeof usage !== 'object') return
    const input = usage.input_tokens
    const output = usage.output_tokens
    const details = usage.input_token_details as { cached_tokens?: unknown } | undefined
    const cached = details?.cached_tokens ?? 0
    if (!isCount(input) || !isCount(output) || !isCount(cached) || cached > input) return
    // OpenAI counts cached tokens inside input_tokens: priced apart, at the cached price.
    this.tokens.input += input - cached
    this.tokens.cached += cached
    this.tokens.output += output
    this.deltasSinceUsage = 0
  }

  /** What the session has cost so far (base units, rounded up once); `estimate`: count unreported deltas. */
  chargeAtomic(nowMs: number, estimate = false): bigint {
    const p = this.pricing
    const messages = BigInt(this.messages) * this.terms.perMessageAtomic
    if (p.unit === 'response_bytes') return messages + perUnit(this.bytes, p.perMbAtomic, 1_000_000n)
    if (p.unit === 'duration_ms') {
      const ms = Math.max(0, Math.ceil(nowMs - this.startedMs))
      return messages + perUnit(ms, p.perSecondAtomic, 1_000n)
    }
    const t = estimate ? { ...this.tokens, output: this.tokens.output + this.deltasSinceUsage } : this.tokens
    return messages + tokenCharge(p, t)
  }

  /**
   * The session's record for its call row: charged what was delivered, never above what the payment covers.
   * A session cut mid-answer by the client or by tollgate (credit, size) pays one output token per delta event
   * delivered since the last usage; one the upstream broke off mid-answer pays nothing for that answer.
   */
  finish(nowMs: number, coversAtomic: bigint, cutMidAnswer: boolean): UsageRecord {
    this.endedMs = nowMs
    const estimated = cutMidAnswer && this.pricing.unit === 'tokens' && this.deltasSinceUsage > 0
    const measured = this.chargeAtomic(nowMs, estimated)
    const quantities: Record<string, number> = {
      messages: this.messages,
      bytes: this.bytes,
      duration_ms: Math.max(0, Math.ceil(nowMs - this.startedMs)),
    }
    if (this.pricing.unit === 'tokens') {
      quantities.input_tokens = this.tokens.input
      quantities.cached_input_tokens = this.tokens.cached
      quantities.output_tokens = this.tokens.output + (estimated ? this.deltasSinceUsage : 0)
      if (estimated) quantities.estimated = 1
    }
    const capped = measured > coversAtomic
    return {
      unit: this.pricing.unit,
      quantities,
      ceilingAtomic: this.pricing.maxAtomic,
      chargeAtomic: capped ? coversAtomic : measured,
      source: estimated ? 'fallback' : 'measured',
      fallback: estimated ? 'client_aborted' : null,
      capped,
    }
  }
}

function isCount(x: unknown): x is number {
  return typeof x === 'number' && Number.isSafeInteger(x) && x >= 0
}

/** Rounded up to the base unit. */
function perUnit(quantity: number, rateAtomic: bigint | null, per: bigint): bigint {
  return rateAtomic === null ? 0n : (BigInt(quantity) * rateAtomic + per - 1n) / per
}
