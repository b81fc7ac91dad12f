// The public uWS app: mounts /m/* (metered hot path), /pay/* (checkout), /dashboard and hands /api/v1/* to the
// control-plane handler it is given. Reads each request synchronously, then answers after the await.

import type { WebSocketBehavior } from 'uWebSockets.js'
import { createHash } from 'node:crypto'
import { LRUCache } from 'lru-cache'
import { ERRORS, type ErrorCode, writeError } from '../errors.ts'
import type { ApiHandler } from '../http-exchange.ts'
import type { Logger } from '../observability/logger.ts'
import { httpRequests, statusClass } from '../observability/metrics.ts'
import { assertPortFree } from '../port-probe.ts'
import {
  createRateLimiter,
  type RateLimiter,
  type RateLimitSettings,
  rateLimitedHeaders,
} from '../rate-limit.ts'
import { nextRequestId, requestIdFrom } from '../request-id.ts'
import { mppCredential } from '../wire/proof.ts'
import {
  type ClientKey,
  createClientKey,
  createPeerTrust,
  type PeerTrust,
  peerAddress,
} from './client-address.ts'
import { CORS_HEADERS, preflight } from './cors.ts'
import {
  assertNativeUws,
  type HttpRequest,
  type HttpResponse,
  hideServerBanner,
  statusLine,
  type TemplatedApp,
  uws,
} from './uws.ts'
import type { SessionData } from './ws-session.ts'

export type UwsRoute = (res: HttpResponse, req: HttpRequest) => void

export interface PublicAppOptions {
  bodyLimitBytes: number
  apiHandler: ApiHandler
  /** Where a failure of the API handler itself is logged (it answers 500). */
  logger?: Logger
  /** ANY /m/:endpoint_id and /m/:endpoint_id/* */
  metered?: UwsRoute
  /** WebSocket upgrades on /m/*: paid sessions (ws-session.ts). uWS tries an upgrade route first and yields
   * any request without a WebSocket key to `metered`: one header read per GET. */
  websocket?: WebSocketBehavior<SessionData>
  /** /pass/:endpoint_id: buying an endpoint's pass (pass-purchase.ts) */
  pass?: UwsRoute
  /** /pay/:payment_id (page, status, agent payment) */
  checkout?: UwsRoute
  /** /dashboard and its assets (static; the page acts through /api/v1) */
  dashboard?: UwsRoute
  /** GET /receipts/:receipt_id: a paid call's public receipt */
  receipts?: UwsRoute
  /**
   * GET /.well-known/x402.json and GET /discovery/resources: the public discovery listing; GET /openapi.json:
   * the same endpoints as MPP's discovery document, and GET /llms.txt as Markdown for language models
   */
  discovery?: { wellKnown: UwsRoute; resources: UwsRoute; openApi: UwsRoute; llmsTxt: UwsRoute }
  /** GET /.well-known/x402-receipt-keys.json: the public keys that sign offers and receipts */
  receiptKeys?: UwsRoute
  /** Hostile-input limits at the edge; none when absent (tests of other parts). */
  edge?: EdgeLimits
}

/** Checked on every request before its route runs; see createEdgeLimits. */
export interface EdgeLimits {
  maxHeaderBytes: number
  maxHeaders: number
  /** server.accept_chunked_requests: false refuses a chunked request body at the head (see inspectHead). */
  acceptChunked: boolean
  /** The rate-limit key of a request: its client address (server.trusted_proxies decides which). */
  clientKey: ClientKey
  /** Whether the peer is a trusted proxy: the forwarding headers sent upstream are then appended to. */
  peerTrusted: PeerTrust
  /** POST /api/v1/register per client address. */
  register: RateLimiter | null
  /**
   * 401 answers per client address: checked before /api/v1 requests, charged after a 401. Per address only:
   * a bucket keyed by anything a request names (a key prefix, say) lets whoever has seen that much of a key
   * lock its owner out from any address.
   */
  failedApiKeys: RateLimiter | null
  /**
   * Digests of keys that authenticated recently in this process: such a key passes the failed-key limit, so
   * wrong keys sent from its own address do not lock it out either.
   */
  goodKeys: LRUCache<string, true>
  /** /m/* requests per client address: without a proof charged at once, with one when it is refused. */
  unpaidMetered: RateLimiter | null
  /** /pay/* requests per client address: without a proof charged at once, with one when it is refused. */
  checkout: RateLimiter | null
}

