// Streams a paid call to its upstream and the answer back: header hygiene, backpressure both ways, abort
// propagation and upstream timeouts, through undici's raw dispatch contract (no stream objects per call), which
// tollgate's own upstream client implements (upstream-pool.ts: it, or undici's Agent).
import type { Dispatcher } from 'undici'
import { type ErrorCode, type ErrorDetails, writeError } from '../errors.ts'
import { statusClass, upstreamDuration } from '../observability/metrics.ts'
import { peerAddress } from './client-address.ts'
import { CORS_HEADERS } from './cors.ts'
import { CLIENT_LEFT, type RequestBody } from './request-body.ts'
import type { UpstreamDispatcher } from './upstream-pool.ts'
import { type HttpRequest, type HttpResponse, statusLine } from './uws.ts'

export { createRequestBody, RequestBody } from './request-body.ts'
export { createUpstreamDispatcher, type UpstreamDispatcher } from './upstream-pool.ts'

/** Read synchronously from the uWS HttpRequest inside the handler (it dies when the handler returns). */
export interface ForwardRequest {
  /** Uppercase, e.g. 'POST'. */
  method: string
  /** The part after /m/<id> ('/…' or ''), plus '?query' if any. */
  pathAndQuery: string
  /** All request headers as received (lowercase names). */
  headers: Array<[string, string]>
  /** Client IP as text. */
  remoteAddress: string
  /**
   * The peer is one of server.trusted_proxies: the forwarding headers it wrote are kept and x-forwarded-for
   * is appended to. Otherwise the caller wrote them (anyone can) and the upstream gets only tollgate's view.
   */
  peerTrusted: boolean
  /** Sent to the upstream as x-request-id, and on tollgate's own error answers. */
  requestId: string
  /** W3C traceparent of the upstream span when tracing is on (replaces the caller's), else null. */
  traceparent: string | null
}

/**
 * Reads what is forwarded, synchronously, inside the handler (the request dies when it returns). `subPath`:
 * the part after /m/<id>, without the query.
 */
export function readForwardRequest(
  res: HttpResponse,
  req: HttpRequest,
  q: { method: string; subPath: string; requestId: string; peerTrusted: boolean },
): ForwardRequest {
  const query = req.getQuery()
  const headers: Array<[string, string]> = []
  req.forEach((k, v) => {
    headers.push([k, v])
  })
  return {
    method: q.method,
    pathAndQuery: q.subPath + (query ? `?${query}` : ''),
    headers,
    remoteAddress: peerAddress(res),
    peerTrusted: q.peerTrusted,
    requestId: q.requestId,
    traceparent: null,
  }
}

export interface UpstreamTarget {
  /** 'http://127.0.0.1:4000' */
  origin: string
  /** Path prefix of the endpoint's upstream_url without trailing slash, e.g. '/v1/chat'. */
  basePath: string
  /** Value for the Host header (the upstream_url's host). */
  host: string
  /** The owner's upstream_headers; they replace the caller's headers of the same name. */
  injectHeaders: Array<[string, string]>
  /** Headers timeout and idle body timeout. */
  timeoutMs: number
  allowPrivate: boolean
}

/**
 * timeout: the request went out and no head came back in time (the upstream may have done the work).
 * connect_timeout: no connection was made (nothing reached the upstream).
 */
export type UpstreamErrorCode =
  | 'unreachable'
  | 'connect_timeout'
  | 'timeout'
  | 'private_target'
  | 'reset'
  | 'invalid_path'

export type ProxyOutcome =
  /** The upstream answered (any status) and the response was fully relayed. */
  | { kind: 'responded'; status: number; bytes: number }
  /** The client left; status is the upstream's if its head had arrived. */
  | { kind: 'client_aborted'; status: number | null }
  /** status null: nothing had been relayed and tollgate answered 502/504 itself. */
  | { kind: 'upstream_error'; code: UpstreamErrorCode; status: number | null }

