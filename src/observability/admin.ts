// The admin port: /metrics (Prometheus), /healthz (process is up), /readyz (database and chain answer).
import uws from 'uWebSockets.js'
import type { Logger } from './logger.ts'
import { readinessCheck, registry, runScrapeSamplers } from './metrics.ts'

/** A scrape waits at most this long for a readiness check or a sampler (Prometheus' default timeout is 10 s). */
const SCRAPE_SAMPLE_TIMEOUT_MS = 3_000

export interface ReadinessCheck {
  name: string
  check(): Promise<{ ok: boolean; detail?: string }>
}

export interface AdminServer {
  port: number
  close(): void
}

export async function startAdminServer(options: {
  host: string
  port: number
  checks: ReadinessCheck[]
  logger: Logger
  /** Extra routes, e.g. the reconcile report. */
  routes?: Record<string, () => Promise<{ status: number; body: unknown }>>
}): Promise<AdminServer> {
  const app = uws.App()
  app.get('/healthz', (res) => {
    res.writeHeader('content-type', 'application/json').end('{"status":"ok"}')
  })
  // Readiness is sampled on every scrape too (tollgate_readiness_check_ok), so an alert can say which check fails.
  const runChecks = (timeoutMs?: number) =>
    Promise.all(options.checks.map((c) => runCheck(c, timeoutMs))).then((results) => {
      for (const r of results) readinessCheck.set({ check: r.name }, r.ok ? 1 : 0)
      return results
    })
  app.get('/metrics', (res) => {
    const state = onAbort(res)
    Promise.all([runChecks(SCRAPE_SAMPLE_TIMEOUT_MS), runScrapeSamplers(SCRAPE_SAMPLE_TIMEOUT_MS)])
      .then(() => registry.metrics())
      .then(
        (text) => reply(res, state, 200, registry.contentType, text),
        (err) => reply(res, state, 500, 'text/plain', String(err)),
      )
  })
  app.get('/readyz', (res) => {
    const state = onAbort(res)
    runChecks().then((results) => {
      const ready = results.every((r) => r.ok)
      const body = JSON.stringify({ status: ready ? 'ready' : 'not_ready', checks: results })
      reply(res, state, ready ? 200 : 503, 'application/json', body)
    })
  })
  for (const [path, route] of Object.entries(options.routes ?? {})) {
    app.get(path, (res) => {
      const state = onAbort(res)
      route().then(
        (r) => reply(res, state, r.status, 'application/json', JSON.stringify(r.body, bigintToString)),
        (err) =>
          reply(res, state, 500, 'application/json', JSON.stringify({ error: (err as Error).message })),
      )
    })
  }
  app.any('/*', (res) => {
    res
      .writeStatus('404 Not Found')
      .writeHeader('content-type', 'application/json')
      .end('{"error":"not_found"}')
  })
  return new Promise((resolve, reject) => {
    app.listen(options.host, options.port, (socket) => {
      if (!socket) return reject(new Error(`admin port ${options.host}:${options.port} is not available`))
      resolve({
        port: uws.us_socket_local_port(socket),
        close: () => uws.us_listen_socket_close(socket),
      })
    })
  })
}

async function runCheck(
  c: ReadinessCheck,
  timeoutMs?: number,
): Promise<{ name: string; ok: boolean; detail?: string }> {
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

function onAbort(res: uws.HttpResponse): { aborted: boolean } {
  const state = { aborted: false }
  res.onAborted(() => {
    state.aborted = true
  })
  return state
}

function reply(
  res: uws.HttpResponse,
  state: { aborted: boolean },
  status: number,
  type: string,
  body: string,
) {
  if (state.aborted) return
  res.cork(() => {
    res.writeStatus(String(status)).writeHeader('content-type', type).end(body)
  })
}

function bigintToString(_k: string, v: unknown) {
  return typeof v === 'bigint' ? v.toString() : v
}
