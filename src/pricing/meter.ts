// Measures a usage-priced call on its answer as it streams past, never holding the whole answer: bytes
// delivered, upstream time, and tokens read from the `usage` object of an OpenAI- or Anthropic-shaped
// answer (plain JSON: from a bounded tail; SSE: event by event, keeping at most one partial event). When
// tollgate asked an OpenAI-style stream for its usage itself, the extra usage event (and the `"usage":null`
// the upstream then adds to every chunk) is taken out so the client gets what it asked for.
import { StringDecoder } from 'node:string_decoder'
import type { UsagePricing, UsageRecord } from './model.ts'

/** The most of a JSON answer kept to find its usage object: usage objects sit at the end of the answer. */
const JSON_TAIL_CHARS = 64 * 1024
/** The most of one SSE event held back while filtering; a longer event is passed on untouched. */
const EVENT_MAX_CHARS = 256 * 1024

export type Ending = 'complete' | 'client_aborted' | 'upstream_failed'

export interface Tokens {
  input: number
  cached: number
  output: number
}

export class UsageMeter {
  /** Bytes handed to the client. */
  bytes = 0
  /** SSE data events seen (the estimate of output tokens when the client leaves before the usage). */
  events = 0
  private sse = false
  private filtering: boolean
  private decoder = new StringDecoder('utf8')
  /** SSE: the unfinished event; JSON: the tail of the answer. */
  private text = ''
  private jsonChars = 0
  /** Usage fields merged over the events that carry them (Anthropic splits them over two events). */
  private usage: Record<string, unknown> | null = null
  private unreadable = false
  private endedMs = 0

  /**
   * @param injected tollgate added `stream_options.include_usage` to the request: the answer's extra
   * usage event is removed on the way to the client.
   */
  constructor(
    readonly pricing: UsagePricing,
    private readonly startedMs: number,
    injected: boolean,
  ) {
    this.filtering = injected
  }

  /** The upstream's head: SSE or not; a sized answer is never rewritten (its length is promised). */
  onHead(head: Buffer[]): void {
    let sized = false
    for (let i = 0; i < head.length; i += 2) {
      const name = head[i]!.toString('latin1').toLowerCase()
      if (name === 'content-type')
        this.sse = head[i + 1]!.toString('latin1').toLowerCase().includes('text/event-stream')
      else if (name === 'content-length') sized = true
    }
    if (!this.sse || sized) this.filtering = false
  }

  /** One chunk of the answer on its way out: the bytes to send (the same buffer unless filtering). */
  onData(chunk: Buffer): Buffer {
    if (this.pricing.unit !== 'tokens') {
      this.bytes += chunk.length
      return chunk
    }
    const text = this.decoder.write(chunk)
    if (!this.sse) {
      this.jsonChars += text.length
      this.text = (this.text + text).slice(-JSON_TAIL_CHARS)
      this.bytes += chunk.length
      return chunk
    }
    // Read before the scan: a scan that meets an event too long to hold stops the filtering, and what it
    // returns then (what was held from earlier chunks, the rest of this one) must still go out.
    const filtering = this.filtering
    const out = this.scanEvents(text)
    if (!filtering) {
      this.bytes += chunk.length
      return chunk
    }
    const buf = Buffer.from(out)
    this.bytes += buf.length
    return buf
  }

  /** What is still held back when the answer ends (an unterminated last event), to send before the end. */
  onEnd(): Buffer | null {
    if (!this.filtering || this.text === '') return null
    const buf = Buffer.from(this.text)
    this.text = ''
    this.bytes += buf.length
    return buf
  }