export interface ProxyHooks {
  /** Called once, synchronously, when the upstream's head arrives, before anything is written to the
   * client (`head`: the raw [name, value, …] list). Returns extra headers to add (the receipt); a promise
   * holds the head (and pauses the upstream) until it resolves: a receipt settled before the answer. It must
   * not reject. The head's buffers are views of the upstream socket's read buffer, good during the call and
   * until the promise resolves: what is kept longer is copied. */
  onResponseHead(
    status: number,
    head: Buffer[],
  ): Array<[string, string]> | undefined | Promise<Array<[string, string]>>
  /** Each body chunk on its way to the client: returns what to send (a usage meter may take out an event).
   * Only a chunked answer may be changed: a sized one must come back as it went in. The chunk is a view of
   * the upstream socket's read buffer, which its next read overwrites: what is kept past the call is copied. */
  onResponseData?(chunk: Buffer): Buffer
  /** Set by onResponseHead when onResponseData changes the answer's length: it is sent unsized. */
  resizes?: boolean
  /**
   * Set by onResponseHead that returns a promise: the upstream is read on meanwhile (each chunk through
   * onResponseData, its end through onResponseEnd, as they come) and what they return is kept, in order,
   * until the promise resolves; then the head, the body kept and (if it came) the end go out together, and
   * the answer streams on from there. The hooks bound what is kept by resolving early.
   */
  readsWhileHeld?: boolean
  /** The body ended: anything still held back by onResponseData, sent before the end. */
  onResponseEnd?(): Buffer | null
  /**
   * Called after onResponseHead of a chunked (resized) answer with a way to write onto it between the
   * upstream's chunks (an event a hook puts on an event stream); push returns false once it cannot.
   */
  onStreamOpen?(push: (bytes: Buffer) => boolean): void
  /** Called exactly once with the final outcome. */
  onDone(outcome: ProxyOutcome): void
  /**
   * True: when the client leaves after its request was sent whole, the upstream's answer is still read to
   * its end through the hooks (kept for a retry), and onDone reports client_aborted once it ended.
   */
  readonly keepsAnswer?: boolean
}

/** Set up by the caller with res.onAborted before its first await; proxy() fills in onAbort. */
export interface AbortState {
  aborted: boolean
  onAbort: (() => void) | null
}

const HOP_BY_HOP = [
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'proxy-authorization',
  'proxy-authenticate',
]
// content-length is kept: upstreams get a sized body whenever the client sent one. expect is answered by
// uWS itself (100-continue) and undici refuses to send it. x-forwarded-proto and -host are rebuilt from what
// tollgate saw; x-forwarded-for is appended to when the peer is a trusted proxy, else rebuilt too.
const REQUEST_DROP = [
  ...HOP_BY_HOP,
  'host',
  'expect',
  'x-payment',
  'payment-signature',
  // A pass holder's sign-in is tollgate's credential, not the upstream's.
  'sign-in-with-x',
  'x-forwarded-for',
  'x-forwarded-proto',
  'x-forwarded-host',
  'x-request-id',
]
// Who the client is and how it came, as a proxy in front writes it. From a peer that is not a trusted proxy
// these are the caller's own words (an upstream that logs or rate-limits on X-Real-IP would believe them):
// dropped, so the upstream sees only what tollgate saw. A trusted proxy's are relayed unchanged.
const FORWARDING_CLAIMS = [
  'forwarded',
  'x-real-ip',
  'x-forwarded-port',
  'x-forwarded-prefix',
  'x-forwarded-scheme',
  'x-forwarded-server',
  'x-forwarded-ssl',
  'x-original-forwarded-for',
  'x-client-ip',
  'client-ip',
  'true-client-ip',
  'cf-connecting-ip',
  'fastly-client-ip',
  'x-cluster-client-ip',
]
const DROP = 1
const FROM_TRUSTED_ONLY = 2
// One lookup per request header on the hot path, whichever list names it.
const REQUEST_RULES = new Map<string, number>([
  ...REQUEST_DROP.map((name): [string, number] => [name, DROP]),
  ...FORWARDING_CLAIMS.map((name): [string, number] => [name, FROM_TRUSTED_ONLY]),
])
const MPP_CREDENTIAL = /^\s*payment\s/i
// Headers an owner's configuration must not set: they would break the framing of the upstream request.
const INJECT_REFUSED = new Set([...HOP_BY_HOP, 'host', 'content-length', 'expect'])
// uWS writes its own framing (content-length or chunked) and its own date.
// x-request-id: tollgate's own is written instead (the upstream received it and may echo it).
// CORS: tollgate answers it for metered URLs (cors.ts); a second allow-origin would make browsers refuse
// the answer. The upstream's expose list is relayed and merges with tollgate's (a list header).
const RESPONSE_DROP = new Set([
  ...HOP_BY_HOP,
  'content-length',
  'date',
  'x-request-id',
  'access-control-allow-origin',
  'access-control-allow-credentials',
])

