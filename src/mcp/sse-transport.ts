// The legacy MCP transport "HTTP+SSE" (protocol 2024-11-05): the client GETs an event stream whose first
// event, `endpoint`, names the URL to POST its messages to; each POST is answered 202 and every JSON-RPC
// answer travels on the GET stream. Behind a metered URL tollgate rewrites that `endpoint` event into the
// metered URL, and keeps each open stream (in this process) under the URL it named, so that a POST of the
// session can put an answer on its stream (an in-band PaymentRequired) or change the result that answers it
// there (the receipt of a paid call, the prices in a tools/list).
import { StringDecoder } from 'node:string_decoder'
import type { AnswerRewriter } from '../pricing/body-price.ts'

/** Writes bytes onto the client's stream at once, between two events; false: the stream is gone. */
export type Push = (bytes: Buffer) => boolean

/** How long a result whose change is not known yet (a paid call's settlement) holds its stream, at most. */
export const HOLD_MAX_MS = 30_000
/** Answers a session waits for at once; past it the oldest is forgotten (a client sends them one by one). */
const EXPECTED_MAX = 256
/** An event longer than this is passed on as it comes, unread (no endpoint event or answer is this long). */
const EVENT_MAX_CHARS = 4 * 1024 * 1024

type Edit = (result: Record<string, unknown>) => void

/** One open GET stream of the legacy transport, as this process holds it. */
export class SseSession {
  /** Answers to change, by JSON-RPC id: an edit, or null while it is not known yet (a paid call settling). */
  readonly expected = new Map<string | number, Edit | null>()
  /** Called when an expected answer's edit becomes known (the stream waiting for it goes on). */
  onResolved: (() => void) | null = null

  constructor(readonly push: Push) {}

  /** The result answering `id` will be changed by `edit` (null: by an edit given later to resolve()). */
  expect(id: string | number, edit: Edit | null): void {
    this.expected.delete(id)
    if (this.expected.size >= EXPECTED_MAX) this.expected.delete(this.expected.keys().next().value!)
    this.expected.set(id, edit)
  }

  resolve(id: string | number, edit: Edit | null): void {
    if (!this.expected.has(id)) return
    if (edit === null) this.expected.delete(id)
    else this.expected.set(id, edit)
    this.onResolved?.()
  }

  /** A JSON-RPC message as one `message` event on the stream; false when the stream is gone. */
  send(message: string): boolean {
    return this.push(Buffer.from(`event: message\ndata: ${message}\n\n`))
  }
}

/**
 * The streams this process holds, by endpoint and the path and query their `endpoint` event named (under the
 * metered URL). Process-wide: a stream outlives the endpoint's compiled pricing (a price change recompiles
 * it), and a POST finds its stream whichever pricing priced it.
 */
class SseSessions {
  readonly #byKey = new Map<string, SseSession>()

  get(endpointId: string, pathAndQuery: string): SseSession | undefined {
    return this.#byKey.get(`${endpointId} ${pathAndQuery}`)
  }

  add(endpointId: string, pathAndQuery: string, session: SseSession): void {
    this.#byKey.set(`${endpointId} ${pathAndQuery}`, session)
  }

  delete(endpointId: string, pathAndQuery: string, session: SseSession): void {
    const key = `${endpointId} ${pathAndQuery}`
    if (this.#byKey.get(key) === session) this.#byKey.delete(key)
  }

  get size(): number {
    return this.#byKey.size
  }
}

export const sseSessions = new SseSessions()

/** Where a GET stream was asked for: enough to map the server's URLs into the metered one. */
export interface StreamPlace {
  endpointId: string
  /** The upstream's origin ('http://127.0.0.1:4000') and the endpoint's base path ('' or '/mcp'). */
  origin: string
  basePath: string
  /** The path and query asked for under the metered URL ('/sse'). */
  pathAndQuery: string
}

/**
 * The `endpoint` event's URL (relative or absolute, resolved against the stream's upstream URL) as a path
 * under the metered URL (`/m/<id>/messages?sessionId=…`), and the part of it after `/m/<id>` (what a POST
 * of the session asks for); null when it is not under the endpoint's upstream URL (it cannot be reached
 * through it).
 */
export function meteredEndpointUrl(data: string, at: StreamPlace): { url: string; rest: string } | null {
  let url: URL
  try {
    url = new URL(data.trim(), at.origin + at.basePath + at.pathAndQuery)
  } catch {
    return null
  }
  if (url.origin !== at.origin) return null
  const path = url.pathname
  const base = at.basePath
  if (base !== '' && path !== base && !path.startsWith(`${base}/`)) return null
  const rest = path.slice(base.length) + url.search
  const prefixed = rest.startsWith('/') || rest === '' ? rest : `/${rest}`
  return { url: `/m/${at.endpointId}${prefixed}${url.hash}`, rest: prefixed }
}

/**
 * A legacy-transport GET stream on its way out: its `endpoint` event rewritten into the metered URL (and the
 * stream kept under it), answers a POST of the session asked to change changed, events a POST of the session
 * put on it written between the server's events. A stream that is not an event stream passes unchanged.
 */
export class SseStreamRewriter implements AnswerRewriter {
  private sse = false
  private decoder = new StringDecoder('utf8')
  /** Text of an event not complete yet. */
  private partial = ''
  /** Complete events held behind an answer waiting for its edit (in order); null: not holding. */
  private held: string[] | null = null
  private holdTimer: NodeJS.Timeout | null = null
  private push: Push | null = null
  private session: SseSession | null = null
  private sessionRest: string | null = null

  constructor(private readonly at: StreamPlace) {}

  /** The way to write onto the client's stream between events (from the proxy, once the head is known). */
  attach(push: Push): void {
    this.push = push
  }