  /**
   * Scans complete events; returns the text to send when filtering. A chunk often holds many events: the
   * scan walks them with a cursor and looks for each kind of blank line once a pass, not once an event
   * (searching the rest of the chunk for a CRLF blank line after every event of an LF stream was
   * quadratic in the events a chunk holds).
   */
  private scanEvents(text: string): string {
    const buffer = this.text === '' ? text : this.text + text
    const filtering = this.filtering
    let out = ''
    let from = 0
    let lf = buffer.indexOf('\n\n')
    let crlf = buffer.indexOf('\r\n\r\n')
    while (lf >= 0 || crlf >= 0) {
      const isCrlf = crlf >= 0 && (lf < 0 || crlf < lf)
      const at = isCrlf ? crlf : lf
      const next = at + (isCrlf ? 4 : 2)
      const kept = this.onEvent(buffer.slice(from, at))
      if (filtering && kept !== null) out += kept + buffer.slice(at, next)
      from = next
      if (lf >= 0 && lf < from) lf = buffer.indexOf('\n\n', from)
      if (crlf >= 0 && crlf < from) crlf = buffer.indexOf('\r\n\r\n', from)
    }
    let rest = from === 0 ? buffer : buffer.slice(from)
    if (rest.length > EVENT_MAX_CHARS) {
      // An event this long is not one we rewrite: pass everything on as it comes from now on.
      if (filtering) out += rest
      this.filtering = false
      rest = ''
    }
    this.text = rest
    return out
  }

  /** One SSE event: its usage read; returns it as it goes out (null: dropped). */
  private onEvent(event: string): string | null {
    let data = ''
    if (event.startsWith('data:') && event.indexOf('\n') < 0) {
      // One data line, as every event of OpenAI's and Anthropic's streams is.
      data = event.slice(event.charCodeAt(5) === 32 ? 6 : 5)
    } else {
      for (const line of event.split(/\r?\n/)) {
        if (line.startsWith('data:')) data += line.slice(line.charCodeAt(5) === 32 ? 6 : 5)
      }
    }
    if (data === '' || data === '[DONE]') return event
    this.events++
    const usageAt = data.indexOf('"usage"')
    if (usageAt < 0) return event
    if (saysNoUsage(data, usageAt)) {
      // `"usage":null`, the only usage key of the event: what an OpenAI stream asked for its usage adds to
      // every chunk before the last. Nothing to read; JSON.parse would read the whole chunk to learn it.
      return this.filtering ? withoutNullUsage(event) : event
    }
    let parsed: unknown
    try {
      parsed = JSON.parse(data)
    } catch {
      this.unreadable = true
      return event
    }
    const found = usageIn(parsed)
    if (found !== undefined) this.merge(found)
    if (!this.filtering) return event
    const choices = (parsed as { choices?: unknown }).choices
    // The event tollgate asked for: usage and no choices. Dropped, and not counted as a token.
    if (found !== undefined && found !== null && Array.isArray(choices) && choices.length === 0) {
      this.events--
      return null
    }
    return withoutNullUsage(event)
  }

  private merge(found: unknown): void {
    if (found === null) return
    if (typeof found !== 'object' || Array.isArray(found)) {
      this.unreadable = true
      return
    }
    this.usage = { ...this.usage, ...(found as Record<string, unknown>) }
  }

  /** The upstream answer ended (or the client left): what the call costs. */
  finish(ending: Ending, nowMs: number): UsageRecord {
    this.endedMs = nowMs
    const p = this.pricing
    if (p.unit === 'response_bytes')
      return this.record({ bytes: this.bytes }, perUnit(this.bytes, p.perMbAtomic, 1_000_000n))
    if (p.unit === 'duration_ms') {
      const ms = Math.max(0, Math.ceil(this.endedMs - this.startedMs))
      return this.record({ duration_ms: ms }, perUnit(ms, p.perSecondAtomic, 1_000n))
    }
    if (!this.sse) this.readJsonUsage()
    const tokens = this.usage === null ? null : tokensOf(this.usage)
    if (tokens !== null && tokens !== 'malformed') {
      return this.record(
        { input_tokens: tokens.input, cached_input_tokens: tokens.cached, output_tokens: tokens.output },
        tokenCharge(p, tokens),
      )
    }
    const why = tokens === 'malformed' || this.unreadable ? 'malformed' : 'missing'
    // The client left mid-stream before the usage came: charged for what was delivered, one token per event.
    if (ending === 'client_aborted' && this.sse) {
      const estimate = { input: 0, cached: 0, output: this.events }
      return this.record(
        { output_tokens: this.events, estimated: 1 },
        tokenCharge(p, estimate),
        'client_aborted',
      )
    }
    if (p.onMissingUsage === 'nothing') return this.record({ bytes: this.bytes }, 0n, why)
    if (p.onMissingUsage === 'response_bytes')
      return this.record({ bytes: this.bytes }, perUnit(this.bytes, p.perMbAtomic, 1_000_000n), why)
    return this.record({ bytes: this.bytes }, p.maxAtomic, why)
  }