// Statuses, types and messages are in the registry (src/errors.ts).
const ERROR_RESPONSES: Record<UpstreamErrorCode, { code: ErrorCode; details?: ErrorDetails }> = {
  unreachable: { code: 'upstream_unreachable' },
  reset: {
    code: 'upstream_unreachable',
    details: { message: 'The upstream closed the connection before answering.' },
  },
  timeout: {
    code: 'upstream_timeout',
    details: {
      message:
        'The upstream did not answer in time. It may have done the work, so this payment is not released for a ' +
        'retry: a transaction-hash payment is refunded at the end of its retry window, an x402 authorization ' +
        'is never settled.',
    },
  },
  connect_timeout: {
    code: 'upstream_timeout',
    details: { message: 'The upstream could not be connected to in time.' },
  },
  private_target: { code: 'upstream_forbidden' },
  invalid_path: { code: 'invalid_path' },
}

const UNGUARDED = Object.assign(new Error('target requires a guarded dispatcher'), {
  code: 'ERR_TOLLGATE_PRIVATE_TARGET',
})
const ESCAPING_PATH = Object.assign(new Error('the forwarded path would leave the base path'), {
  code: 'ERR_TOLLGATE_INVALID_PATH',
})

/**
 * Whether a sub-path (the part after /m/<id>, without the query) stays under the endpoint's base path
 * however the upstream reads it: no '.' or '..' segment (also before a ';' parameter, as Tomcat reads it),
 * no percent-encoded dot, slash, backslash or NUL (nor a double-encoded one), no backslash. Dots are
 * unreserved (RFC 3986 §2.3), so no honest client encodes them; an upstream that decodes before it
 * resolves would otherwise climb out of the base path with the owner's injected credentials.
 * Every percent-escape is two hex digits, and the bytes they encode are valid UTF-8 (RFC 3629): an overlong
 * form (%c0%ae is '.' to a lenient decoder), a stray or truncated sequence, a surrogate or %ff is what an
 * upstream's decoder may read as something this check never saw.
 * One pass over the characters, no allocation.
 */
export function isConfinedSubPath(path: string): boolean {
  const n = path.length
  for (let i = 0; i < n; i++) {
    const c = path.charCodeAt(i)
    if (c === 92) return false // backslash
    if (c === 37) {
      const byte = escapedByte(path, i)
      if (byte < 0) return false
      // %2e %2f %5c %00
      if (byte === 0x2e || byte === 0x2f || byte === 0x5c || byte === 0) return false
      // %25 followed by one of the above, or by an overlong lead: decoded twice by some stacks.
      if (byte === 0x25 && isDoubleEncodedHazard(hexPair(path, i + 3))) return false
      if (byte >= 0x80) {
        const next = utf8SequenceEnd(path, i, byte)
        if (next < 0) return false
        i = next - 1
      } else i += 2
    } else if (c === 46 && (i === 0 || path.charCodeAt(i - 1) === 47)) {
      // '.' at the start of a segment: '.', '..', '.;x' and '..;x' are dot segments.
      let j = i + 1
      if (j < n && path.charCodeAt(j) === 46) j++
      if (j === n || path.charCodeAt(j) === 47 || path.charCodeAt(j) === 59) return false
    }
  }
  return true
}

function isDoubleEncodedHazard(byte: number): boolean {
  return byte === 0x2e || byte === 0x2f || byte === 0x5c || byte === 0 || byte === 0xc0 || byte === 0xc1
}

function hexPair(path: string, at: number): number {
  const hi = hexDigit(path.charCodeAt(at))
  const lo = hexDigit(path.charCodeAt(at + 1))
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo
}

function hexDigit(c: number): number {
  if (c >= 48 && c <= 57) return c - 48
  const lower = c | 0x20
  return lower >= 97 && lower <= 102 ? lower - 87 : -1
}

/** The byte of the escape '%XY' at `at`, or -1 when it is not '%' and two hex digits. */
function escapedByte(path: string, at: number): number {
  return path.charCodeAt(at) === 37 ? hexPair(path, at + 1) : -1
}

/**
 * Where the percent-encoded UTF-8 sequence led by `lead` (escaped at `at`) ends, or -1 when it is not the one
 * shortest encoding of a scalar value: every continuation byte escaped too, in the ranges of RFC 3629 §4.
 */
function utf8SequenceEnd(path: string, at: number, lead: number): number {
  let more: number
  let min = 0x80
  let max = 0xbf
  if (lead >= 0xc2 && lead <= 0xdf) more = 1
  else if (lead >= 0xe0 && lead <= 0xef) {
    more = 2
    if (lead === 0xe0) min = 0xa0 // overlong
    if (lead === 0xed) max = 0x9f // UTF-16 surrogates
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    more = 3
    if (lead === 0xf0) min = 0x90 // overlong
    if (lead === 0xf4) max = 0x8f // past U+10FFFF
  } else return -1 // a continuation byte, an overlong lead (c0, c1) or f5-ff
  let pos = at + 3
  for (let k = 0; k < more; k++, pos += 3) {
    const byte = escapedByte(path, pos)
    if (byte < min || byte > max) return -1
    min = 0x80
    max = 0xbf
  }
  return pos
}