export interface EdgeSettings {
  server: {
    max_header_bytes: number
    max_headers: number
    accept_chunked_requests: boolean
    trusted_proxies: readonly string[]
  }
  rate_limits: RateLimitSettings & {
    register: { burst: number; per_minute: number }
    failed_api_keys: { burst: number; per_minute: number }
    unpaid_metered: { burst: number; per_minute: number }
    checkout: { burst: number; per_minute: number }
  }
}

export function createEdgeLimits(settings: EdgeSettings, now?: () => number): EdgeLimits {
  const limits = settings.rate_limits
  return {
    maxHeaderBytes: settings.server.max_header_bytes,
    maxHeaders: settings.server.max_headers,
    acceptChunked: settings.server.accept_chunked_requests,
    clientKey: createClientKey(settings.server.trusted_proxies),
    peerTrusted: createPeerTrust(settings.server.trusted_proxies),
    register: createRateLimiter('register', limits, limits.register, now),
    failedApiKeys: createRateLimiter('failed_api_keys', limits, limits.failed_api_keys, now),
    goodKeys: new LRUCache({ max: 10_000, ttl: 3_600_000 }),
    unpaidMetered: createRateLimiter('unpaid_metered', limits, limits.unpaid_metered, now),
    checkout: createRateLimiter('checkout', limits, limits.checkout, now),
  }
}

/**
 * What a paid route (metered, checkout) tells the edge: a request carrying a payment header passed its
 * limit unspent (a payer who paid is never limited), and is charged when its proof turns out not to pay.
 */
export interface ProofEdge {
  clientKey: ClientKey
  peerTrusted: PeerTrust
  /** The proof of a request from `client` was refused (402) or named nothing that exists (404). */
  proofRefused(client: string): void
}

/** The ProofEdge over one bucket: unpaid_metered for /m/*, checkout for /pay/*. */
export function proofEdge(edge: EdgeLimits, bucket: RateLimiter | null): ProofEdge {
  return {
    clientKey: edge.clientKey,
    peerTrusted: edge.peerTrusted,
    proofRefused: bucket === null ? () => {} : (client) => void bucket.take(client),
  }
}

export interface Listening {
  port: number
  close(): void
}

const API_ERROR_HEADERS = 'application/json; charset=utf-8'