  private readJsonUsage(): void {
    const text = this.text + this.decoder.end()
    this.text = ''
    if (text === '') return
    let parsed: unknown
    if (this.jsonChars <= JSON_TAIL_CHARS) {
      try {
        parsed = JSON.parse(text)
      } catch {
        this.unreadable = text.includes('"usage"')
        return
      }
      const found = usageIn(parsed)
      if (found !== undefined) this.merge(found)
      return
    }
    // Longer than the tail: the last "usage" object in it, cut out by its braces.
    const object = lastObjectAfter(text, '"usage"')
    if (object === null) return
    try {
      this.merge(JSON.parse(object))
    } catch {
      this.unreadable = true
    }
  }

  private record(
    quantities: Record<string, number>,
    measuredAtomic: bigint,
    fallback: UsageRecord['fallback'] = null,
  ): UsageRecord {
    const ceiling = this.pricing.maxAtomic
    const capped = measuredAtomic > ceiling
    return {
      unit: this.pricing.unit,
      quantities,
      ceilingAtomic: ceiling,
      chargeAtomic: capped ? ceiling : measuredAtomic,
      source: fallback === null ? 'measured' : 'fallback',
      fallback,
      capped,
    }
  }
}

/** Where an answer or event keeps its usage: top level (OpenAI chat, Anthropic message_delta), under
 * `message` (Anthropic message_start) or `response` (OpenAI Responses); undefined when it has none. */
function usageIn(parsed: unknown): unknown {
  if (parsed === null || typeof parsed !== 'object') return undefined
  const o = parsed as { usage?: unknown; message?: { usage?: unknown }; response?: { usage?: unknown } }
  if (o.usage !== undefined) return o.usage
  if (o.message?.usage !== undefined) return o.message.usage
  if (o.response?.usage !== undefined) return o.response.usage
  return undefined
}

const count = (x: unknown): number | null | undefined =>
  x === undefined || x === null
    ? undefined
    : Number.isSafeInteger(x) && (x as number) >= 0
      ? (x as number)
      : null

/**
 * Input (not cached), cached input and output tokens. OpenAI counts cached tokens inside prompt_tokens /
 * input_tokens (details.cached_tokens); Anthropic counts cache reads apart (cache_read_input_tokens) and
 * cache writes as input (cache_creation_input_tokens).
 */
function tokensOf(u: Record<string, unknown>): Tokens | 'malformed' {
  const prompt = count(u.prompt_tokens)
  const completion = count(u.completion_tokens)
  const input = count(u.input_tokens)
  const output = count(u.output_tokens)
  const details = (u.prompt_tokens_details ?? u.input_tokens_details) as
    | { cached_tokens?: unknown }
    | undefined
  const openAiCached = count(details?.cached_tokens)
  const cacheRead = count(u.cache_read_input_tokens)
  const cacheWrite = count(u.cache_creation_input_tokens)
  if ([prompt, completion, input, output, openAiCached, cacheRead, cacheWrite].includes(null))
    return 'malformed'
  if (prompt !== undefined || completion !== undefined) {
    const cached = openAiCached ?? 0
    if (prompt === undefined || completion === undefined || cached! > prompt!) return 'malformed'
    return { input: prompt! - cached!, cached: cached!, output: completion! }
  }
  if (input === undefined || output === undefined) return 'malformed'
  if (u.input_tokens_details !== undefined) {
    const cached = openAiCached ?? 0
    if (cached! > input!) return 'malformed'
    return { input: input! - cached!, cached: cached!, output: output! }
  }
  return { input: input! + (cacheWrite ?? 0)!, cached: cacheRead ?? 0, output: output! }
}