  onHead(head: Buffer[]): void {
    for (let i = 0; i < head.length; i += 2)
      if (head[i]!.toString('latin1').toLowerCase() === 'content-type')
        this.sse = head[i + 1]!.toString('latin1').toLowerCase().includes('text/event-stream')
  }

  onData(chunk: Buffer): Buffer {
    if (!this.sse) return chunk
    this.partial += this.decoder.write(chunk)
    const events = this.completeEvents()
    if (events.length === 0) return EMPTY
    return Buffer.from(this.pass(events))
  }

  onEnd(): Buffer | null {
    this.close()
    if (!this.sse) return null
    let out = this.held === null ? '' : this.held.join('')
    this.held = null
    out += this.partial + this.decoder.end()
    this.partial = ''
    return out.length === 0 ? null : Buffer.from(out)
  }

  /** The stream ended (or the client left): POSTs no longer find it. */
  close(): void {
    if (this.holdTimer !== null) clearTimeout(this.holdTimer)
    this.holdTimer = null
    if (this.session !== null) {
      sseSessions.delete(this.at.endpointId, this.sessionRest!, this.session)
      this.session.onResolved = null
    }
    this.session = null
  }

  /** The complete events of what came in (each with its blank line), the rest kept for later. */
  private completeEvents(): string[] {
    const out: string[] = []
    for (;;) {
      const m = /\r?\n\r?\n|\r\r/.exec(this.partial)
      if (m === null) break
      const cut = m.index + m[0].length
      out.push(this.partial.slice(0, cut))
      this.partial = this.partial.slice(cut)
    }
    // Not an event stream we can read: passed on as it comes rather than held without end.
    if (this.partial.length > EVENT_MAX_CHARS) {
      out.push(this.partial)
      this.partial = ''
    }
    return out
  }

  /** What goes out now of these events, in order; what comes after an answer still waiting is held. */
  private pass(events: string[]): string {
    if (this.held !== null) {
      this.held.push(...events)
      return ''
    }
    let out = ''
    for (let i = 0; i < events.length; i++) {
      const e = this.rewrite(events[i]!)
      if (e === null) {
        this.hold(events.slice(i))
        return out
      }
      out += e
    }
    return out
  }

  /** One event as it goes out; null when it answers a call whose edit is not known yet. */
  private rewrite(event: string): string | null {
    const { name, data } = readEvent(event)
    if (name === 'endpoint' && this.session === null && data !== null) {
      const mapped = meteredEndpointUrl(data, this.at)
      if (mapped === null) return event
      const session = new SseSession((bytes) => this.push?.(bytes) ?? false)
      session.onResolved = () => this.release()
      this.session = session
      this.sessionRest = mapped.rest
      sseSessions.add(this.at.endpointId, mapped.rest, session)
      return `event: endpoint\ndata: ${mapped.url}\n\n`
    }
    const session = this.session
    if (
      session === null ||
      session.expected.size === 0 ||
      data === null ||
      (name !== null && name !== 'message')
    )
      return event
    let msg: Record<string, unknown>
    try {
      msg = JSON.parse(data)
    } catch {
      return event
    }
    if (typeof msg !== 'object' || msg === null) return event
    const id = msg.id
    if ((typeof id !== 'string' && typeof id !== 'number') || !session.expected.has(id)) return event
    const edit = session.expected.get(id)!
    if (edit === null) return null
    session.expected.delete(id)
    const result = msg.result
    if (typeof result !== 'object' || result === null) return event
    edit(result as Record<string, unknown>)
    return `event: message\ndata: ${JSON.stringify(msg)}\n\n`
  }

  /** Holds the stream from `events[0]` (an answer waiting for its edit), at most HOLD_MAX_MS. */
  private hold(events: string[]): void {
    this.held = events
    this.holdTimer = setTimeout(() => {
      // The edit never came (the paid call failed before its answer was known): the answer goes on as is.
      this.holdTimer = null
      const first = this.held?.[0]
      const id = first === undefined ? undefined : idOf(first)
      if (id !== undefined) this.session?.expected.delete(id)
      this.release()
    }, HOLD_MAX_MS)
    this.holdTimer.unref()
  }

  /** An edit became known: what was held goes out (and may hold again on the next answer waiting). */
  private release(): void {
    const held = this.held
    if (held === null) return
    const first = idOf(held[0]!)
    if (first !== undefined && this.session?.expected.get(first) === null) return
    if (this.holdTimer !== null) clearTimeout(this.holdTimer)
    this.holdTimer = null
    this.held = null
    const out = this.pass(held)
    if (out.length > 0) this.push?.(Buffer.from(out))
  }
}

/** An event's name and its data (data lines joined), from its text. */
function readEvent(event: string): { name: string | null; data: string | null } {
  let name: string | null = null
  let data: string | null = null
  for (const line of event.split(/\r\n|\r|\n/)) {
    if (line.startsWith('event:')) name = line.slice(6).trim()
    else if (line.startsWith('data:')) {
      const value = line.charCodeAt(5) === 32 ? line.slice(6) : line.slice(5)
      data = data === null ? value : `${data}\n${value}`
    }
  }
  return { name, data }
}

function idOf(event: string): string | number | undefined {
  const { data } = readEvent(event)
  if (data === null) return undefined
  try {
    const id = JSON.parse(data).id
    return typeof id === 'string' || typeof id === 'number' ? id : undefined
  } catch {
    return undefined
  }
}

/** An answer passed on unchanged (a paid POST of the legacy transport: its result is on the stream). */
export const PASS_THROUGH: AnswerRewriter = {
  onHead() {},
  onData: (chunk) => chunk,
  onEnd: () => null,
}

const EMPTY = Buffer.alloc(0)