export function createPublicApp(options: PublicAppOptions): TemplatedApp {
  assertNativeUws()
  hideServerBanner()
  const app = uws.App()
  const edge = options.edge
  const api = edge ? guarded(edge, 'api', apiBridge(options), null, 'always') : apiBridge(options)
  app.any('/api/v1', api)
  app.any('/api/v1/*', api)
  // Static files: the page acts through /api/v1 above.
  if (options.dashboard) {
    const dashboard = edge ? guarded(edge, 'dashboard', options.dashboard, null, 'always') : options.dashboard
    app.any('/dashboard', dashboard)
    app.any('/dashboard/*', dashboard)
  }
  // CORS preflights first: a method route outranks `any` in uWS, and a non-preflight OPTIONS yields to it.
  // Every route checks the framing first: a request smuggled behind a bad one is never parsed, whatever
  // the route of the bad one.
  const framed = (route: string, next: UwsRoute) => (edge ? guarded(edge, route, next, null, 'always') : next)
  if (options.metered) {
    app.options('/m/:endpoint_id', framed('metered', preflight))
    app.options('/m/:endpoint_id/*', framed('metered', preflight))
  }
  if (options.checkout) {
    app.options('/pay/:payment_id', framed('checkout', preflight))
    app.options('/pay/:payment_id/*', framed('checkout', preflight))
  }
  if (options.metered) {
    const metered = edge
      ? guarded(edge, 'metered', options.metered, edge.unpaidMetered, 'when_refused')
      : options.metered
    app.any('/m/:endpoint_id', metered)
    app.any('/m/:endpoint_id/*', metered)
  }
  if (options.websocket) {
    app.ws('/m/:endpoint_id', options.websocket)
    app.ws('/m/:endpoint_id/*', options.websocket)
  }
  if (options.pass) {
    app.options('/pass/:endpoint_id', framed('pass', preflight))
    app.any(
      '/pass/:endpoint_id',
      edge ? guarded(edge, 'pass', options.pass, edge.unpaidMetered, 'when_refused') : options.pass,
    )
  }
  if (options.checkout) {
    const checkout = edge
      ? guarded(edge, 'checkout', options.checkout, edge.checkout, 'when_refused')
      : options.checkout
    app.any('/pay/:payment_id', checkout)
    app.any('/pay/:payment_id/*', checkout)
  }
  if (options.receipts) {
    app.get(
      '/receipts/:receipt_id',
      edge ? guarded(edge, 'receipts', options.receipts, null, 'always') : options.receipts,
    )
  }
  if (options.discovery) {
    const d = options.discovery
    app.get(
      '/.well-known/x402.json',
      edge ? guarded(edge, 'discovery', d.wellKnown, null, 'always') : d.wellKnown,
    )
    app.get(
      '/discovery/resources',
      edge ? guarded(edge, 'discovery', d.resources, null, 'always') : d.resources,
    )
    app.get('/openapi.json', edge ? guarded(edge, 'discovery', d.openApi, null, 'always') : d.openApi)
    app.get('/llms.txt', edge ? guarded(edge, 'discovery', d.llmsTxt, null, 'always') : d.llmsTxt)
  }
  if (options.receiptKeys) app.get('/.well-known/x402-receipt-keys.json', options.receiptKeys)
  app.get(
    '/',
    framed('other', (res, req) => {
      res
        .writeHeader('content-type', API_ERROR_HEADERS)
        .writeHeader('x-request-id', requestIdFrom(req.getHeader('x-request-id')))
        .end('{"service":"tollgate","api":"/api/v1"}')
    }),
  )
  app.any(
    '/*',
    framed('other', (res, req) => {
      const requestId = requestIdFrom(req.getHeader('x-request-id'))
      httpRequests.labels('other', '4xx').inc()
      writeError(res, 'route_not_found', requestId, {
        message: `no route ${req.getMethod().toUpperCase()} ${req.getUrl()}`,
      })
    }),
  )
  return app
}

export interface ListenOptions {
  /** A worker of one supervising parent, sharing the port with its siblings on purpose (SO_REUSEPORT).
   * Otherwise a port something already listens on is refused before uWS binds it. */
  allowSharedPort?: boolean
}

export async function listen(
  app: TemplatedApp,
  host: string,
  port: number,
  options: ListenOptions = {},
): Promise<Listening> {
  if (!options.allowSharedPort) await assertPortFree(host, port, 'the public port')
  return new Promise((resolve, reject) => {
    app.listen(host, port, (socket) => {
      if (!socket) return reject(new Error(`cannot listen on ${host}:${port} (in use or not permitted)`))
      resolve({ port: uws.us_socket_local_port(socket), close: () => uws.us_listen_socket_close(socket) })
    })
  })
}

// --- Hostile input at the edge -----------------------------------------------------------------------------
// Framing and header limits run before any route; uWS itself closes a request carrying both Content-Length
// and Transfer-Encoding without an answer, closes on a chunk size that is not hex or has an extension, and
// never calls a handler for more than 48 header lines. A framing error is answered (400, 411, 431) and the
// connection closed at once (writeError): what follows it on the socket is never read, since a proxy in
// front may have framed it differently.

// forEach's callback is one module-level function over module-level scratch state: no closure per request.
let headCount = 0
let headBytes = 0
let contentLength: string | null = null
let badFraming = false
let chunked = false
function visitHeader(name: string, value: string): void {
  headCount++
  // As on the wire: 'name: value\r\n'.
  headBytes += name.length + value.length + 4
  if (name === 'content-length') {
    // Two different lengths (or a list) let a front proxy and uWS disagree on where the body ends.
    if (contentLength === null) contentLength = value
    else if (value !== contentLength) badFraming = true
    if (!/^\d{1,15}$/.test(value)) badFraming = true
  } else if (name === 'transfer-encoding') {
    // uWS reads a body as chunked whenever the header names chunked ('chunked, gzip' too); a proxy in front
    // may read such a list, or a repeated header, as a body that runs to the end of the connection.
    if (chunked || value.trim().toLowerCase() !== 'chunked') badFraming = true
    chunked = true
  }
}