/** Rounded up to the base unit: a fraction of a base unit is charged as one. */
function ceilDiv(n: bigint, d: bigint): bigint {
  return (n + d - 1n) / d
}

function perUnit(quantity: number, rateAtomic: bigint | null, per: bigint): bigint {
  return rateAtomic === null ? 0n : ceilDiv(BigInt(quantity) * rateAtomic, per)
}

export function tokenCharge(p: UsagePricing, t: Tokens): bigint {
  const input = p.inputPerMillionAtomic ?? 0n
  const cached = p.cachedInputPerMillionAtomic ?? input
  const output = p.outputPerMillionAtomic ?? 0n
  return ceilDiv(BigInt(t.input) * input + BigInt(t.cached) * cached + BigInt(t.output) * output, 1_000_000n)
}

const NULL_USAGE = '"usage":null'
const NULL_USAGE_ANYWHERE = /,\s*"usage"\s*:\s*null/g

/**
 * The event's data has `"usage":null` at `at` (then the end of its object or the next member) and no other
 * usage key. In JSON text a raw `"usage"` followed by a colon is a key, never part of a string.
 */
function saysNoUsage(data: string, at: number): boolean {
  if (!data.startsWith(NULL_USAGE, at)) return false
  const after = data.charCodeAt(at + NULL_USAGE.length)
  // '}' or ',' (or whitespace before them)
  if (after !== 125 && after !== 44 && after !== 32 && after !== 10 && after !== 13 && after !== 9)
    return false
  return data.indexOf('"usage"', at + NULL_USAGE.length) < 0
}

/** The event without the `"usage":null` member tollgate's request caused (the client did not ask for it). */
function withoutNullUsage(event: string): string {
  const at = event.indexOf(`,${NULL_USAGE}`)
  // The usual shape, spliced out; anything else (spaces, more than one) by the general pattern.
  if (at >= 0 && event.indexOf('"usage"') === at + 1 && event.indexOf('"usage"', at + 2) < 0)
    return event.slice(0, at) + event.slice(at + 1 + NULL_USAGE.length)
  return event.replace(NULL_USAGE_ANYWHERE, '')
}

/** The JSON object following the last `key` in `text`, cut by brace depth (strings respected), or null. */
function lastObjectAfter(text: string, key: string): string | null {
  const at = text.lastIndexOf(key)
  if (at < 0) return null
  const start = text.indexOf('{', at + key.length)
  if (start < 0) return null
  let depth = 0
  let inString = false
  for (let i = start; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 92) i++
      else if (c === 34) inString = false
    } else if (c === 34) inString = true
    else if (c === 123) depth++
    else if (c === 125 && --depth === 0) return text.slice(start, i + 1)
  }
  return null
}

/** OpenAI's chat/completions and completions stream their usage only when asked; other shapes send it. */
export function asksForStreamUsage(upstreamPath: string): boolean {
  return /\/completions\/?(\?|$)/.test(upstreamPath)
}

/**
 * An OpenAI-style streaming request that did not ask for usage asks for it: returns the new body, or null
 * to send the body unchanged (not JSON, not streaming, or usage already asked for).
 */
export function withStreamUsage(body: Buffer): Buffer | null {
  if (body.length === 0 || body.length > 1_000_000) return null
  let parsed: unknown
  try {
    parsed = JSON.parse(body.toString('utf8'))
  } catch {
    return null
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) return null
  const o = parsed as { stream?: unknown; stream_options?: unknown }
  if (o.stream !== true) return null
  const options = o.stream_options
  if (options !== undefined && (options === null || typeof options !== 'object')) return null
  if ((options as { include_usage?: unknown } | undefined)?.include_usage === true) return null
  o.stream_options = { ...(options as object | undefined), include_usage: true }
  return Buffer.from(JSON.stringify(o))
}
