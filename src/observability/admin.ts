// The admin port: /metrics (Prometheus), /healthz (process is up), /readyz (database and chain answer), and
// operator routes (e.g. /reconcile) behind a bearer token. Binds loopback unless admin.host says otherwise.

import uws from 'uWebSockets.js'
import { createHash, timingSafeEqual } from 'node:crypto'
import { type ErrorCode, writeError } from '../errors.ts'
import { assertPortFree } from '../port-probe.ts'
import { type RateLimiter, rateLimitedHeaders } from '../rate-limit.ts'
import { requestIdFrom } from '../request-id.ts'
import type { Logger } from './logger.ts'
import { onScrape, readinessCheck, registry, SCRAPE_SAMPLE_TIMEOUT_MS } from './metrics.ts'

export interface ReadinessCheck {
  name: string
  /** degraded: ready, but something the operator must know (/readyz answers 200 with status degraded). */
  check(): Promise<{ ok: boolean; degraded?: boolean; detail?: string }>
}

export interface AdminServer {
  port: number
  close(): void
}

export interface AdminServerOptions {
  host: string
  port: number
  checks: ReadinessCheck[]
  logger: Logger
  /** Extra routes, e.g. the reconcile report: they need `Authorization: Bearer <token>`. */
  routes?: Record<string, () => Promise<{ status: number; body: unknown }>>
  /** ADMIN_TOKEN; null turns the extra routes off (answered 404 with the reason). */
  token?: string | null
  /** One bucket per extra route (they scan the chain and the books); null = unlimited. */
  routeLimiter?: RateLimiter | null
  /** /readyz answers within this, whatever a dependency does: a check still running then fails. */
  readyTimeoutMs?: number
}

/**
 * /readyz's own deadline. A probe that gets no answer is a failed probe anyway; answering 503 in time says
 * which check hung (a database being restarted, a frozen server) instead of leaving the prober to guess.
 */
export const READY_TIMEOUT_MS = 2_000

export async function startAdminServer(options: AdminServerOptions): Promise<AdminServer> {
  const app = uws.App()
  app.get('/healthz', (res, req) => {
    res
      .writeHeader('content-type', 'application/json')
      .writeHeader('x-request-id', requestIdFrom(req.getHeader('x-request-id')))
      .end('{"status":"ok"}')
  })
  // Readiness is sampled on every scrape too (tollgate_readiness_check_ok), so an alert can say which check fails.
  const runChecks = (timeoutMs?: number) =>
    Promise.all(options.checks.map((c) => runCheck(c, timeoutMs))).then((results) => {
      for (const r of results) readinessCheck.set({ check: r.name }, r.ok ? 1 : 0)
      return results
    })
  app.get('/metrics', (res, req) => {
    const state = onAbort(res, req)
    registry.metrics().then(
      (text) => reply(res, state, 200, registry.contentType, text),
      (err) => reply(res, state, 500, 'text/plain', String(err)),
    )
  })
  app.get('/readyz', (res, req) => {
    const state = onAbort(res, req)
    runChecks(options.readyTimeoutMs ?? READY_TIMEOUT_MS).then((results) => {
      const ready = results.every((r) => r.ok)
      const status = !ready ? 'not_ready' : results.some((r) => r.degraded) ? 'degraded' : 'ready'
      const body = JSON.stringify({ status, checks: results })
      reply(res, state, ready ? 200 : 503, 'application/json', body)
    })
  })
  addOperatorRoutes(app, options)
  app.any('/*', (res, req) => {
    writeError(res, 'route_not_found', requestIdFrom(req.getHeader('x-request-id')), {
      message: `no admin route ${req.getMethod().toUpperCase()} ${req.getUrl()}`,
    })
  })
  // uWS would share a port already taken by another tollgate's admin server (SO_REUSEPORT).
  await assertPortFree(options.host, options.port, 'the admin port')
  // The registry runs its samplers before every read (this port's /metrics, a parent's over cluster IPC).
  const stopSampling = onScrape(async () => {
    await runChecks(SCRAPE_SAMPLE_TIMEOUT_MS)
  })
  return new Promise((resolve, reject) => {
    app.listen(options.host, options.port, (socket) => {
      if (!socket) {
        stopSampling()
        return reject(new Error(`admin port ${options.host}:${options.port} is not available`))
      }
      resolve({
        port: uws.us_socket_local_port(socket),
        close: () => {
          stopSampling()
          uws.us_listen_socket_close(socket)
        },
      })
    })
  })
}