type HeadVerdict = 'ok' | 'bad_framing' | 'chunked' | 'too_large'

function inspectHead(req: HttpRequest, edge: EdgeLimits): HeadVerdict {
  headCount = 0
  headBytes = req.getUrl().length + (req.getQuery()?.length ?? 0) + 16
  contentLength = null
  badFraming = false
  chunked = false
  req.forEach(visitHeader)
  if (badFraming || (chunked && contentLength !== null)) return 'bad_framing'
  // uWS de-chunks the body in C++ and hands JS only the data: a chunk line ended by a bare LF, or any two
  // bytes where the CRLF after a chunk's data belongs, reach onData exactly as a well-formed body does, and
  // uWS then reads the bytes after where it thinks the body ended as the next request. A front proxy that
  // reads those chunks differently smuggles a request through; nothing in JS can tell, so refuse them all.
  if (chunked && !edge.acceptChunked) return 'chunked'
  if (headCount > edge.maxHeaders || headBytes > edge.maxHeaderBytes) return 'too_large'
  return 'ok'
}

const CHUNKED_MESSAGE =
  'chunked request bodies are refused here: send the body with a Content-Length; the connection is closed'

const BAD_FRAMING_MESSAGE =
  'conflicting or invalid Content-Length or Transfer-Encoding (only one `chunked`, never with Content-Length); the connection is closed'

function edgeError(
  res: HttpResponse,
  route: string,
  code: ErrorCode,
  message: string,
  headers: Array<[string, string]> = [],
  close = false,
  requestId: string = nextRequestId(),
): void {
  httpRequests.labels(route, statusClass(ERRORS[code].status)).inc()
  // A browser agent reads a 429's Retry-After on metered and checkout URLs too (cors.ts).
  const flat = route === 'api' ? headers.flat() : [...headers.flat(), ...CORS_HEADERS]
  res.cork(() => {
    writeError(res, code, requestId, { message }, flat, close)
  })
}

function rateLimited(
  res: HttpResponse,
  route: string,
  limiter: RateLimiter,
  retryAfterS: number,
  requestId?: string,
): void {
  edgeError(
    res,
    route,
    'rate_limited',
    `too many requests from this address; retry after ${retryAfterS} s`,
    rateLimitedHeaders(limiter, retryAfterS),
    false,
    requestId,
  )
}

/**
 * Runs the edge checks, then the route. `limit`: the bucket of the route's unauthenticated requests.
 * `proofs`: 'when_refused' lets a request carrying a payment header through while its client has a token
 * left without spending it (a payer who paid is never limited, and a refusal would strand it); the route
 * spends it if the proof does not pay (ProofEdge). 'always': every request spends one.
 */
function guarded(
  edge: EdgeLimits,
  route: string,
  next: UwsRoute,
  limit: RateLimiter | null,
  proofs: 'when_refused' | 'always',
): UwsRoute {
  return (res, req) => {
    const verdict = inspectHead(req, edge)
    if (verdict === 'bad_framing')
      return edgeError(
        res,
        route,
        'invalid_framing',
        BAD_FRAMING_MESSAGE,
        [],
        true,
        requestIdFrom(req.getHeader('x-request-id')),
      )
    if (verdict === 'chunked')
      // Answered and closed from the head, before the route runs: nothing is claimed or forwarded, and
      // not one byte of the body is read (writeError closes before uWS parses on).
      return edgeError(
        res,
        route,
        'length_required',
        CHUNKED_MESSAGE,
        [],
        true,
        requestIdFrom(req.getHeader('x-request-id')),
      )
    if (verdict === 'too_large') {
      const message = `request headers exceed ${edge.maxHeaders} fields or ${edge.maxHeaderBytes} bytes`
      return edgeError(
        res,
        route,
        'headers_too_large',
        message,
        [],
        true,
        requestIdFrom(req.getHeader('x-request-id')),
      )
    }
    if (limit !== null) {
      // A pass holder's sign-in is a payment too (read last: an unpaid request reads one header more).
      const header =
        proofs === 'always'
          ? ''
          : req.getHeader('x-payment') ||
            req.getHeader('payment-signature') ||
            mppCredential(req.getHeader('authorization')) ||
            req.getHeader('sign-in-with-x')
      const client = edge.clientKey(res, req)
      const decision = header !== '' && proofs === 'when_refused' ? limit.check(client) : limit.take(client)
      if (!decision.ok)
        return rateLimited(
          res,
          route,
          limit,
          decision.retryAfterS,
          requestIdFrom(req.getHeader('x-request-id')),
        )
    }
    next(res, req)
  }
}