/**
 * Streams the request to the upstream and the response back, then reports the outcome through hooks.
 * Call after the payment is claimed; `abort` must have been wired to res.onAborted before the first await.
 */
export function proxy(
  dispatcher: UpstreamDispatcher,
  res: HttpResponse,
  req: ForwardRequest,
  body: RequestBody,
  target: UpstreamTarget,
  abort: AbortState,
  hooks: ProxyHooks,
): void {
  const forward = new Forward(res, body, hooks, req.method === 'HEAD', req.requestId)
  if (abort.aborted) {
    forward.onClientAbort()
    return
  }
  abort.onAbort = forward.onClientAbort
  if (!target.allowPrivate && dispatcher.allowPrivate) {
    // This dispatcher does not check where it connects: refuse rather than go unguarded.
    forward.onError(UNGUARDED)
    return
  }
  // The metered route refuses these before anything is claimed; checked again here so that no caller of
  // proxy() can ever join an escaping path onto the base path.
  const queryAt = req.pathAndQuery.indexOf('?')
  if (!isConfinedSubPath(queryAt < 0 ? req.pathAndQuery : req.pathAndQuery.slice(0, queryAt))) {
    forward.onError(ESCAPING_PATH)
    return
  }
  let path = target.basePath + req.pathAndQuery
  if (path.charCodeAt(0) !== 47) path = '/' + path
  const options: Dispatcher.DispatchOptions = {
    origin: target.origin,
    path,
    method: req.method as Dispatcher.HttpMethod,
    headers: forwardHeaders(req, target),
    // undici takes any async iterable as a body (see Dispatcher.dispatch); its type only lists Readable.
    body: expectsBody(req.headers) ? (body.complete ? body.takeAll() : (body as unknown as Buffer)) : null,
    headersTimeout: target.timeoutMs,
    bodyTimeout: target.timeoutMs,
  }
  forward.sentMs = performance.now()
  dispatcher.dispatch(options, forward)
}

/** The flat [name, value, …] list undici takes without converting it. */
export function forwardHeaders(req: ForwardRequest, target: UpstreamTarget): string[] {
  const inject = target.injectHeaders
  const out: string[] = []
  let host = ''
  let forwardedFor = ''
  let connection = ''
  const traceparent = req.traceparent
  const trusted = req.peerTrusted
  for (const [name, value] of req.headers) {
    const rule = REQUEST_RULES.get(name)
    if (rule === DROP) {
      if (name === 'host') host = value
      else if (name === 'x-forwarded-for') {
        if (trusted) forwardedFor = forwardedFor === '' ? value : `${forwardedFor}, ${value}`
      } else if (name === 'connection') connection = value.toLowerCase()
      continue
    }
    if (rule === FROM_TRUSTED_ONLY && !trusted) continue
    // An MPP credential (Authorization: Payment …) is tollgate's payment, not the upstream's credential; any
    // other Authorization is the caller's own and goes through.
    if (name === 'authorization' && MPP_CREDENTIAL.test(value)) continue
    if (inject.length > 0 && isInjected(name, inject)) continue
    // x-tollgate-agent* carries the agent identity tollgate verified (docs/agent-identity.md): a caller's
    // own copy is never forwarded, so the merchant can trust the header whenever it is present.
    if (name.startsWith('x-tollgate-agent')) continue
    // Tracing on: the upstream's parent is tollgate's upstream span, not the caller's.
    if (traceparent !== null && (name === 'traceparent' || name === 'tracestate')) continue
    out.push(name, value)
  }
  if (connection !== '' && connection !== 'keep-alive' && connection !== 'close') dropListed(out, connection)
  for (const [name, value] of inject) {
    const lower = name.toLowerCase()
    if (!INJECT_REFUSED.has(lower)) out.push(lower, value)
  }
  const remote = req.remoteAddress
  out.push(
    'x-forwarded-for',
    forwardedFor === '' ? remote : `${forwardedFor}, ${remote}`,
    'x-forwarded-proto',
    'http',
  )
  if (host !== '') out.push('x-forwarded-host', host)
  out.push('x-request-id', req.requestId)
  if (traceparent !== null) out.push('traceparent', traceparent)
  out.push('host', target.host)
  return out
}

function isInjected(name: string, inject: Array<[string, string]>): boolean {
  for (const [injected] of inject) {
    if (injected.length === name.length && injected.toLowerCase() === name) return true
  }
  return false
}