/** The operator routes (e.g. /reconcile): a bearer token compared in constant time, then a rate limit. */
function addOperatorRoutes(
  app: uws.TemplatedApp,
  options: Pick<AdminServerOptions, 'routes' | 'token' | 'routeLimiter' | 'logger'>,
): void {
  const tokenDigest = options.token ? digest(options.token) : null
  const limiter = options.routeLimiter ?? null
  for (const [path, route] of Object.entries(options.routes ?? {})) {
    app.get(path, (res, req) => {
      if (tokenDigest === null) {
        return deny(
          res,
          requestIdFrom(req.getHeader('x-request-id')),
          'admin_route_disabled',
          `${path} is off: set ADMIN_TOKEN to enable it`,
        )
      }
      // Digests of equal length, compared in constant time: the token's length and prefix never leak.
      const m = /^Bearer\s+(\S+)\s*$/i.exec(req.getHeader('authorization'))
      if (!m || !timingSafeEqual(digest(m[1]!), tokenDigest)) {
        return deny(
          res,
          requestIdFrom(req.getHeader('x-request-id')),
          'admin_unauthorized',
          'send Authorization: Bearer <ADMIN_TOKEN>',
          [['www-authenticate', 'Bearer']],
        )
      }
      if (limiter !== null) {
        const decision = limiter.take(path)
        if (!decision.ok) {
          return deny(
            res,
            requestIdFrom(req.getHeader('x-request-id')),
            'rate_limited',
            `${path} runs at most ${limiter.perMinute} times a minute; retry after ${decision.retryAfterS} s`,
            rateLimitedHeaders(limiter, decision.retryAfterS),
          )
        }
      }
      const state = onAbort(res, req)
      route().then(
        (r) => reply(res, state, r.status, 'application/json', JSON.stringify(r.body, bigintToString)),
        (err) => {
          options.logger.error('admin route failed', { request_id: state.requestId, path, err })
          if (state.aborted) return
          res.cork(() => writeError(res, 'internal_error', state.requestId))
        },
      )
    })
  }
}

async function runCheck(
  c: ReadinessCheck,
  timeoutMs?: number,
): Promise<{ name: string; ok: boolean; degraded?: boolean; detail?: string }> {
  let timer: NodeJS.Timeout | undefined
  try {
    const checked = c.check()
    const result = timeoutMs
      ? await Promise.race([
          checked,
          new Promise<{ ok: false; detail: string }>((resolve) => {
            timer = setTimeout(
              () => resolve({ ok: false, detail: `no answer within ${timeoutMs} ms` }),
              timeoutMs,
            )
          }),
        ])
      : await checked
    return { name: c.name, ...result }
  } catch (err) {
    return { name: c.name, ok: false, detail: (err as Error).message }
  } finally {
    clearTimeout(timer)
  }
}

function digest(text: string): Buffer {
  return createHash('sha256').update(text).digest()
}

function deny(
  res: uws.HttpResponse,
  requestId: string,
  code: ErrorCode,
  message: string,
  headers: Array<[string, string]> = [],
): void {
  writeError(res, code, requestId, { message }, headers.flat())
}

function onAbort(res: uws.HttpResponse, req: uws.HttpRequest): { aborted: boolean; requestId: string } {
  const state = { aborted: false, requestId: requestIdFrom(req.getHeader('x-request-id')) }
  res.onAborted(() => {
    state.aborted = true
  })
  return state
}

function reply(
  res: uws.HttpResponse,
  state: { aborted: boolean; requestId: string },
  status: number,
  type: string,
  body: string,
) {
  if (state.aborted) return
  res.cork(() => {
    res
      .writeStatus(String(status))
      .writeHeader('content-type', type)
      .writeHeader('x-request-id', state.requestId)
      .end(body)
  })
}

function bigintToString(_k: string, v: unknown) {
  return typeof v === 'bigint' ? v.toString() : v
}
