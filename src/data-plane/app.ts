// The public uWS app: mounts /m/* (metered hot path), /pay/* (checkout) and hands /api/v1/* to the
// control-plane handler it is given. Reads each request synchronously, then answers after the await.
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

export type UwsRoute = (res: HttpResponse, req: HttpRequest) => void

export interface PublicAppOptions {
  bodyLimitBytes: number
  apiHandler: ApiHandler
  /** Where a failure of the API handler itself is logged (it answers 500). */
  logger?: Logger
  /** ANY /m/:endpoint_id and /m/:endpoint_id/* */
  metered?: UwsRoute
  /** /pay/:payment_id (page, status, agent payment) */
  checkout?: UwsRoute
  /** GET /receipts/:receipt_id: a paid call's public receipt */
  receipts?: UwsRoute
  /** GET /.well-known/x402.json and GET /discovery/resources: the public discovery listing */
  discovery?: { wellKnown: UwsRoute; resources: UwsRoute }
  /** GET /.well-known/x402-receipt-keys.json: the public keys that sign offers and receipts */
  receiptKeys?: UwsRoute
  /** Hostile-input limits at the edge; none when absent (tests of other parts). */
  edge?: EdgeLimits
}

/** Checked on every request before its route runs; see createEdgeLimits. */
export interface EdgeLimits {
  maxHeaderBytes: number
  maxHeaders: number
  /** POST /api/v1/register per client address. */
  register: RateLimiter | null
  /** 401 answers per client address: checked before /api/v1 requests, charged after a 401. */
  failedApiKeys: RateLimiter | null
  /** /m/* requests without a payment proof (402 and 404 answers) per client address. */
  unpaidMetered: RateLimiter | null
  /** /pay/* requests without a payment proof per client address. */
  checkout: RateLimiter | null
}