/** Removes the headers a Connection header names (they are hop-by-hop too). */
function dropListed(out: string[], connection: string): void {
  const listed = connection.split(',').map((token) => token.trim())
  for (let i = out.length - 2; i >= 0; i -= 2) {
    if (listed.includes(out[i]!)) out.splice(i, 2)
  }
}

/** A request carries a body only when it says so (RFC 9112 §6.3); GETs must not get a chunked one. */
function expectsBody(headers: Array<[string, string]>): boolean {
  for (const [name, value] of headers) {
    if (name === 'transfer-encoding') return true
    if (name === 'content-length') return value !== '0'
  }
  return false
}

function classify(err: Error): UpstreamErrorCode {
  switch ((err as NodeJS.ErrnoException).code) {
    case 'UND_ERR_HEADERS_TIMEOUT':
    case 'UND_ERR_BODY_TIMEOUT':
      return 'timeout'
    case 'UND_ERR_CONNECT_TIMEOUT':
    case 'ETIMEDOUT':
      return 'connect_timeout'
    case 'ERR_TOLLGATE_PRIVATE_TARGET':
      return 'private_target'
    case 'ERR_TOLLGATE_INVALID_PATH':
      return 'invalid_path'
    case 'UND_ERR_SOCKET':
    case 'ECONNRESET':
    case 'EPIPE':
      return 'reset'
    default:
      return 'unreachable'
  }
}

// res.cork() runs its callback synchronously, so one module-level slot hands it the forward without a
// closure per chunk.
let corked: Forward
function corkedHead(): void {
  corked.writeHead()
}
function corkedData(): void {
  corked.writeData()
}
function corkedEnd(): void {
  corked.writeEnd()
}
function corkedError(): void {
  corked.writeError()
}
function flush(): void {}

/** Forwards whose head arrived in the current read and is not written yet (see onHeaders). */
const headsDue: Forward[] = []
function writeDueHeads(): void {
  for (let i = 0; i < headsDue.length; i++) headsDue[i]!.writeHeadIfDue()
  headsDue.length = 0
}

// Children resolved once: a label look-up per call would hash and allocate. 1xx heads are never final.
const headSeconds = {
  '1xx': upstreamDuration.labels('1xx'),
  '2xx': upstreamDuration.labels('2xx'),
  '3xx': upstreamDuration.labels('3xx'),
  '4xx': upstreamDuration.labels('4xx'),
  '5xx': upstreamDuration.labels('5xx'),
}

/** Lower-cased names of the response head being relayed, reused from call to call. */
const names: string[] = []

/**
 * One call in flight, as an undici dispatch handler. Uses the handler methods undici's core calls
 * directly (onConnect/onHeaders/onData/onComplete/onError): the newer controller API wraps them and
 * parses every response head into an object, which the relay does not need.
 */
class Forward implements Dispatcher.DispatchHandler {
  readonly #res: HttpResponse
  readonly #body: RequestBody
  readonly #hooks: ProxyHooks
  readonly #headOnly: boolean
  readonly #requestId: string
  /** Upstream status once its head arrived, else 0. */
  #status = 0
  /** Body length from the upstream's content-length (relayed with tryEnd), or -1 to relay chunked. */
  #total = -1
  #noBody = false
  #bytes = 0
  /** The outcome is reported; after a client abort res is dead and must not be touched. */
  #done = false
  /** The client left while the answer is kept (hooks.keepsAnswer): read on, write nothing. */
  #clientGone = false
  /** res was ended by tryEnd; only the upstream's completion is awaited. */
  #ended = false
  #flowing = true
  #watchingWritable = false
  /** Inside onRead's cork; closeAfterRead: the connection is to be cut when it ends. */
  #reading = false
  #closeAfterRead = false
  #head: Buffer[] | null = null
  #extra: Array<[string, string]> | undefined
  #chunk: Buffer | null = null
  /** A chunk tryEnd took only part of, and the write offset before it. */
  #pending: Buffer | null = null
  #pendingBase = 0
  /**
   * A chunked answer's bytes that came while the client was full, copied, and whether its end waits behind
   * them. uWS frames each write() as a chunk, and a write added to a response already in backpressure can
   * lose bytes of its framing in this uWS build (the client reads "Expected LF after chunk data"; reported
   * against uWebSockets.js too): nothing is written while it is full, and what waits goes out in one cork
   * when it drains, stopping again at the first write it cannot take, as uWS's own chunked example does.
   */
  #queued: Buffer[] = []
  #endQueued = false
  /** The body read while the head is held (hooks.readsWhileHeld), copied; null when not holding. */
  #held: Buffer[] | null = null
  #heldEnded = false
  #errorCode: UpstreamErrorCode = 'unreachable'
  #abortUpstream: ((err?: Error) => void) | null = null
  #resumeUpstream: (() => void) | null = null
  /** performance.now() when the request was handed to the client: the upstream's time to headers starts here. */
  sentMs = 0