const REGISTER_PATH = /^\/api\/v1\/register\/?$/

const BEARER = /^Bearer\s+(\S+)\s*$/i

/** Collects the request (bounded), calls the control-plane handler, writes its answer. */
function apiBridge(options: PublicAppOptions): UwsRoute {
  const limit = options.bodyLimitBytes
  const edge = options.edge
  const register = edge?.register ?? null
  const failedKeys = edge?.failedApiKeys ?? null
  return (res, req) => {
    const method = req.getMethod().toUpperCase()
    const path = req.getUrl()
    const query = req.getQuery() ?? ''
    const headers: Record<string, string> = {}
    req.forEach((k, val) => {
      headers[k] = headers[k] === undefined ? val : `${headers[k]}, ${val}`
    })
    const requestId = requestIdFrom(headers['x-request-id'])
    const remoteAddress = peerAddress(res)
    // --- Rate limits on the unauthenticated surfaces: sign-up, and guessing keys (charged on each 401).
    let limitKey: string | null = null
    let digest: string | null = null
    if (edge !== undefined && register !== null && method === 'POST' && REGISTER_PATH.test(path)) {
      limitKey = edge.clientKey(res, req)
      const decision = register.take(limitKey)
      if (!decision.ok) return rateLimited(res, 'api', register, decision.retryAfterS, requestId)
    } else if (edge !== undefined && failedKeys !== null) {
      limitKey = edge.clientKey(res, req)
      const presented = BEARER.exec(headers.authorization ?? '')?.[1]
      if (presented !== undefined) digest = createHash('sha256').update(presented).digest('base64')
      // A key that authenticated recently here is let through: wrong keys from its address never lock it out.
      if (digest === null || !edge.goodKeys.has(digest)) {
        const decision = failedKeys.check(limitKey)
        if (!decision.ok) return rateLimited(res, 'api', failedKeys, decision.retryAfterS, requestId)
      }
    }
    let aborted = false
    res.onAborted(() => {
      aborted = true
    })
    const tooLarge = () => {
      if (aborted) return
      aborted = true
      httpRequests.labels('api', '4xx').inc()
      res.cork(() => {
        // Close after answering: the rest of the oversized body is not worth reading.
        writeError(
          res,
          'body_too_large',
          requestId,
          { message: `the body exceeds ${limit} bytes` },
          undefined,
          true,
        )
      })
    }
    const declared = Number(headers['content-length'] ?? 0)
    if (declared > limit) return tooLarge()

    const chunks: Buffer[] = []
    let size = 0
    res.onData((chunk, isLast) => {
      if (aborted) return
      size += chunk.byteLength
      if (size > limit) return tooLarge()
      // uWS reuses the ArrayBuffer after this callback: copy it.
      chunks.push(Buffer.from(new Uint8Array(chunk).slice()))
      if (!isLast) return
      const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)
      options
        .apiHandler({ method, path, query, headers, body, remoteAddress, requestId })
        .then((response) => {
          if (response.status === 401 && failedKeys !== null && limitKey !== null) failedKeys.take(limitKey)
          else if (response.authenticated === true && digest !== null) edge?.goodKeys.set(digest, true)
          if (aborted) return
          res.cork(() => {
            res.writeStatus(statusLine(response.status))
            for (const name in response.headers) res.writeHeader(name, response.headers[name]!)
            res.end(response.body)
          })
        })
        .catch((err) => {
          options.logger?.error('api handler failed', { request_id: requestId, path, err })
          if (aborted) return
          res.cork(() => {
            writeError(res, 'internal_error', requestId)
          })
        })
    })
  }
}

export { statusClass }