export interface EdgeSettings {
  server: { max_header_bytes: number; max_headers: number }
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
    register: createRateLimiter('register', limits, limits.register, now),
    failedApiKeys: createRateLimiter('failed_api_keys', limits, limits.failed_api_keys, now),
    unpaidMetered: createRateLimiter('unpaid_metered', limits, limits.unpaid_metered, now),
    checkout: createRateLimiter('checkout', limits, limits.checkout, now),
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
  const api = edge ? guarded(edge, 'api', apiBridge(options), null) : apiBridge(options)
  app.any('/api/v1', api)
  app.any('/api/v1/*', api)
  // CORS preflights first: a method route outranks `any` in uWS, and a non-preflight OPTIONS yields to it.
  if (options.metered) {
    app.options('/m/:endpoint_id', preflight)
    app.options('/m/:endpoint_id/*', preflight)
  }
  if (options.checkout) {
    app.options('/pay/:payment_id', preflight)
    app.options('/pay/:payment_id/*', preflight)
  }
  if (options.metered) {
    const metered = edge ? guarded(edge, 'metered', options.metered, edge.unpaidMetered) : options.metered
    app.any('/m/:endpoint_id', metered)
    app.any('/m/:endpoint_id/*', metered)
  }
  if (options.checkout) {
    const checkout = edge ? guarded(edge, 'checkout', options.checkout, edge.checkout) : options.checkout
    app.any('/pay/:payment_id', checkout)
    app.any('/pay/:payment_id/*', checkout)
  }
  if (options.receipts) {
    app.get(
      '/receipts/:receipt_id',
      edge ? guarded(edge, 'receipts', options.receipts, null) : options.receipts,
    )
  }
  if (options.discovery) {
    const d = options.discovery
    app.get('/.well-known/x402.json', edge ? guarded(edge, 'discovery', d.wellKnown, null) : d.wellKnown)
    app.get('/discovery/resources', edge ? guarded(edge, 'discovery', d.resources, null) : d.resources)
  }
  if (options.receiptKeys) app.get('/.well-known/x402-receipt-keys.json', options.receiptKeys)
  app.get('/', (res, req) => {
    res
      .writeHeader('content-type', API_ERROR_HEADERS)
      .writeHeader('x-request-id', requestIdFrom(req.getHeader('x-request-id')))
      .end('{"service":"tollgate","api":"/api/v1"}')
  })
  app.any('/*', (res, req) => {
    const requestId = requestIdFrom(req.getHeader('x-request-id'))
    httpRequests.labels('other', '4xx').inc()
    writeError(res, 'route_not_found', requestId, {
      message: `no route ${req.getMethod().toUpperCase()} ${req.getUrl()}`,
    })
  })
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
// and Transfer-Encoding without an answer, and never calls a handler for more than 48 header lines.

// forEach's callback is one module-level function over module-level scratch state: no closure per request.
let headCount = 0
let headBytes = 0
let contentLength: string | null = null
let badLength = false
let chunked = false
function visitHeader(name: string, value: string): void {
  headCount++
  // As on the wire: 'name: value\r\n'.
  headBytes += name.length + value.length + 4
  if (name === 'content-length') {
    // Two different lengths (or a list) let a front proxy and uWS disagree on where the body ends.
    if (contentLength === null) contentLength = value
    else if (value !== contentLength) badLength = true
    if (!/^\d{1,15}$/.test(value)) badLength = true
  } else if (name === 'transfer-encoding') chunked = true
}

type HeadVerdict = 'ok' | 'bad_framing' | 'too_large'

function inspectHead(req: HttpRequest, edge: EdgeLimits): HeadVerdict {
  headCount = 0
  headBytes = req.getUrl().length + (req.getQuery()?.length ?? 0) + 16
  contentLength = null
  badLength = false
  chunked = false
  req.forEach(visitHeader)
  if (badLength || (chunked && contentLength !== null)) return 'bad_framing'
  if (headCount > edge.maxHeaders || headBytes > edge.maxHeaderBytes) return 'too_large'
  return 'ok'
}

const BAD_FRAMING_MESSAGE =
  'conflicting or invalid Content-Length (or Content-Length with Transfer-Encoding); the connection is closed'

/** Client address as a rate-limit key: an IPv4 address, or the /64 an IPv6 client controls as a whole. */
function clientKey(res: HttpResponse): string {
  const text = Buffer.from(res.getRemoteAddressAsText()).toString()
  if (text.includes('.')) return text.startsWith('::ffff:') ? text.slice(7) : text
  const groups = text.split(':')
  return groups.length === 8 ? `${groups.slice(0, 4).join(':')}::/64` : text
}

// The shape of a proof (a transaction hash, or base64 as x402 payloads are), checked without decoding: a
// header that cannot be a proof does not buy an exemption from the unpaid limits.
const PROOF_SHAPE = /^\s*(?:0x[0-9a-fA-F]{64}|[A-Za-z0-9+/=_-]{17,16383})\s*$/

function hasProof(req: HttpRequest): boolean {
  const header = req.getHeader('x-payment') || req.getHeader('payment-signature')
  return header !== '' && PROOF_SHAPE.test(header)
}

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

/** Runs the edge checks, then the route. `unpaid`: the bucket for requests without a payment proof; a
 * request carrying a proof is never rate limited (its payer has paid, and a refusal would strand it). */
function guarded(edge: EdgeLimits, route: string, next: UwsRoute, unpaid: RateLimiter | null): UwsRoute {
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
    if (unpaid !== null && !hasProof(req)) {
      const decision = unpaid.take(clientKey(res))
      if (!decision.ok)
        return rateLimited(
          res,
          route,
          unpaid,
          decision.retryAfterS,
          requestIdFrom(req.getHeader('x-request-id')),
        )
    }
    next(res, req)
  }
}

const REGISTER_PATH = /^\/api\/v1\/register\/?$/

/** Collects the request (bounded), calls the control-plane handler, writes its answer. */
function apiBridge(options: PublicAppOptions): UwsRoute {
  const limit = options.bodyLimitBytes
  const register = options.edge?.register ?? null
  const failedKeys = options.edge?.failedApiKeys ?? null
  return (res, req) => {
    const method = req.getMethod().toUpperCase()
    const path = req.getUrl()
    const query = req.getQuery() ?? ''
    const headers: Record<string, string> = {}
    req.forEach((k, val) => {
      headers[k] = headers[k] === undefined ? val : `${headers[k]}, ${val}`
    })
    const requestId = requestIdFrom(headers['x-request-id'])
    const remoteAddress = Buffer.from(res.getRemoteAddressAsText()).toString()
    // --- Rate limits on the unauthenticated surfaces: sign-up, and guessing keys (charged on each 401).
    let limitKey: string | null = null
    if (register !== null && method === 'POST' && REGISTER_PATH.test(path)) {
      limitKey = clientKey(res)
      const decision = register.take(limitKey)
      if (!decision.ok) return rateLimited(res, 'api', register, decision.retryAfterS, requestId)
    } else if (failedKeys !== null) {
      limitKey = clientKey(res)
      const decision = failedKeys.check(limitKey)
      if (!decision.ok) return rateLimited(res, 'api', failedKeys, decision.retryAfterS, requestId)
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