  constructor(res: HttpResponse, body: RequestBody, hooks: ProxyHooks, headOnly: boolean, requestId: string) {
    this.#res = res
    this.#body = body
    this.#hooks = hooks
    this.#headOnly = headOnly
    this.#requestId = requestId
  }

  /** Wired to the caller's res.onAborted. */
  readonly onClientAbort = (): void => {
    if (this.#done || this.#clientGone) return
    if (this.#hooks.keepsAnswer === true && this.#body.complete) {
      // res is dead from here on; the upstream goes on (resumed if backpressure paused it) into the hooks.
      this.#clientGone = true
      this.#resumeUpstream?.()
      return
    }
    this.#done = true
    this.#body.fail()
    // Abort rather than leave the dispatch paused: a paused one holds its pooled socket forever. The
    // error undici then reports comes back to onError, which ignores it.
    this.#abortUpstream?.(CLIENT_LEFT)
    this.#hooks.onDone({ kind: 'client_aborted', status: this.#status === 0 ? null : this.#status })
  }

  onConnect(abort: (err?: Error) => void): void {
    // The client may have left while the request waited for a socket.
    if (this.#done) abort(CLIENT_LEFT)
    else this.#abortUpstream = abort
  }

  /**
   * One read of the upstream's socket, under one cork of the client's: the head, chunks and end it carries
   * go out in one send. A chunked answer brings several chunks a read (an event stream's burst of events),
   * and each corked on its own was a send() each.
   */
  onRead(feed: () => void): void {
    if (this.#done || this.#clientGone || this.#ended) return feed()
    this.#reading = true
    try {
      this.#res.cork(feed)
    } finally {
      this.#reading = false
    }
    // A connection cut inside the cork would take what the cork holds with it (the head and the chunks
    // before the error): it is cut once they are out.
    if (this.#closeAfterRead) this.#res.close()
  }

  onHeaders(status: number, head: Buffer[], resume: () => void): boolean {
    // Informational answers (103 Early Hints) are not relayed; the final head follows.
    if (status < 200) return true
    headSeconds[statusClass(status)].observe((performance.now() - this.sentMs) / 1000)
    // Cannot happen once abort() ran (undici stops calling), but res would be dead: never touch it.
    if (this.#done) return false
    this.#resumeUpstream = resume
    const extra = this.#hooks.onResponseHead(status, head)
    this.#status = status
    if (extra instanceof Promise && this.#hooks.readsWhileHeld === true) {
      this.#holdWhileReading(extra, head)
      return true
    }
    if (extra instanceof Promise) {
      // Nothing is written until the extra headers are known; the upstream waits (false pauses it).
      extra.then((headers) => {
        if (this.#done) return
        if (this.#clientGone) return resume()
        this.#extra = headers
        this.#head = head
        headsDue.push(this)
        if (headsDue.length === 1) queueMicrotask(writeDueHeads)
        resume()
      })
      return false
    }
    this.#extra = extra
    if (this.#hooks.onStreamOpen !== undefined && this.#hooks.resizes === true)
      this.#hooks.onStreamOpen(this.push)
    if (this.#clientGone) return true
    this.#head = head
    // The head is written with the first body bytes (or the end) when they come in the same read, which
    // they usually do: one cork, one send() to the client instead of two. Otherwise (a stream whose body
    // comes later) the microtask after this read writes it alone.
    headsDue.push(this)
    if (headsDue.length === 1) queueMicrotask(writeDueHeads)
    return true
  }

  /** The head waits for `extra` while the body is read and kept (hooks.readsWhileHeld). */
  #holdWhileReading(extra: Promise<Array<[string, string]>>, head: Buffer[]): void {
    this.#held = []
    // The head's buffers are views of the socket's read buffer, which the body's reads overwrite.
    const kept = head.map((b) => Buffer.from(b))
    extra.then((headers) => {
      if (this.#done || this.#clientGone) return
      const body = this.#held!
      this.#held = null
      this.#extra = headers
      this.#head = kept
      this.#res.cork(() => {
        this.writeHead()
        if (body.length > 0) {
          this.#chunk = body.length === 1 ? body[0]! : Buffer.concat(body)
          this.writeData()
        }
        // A sized body taken only in part by tryEnd ends when the socket drains (#drained), not here.
        if (this.#heldEnded && !this.#ended && this.#pending === null) this.writeEnd()
      })
      if (this.#heldEnded) this.#settle({ kind: 'responded', status: this.#status, bytes: this.#bytes })
    })
  }

  /**
   * Bytes of tollgate's own between two upstream chunks of a chunked answer (hooks.onStreamOpen). The
   * caller keeps them whole (an event between events); false once the answer cannot take them.
   */
  readonly push = (bytes: Buffer): boolean => {
    if (this.#done || this.#clientGone || this.#ended || this.#noBody) return false
    if (this.#head === null && this.#total >= 0) return false
    let ok = false
    this.#res.cork(() => {
      if (this.#head !== null) this.writeHead()
      if (this.#total >= 0 || this.#noBody) return
      ok = true
      this.#bytes += bytes.length
      this.#writeChunk(bytes)
    })
    return ok
  }

  /** Writes the head now if it is still waiting (from the microtask, under its own cork). */
  writeHeadIfDue(): void {
    if (this.#head === null || this.#done || this.#clientGone) return
    corked = this
    this.#res.cork(corkedHead)
  }

  writeHead(): void {
    const res = this.#res
    const status = this.#status
    res.writeStatus(statusLine(status))
    const length = relayHeaders(res, this.#head!)
    this.#head = null
    const extra = this.#extra
    if (extra !== undefined) for (const [name, value] of extra) res.writeHeader(name, value)
    if (this.#headOnly || status === 204 || status === 304) {
      this.#noBody = true
      // endWithoutBody(length) leaves this uWS build's response pending forever: write it as a header.
      if (length >= 0 && status !== 204) res.writeHeader('content-length', String(length))
    } else {
      this.#total = this.#hooks.resizes === true ? -1 : length
    }
  }

  onData(chunk: Buffer): boolean {
    const hooks = this.#hooks
    if (this.#clientGone) {
      hooks.onResponseData?.(chunk)
      return true
    }
    if (this.#held !== null) {
      const out = hooks.onResponseData === undefined ? chunk : hooks.onResponseData(chunk)
      if (out.length > 0) this.#held.push(Buffer.from(out))
      return true
    }
    this.#chunk = hooks.onResponseData === undefined ? chunk : hooks.onResponseData(chunk)
    corked = this
    this.#res.cork(corkedData)
    // false pauses the upstream socket until #drained() resumes it.
    return this.#flowing
  }

  writeData(): void {
    if (this.#head !== null) this.writeHead()
    const res = this.#res
    const chunk = this.#chunk!
    this.#chunk = null
    this.#bytes += chunk.length
    if (this.#total < 0) {
      // An empty write would end a chunked answer: a chunk taken out entirely is not written.
      if (chunk.length === 0) return
      this.#writeChunk(chunk)
      return
    }
    // The last bytes end the response inside tryEnd, and res dies with it: let the upload go first.
    if (this.#bytes >= this.#total) this.#body.release()
    const base = res.getWriteOffset()
    const [ok, ended] = res.tryEnd(chunk, this.#total)
    if (ended) {
      this.#ended = true
    } else if (!ok) {
      this.#pending = chunk
      this.#pendingBase = base
      this.#backpressure()
    }
  }

  /** One piece of a chunked answer: written, or kept (a copy: chunks are views of a read buffer) while full. */
  #writeChunk(bytes: Buffer): void {
    if (!this.#flowing) {
      this.#queued.push(Buffer.from(bytes))
      return
    }
    if (!this.#res.write(bytes)) this.#backpressure()
  }

  /** What waited while the client was full, in one cork; false when the client filled up again. */
  #writeQueued(): boolean {
    let ok = true
    this.#res.cork(() => {
      while (ok && this.#queued.length > 0) ok = this.#res.write(this.#queued.shift()!)
      if (ok && this.#endQueued) {
        this.#endQueued = false
        this.#res.end()
      }
    })
    return ok
  }

  #backpressure(): void {
    this.#flowing = false
    if (this.#watchingWritable) return
    // uWS keeps one onWritable handler per response: register it on the first backpressure only.
    this.#watchingWritable = true
    this.#res.onWritable((offset) => this.#drained(offset))
  }

  #drained(offset: number): boolean {
    const pending = this.#pending
    if (pending !== null) {
      const [ok, ended] = this.#res.tryEnd(pending.subarray(offset - this.#pendingBase), this.#total)
      if (ended) this.#ended = true
      // Still full: uWS calls again once the socket drains.
      else if (!ok) return false
      this.#pending = null
    } else if (this.#queued.length > 0 || this.#endQueued) {
      // Still full: uWS calls again once the socket drains.
      if (!this.#writeQueued()) return false
    } else {
      // write() put the whole chunk in uWS's own buffer, and uWS stops draining that buffer by itself once
      // an onWritable handler is registered: an empty cork/uncork flushes it.
      this.#res.cork(flush)
    }
    this.#flowing = true
    this.#resumeUpstream!()
    return true
  }

  onComplete(): void {
    if (this.#done) return
    if (this.#clientGone) {
      this.#hooks.onResponseEnd?.()
      this.#settle({ kind: 'client_aborted', status: this.#status === 0 ? null : this.#status })
      return
    }
    if (this.#held !== null) {
      // The head is still held: the end is kept with the body, and goes out when the head does.
      this.#heldEnded = true
      const tail = this.#hooks.onResponseEnd?.() ?? null
      if (tail !== null && tail.length > 0) this.#held.push(Buffer.from(tail))
      return
    }
    if (!this.#ended) {
      corked = this
      this.#res.cork(corkedEnd)
    }
    this.#settle({ kind: 'responded', status: this.#status, bytes: this.#bytes })
  }

  writeEnd(): void {
    if (this.#head !== null) this.writeHead()
    // A held answer's end went through onResponseEnd when it came (#holdWhileReading).
    const held = this.#heldEnded ? null : (this.#hooks.onResponseEnd?.() ?? null)
    if (held !== null && held.length > 0 && this.#total < 0 && !this.#noBody) {
      this.#bytes += held.length
      this.#writeChunk(held)
    }
    this.#body.release()
    this.#ended = true
    if (this.#noBody) this.#res.endWithoutBody()
    // The end goes out behind what waits for the client (#drained).
    else if (!this.#flowing) this.#endQueued = true
    else this.#res.end()
  }

  onError(err: Error): void {
    // Already reported: the client left and this is the abort coming back.
    if (this.#done) return
    if (this.#clientGone) {
      this.#body.release()
      this.#settle({
        kind: 'upstream_error',
        code: classify(err),
        status: this.#status === 0 ? null : this.#status,
      })
      return
    }
    if (this.#ended) {
      this.#settle({ kind: 'responded', status: this.#status, bytes: this.#bytes })
      return
    }
    const code = classify(err)
    if (this.#held !== null && !this.#heldEnded) {
      // Broken off while the head was held: nothing is out, so the client is told as if no head had come.
      this.#held = null
      this.#errorCode = code
      corked = this
      this.#res.cork(corkedError)
      this.#settle({ kind: 'upstream_error', code, status: this.#status })
      return
    }
    if (this.#status === 0) {
      this.#errorCode = code
      corked = this
      this.#res.cork(corkedError)
      this.#settle({ kind: 'upstream_error', code, status: null })
      return
    }
    // The head (and maybe part of the body) is out or promised by the status the hooks saw: cutting the
    // connection is the only way left to tell the client the body is incomplete. close() runs onAborted, so the outcome is settled first.
    this.#settle({ kind: 'upstream_error', code, status: this.#status })
    this.#body.release()
    if (this.#reading) this.#closeAfterRead = true
    else this.#res.close()
  }

  writeError(): void {
    this.#body.release()
    const response = ERROR_RESPONSES[this.#errorCode]
    writeError(this.#res, response.code, this.#requestId, response.details, CORS_HEADERS)
  }

  #settle(outcome: ProxyOutcome): void {
    this.#done = true
    this.#hooks.onDone(outcome)
  }
}

/** Writes the upstream's headers minus hop-by-hop and framing; returns its content-length or -1. */
function relayHeaders(res: HttpResponse, head: Buffer[]): number {
  let listed: string[] | null = null
  for (let i = 0; i < head.length; i += 2) {
    const name = head[i]!.toString('latin1').toLowerCase()
    names[i >> 1] = name
    if (name === 'connection') {
      const value = head[i + 1]!.toString('latin1').toLowerCase()
      // Node servers send 'keep-alive' on every answer: only a real list costs a split.
      if (value !== 'keep-alive' && value !== 'close') listed = value.split(',').map((token) => token.trim())
    }
  }
  let length = -1
  let chunked = false
  for (let i = 0; i < head.length; i += 2) {
    const name = names[i >> 1]!
    if (RESPONSE_DROP.has(name)) {
      if (name === 'content-length') length = Number(head[i + 1]!.toString('latin1'))
      else if (name === 'transfer-encoding') chunked = true
      continue
    }
    if (listed?.includes(name)) continue
    // The value goes over as the bytes received: no string round trip.
    res.writeHeader(name, head[i + 1]!)
  }
  return chunked ? -1 : length
}
